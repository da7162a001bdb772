"""WARC records: framing, payload decoding, HTML, and record -> document row (see the ingest package)."""
