"""One module per stage: its DuckDB implementation, and beside it (`*_spark.py`) its Spark one.
The engine package imports them all, which registers each on its engine (DUCKDB, SPARK)."""
