"""Input: from files (CSV, Parquet, JSON Lines, WARC) or Common Crawl byte ranges to rows of the input contract.

Below the engine: nothing here imports `webdedup_assets.engine`, Dagster or DuckDB.

    contract.py        the columns every document has (CONTRACT_SCHEMA)
    inputs.py          resolve files, formats (by suffix), the crawl day a file name declares
    jsonl.py           JSON Lines shards: whether one holds a record, the first malformed line
    options.py         WarcOptions: how WARC input is read and Common Crawl ranges fetched
    warc/framing.py    bytes -> framed records with offsets (pure; gzip members, Content-Length)
    warc/payload.py    HTTP transfer and content codings of a stored payload, with leniency counts
    warc/html.py       charset decision, the nesting-depth bound, title and main text (resiliparse)
    warc/records.py    framed record -> document row or listed rejection (fastwarc parses headers)
    warc/collect.py    document and rejection schemas, per-file reports, the streaming collector
    commoncrawl.py     target validation and byte-range fetch (urllib3, injectable client)
    convert.py         WARC files (process pool) or Common Crawl targets -> one Parquet, merged in input order

A new input format: a suffix in inputs.SUFFIX_FORMATS and its DuckDB reader in
engine/reading.source_sql (CSV, Parquet, JSON Lines: the column mapping then applies), or a
converter here that stages contract rows plus its own provenance columns as Parquet (WARC).
"""
