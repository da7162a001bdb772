"""Storage: the Parquet-per-asset store, the corpus state and its writer lock, the storage
transaction, publishing the outputs as one set, integrity checks, and the Parquet layout tools
the stages write with."""
