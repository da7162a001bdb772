"""fingerprinted and band_memberships on Spark: not yet (waiting for the daily storage layout)."""
