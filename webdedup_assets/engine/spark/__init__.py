"""The Spark engine: the stages of engine.stage over the same Parquet layout, on a SparkSession.
`engine.py` holds `SPARK` (the implementations live in engine/stages/*_spark.py); a run passes the
session settings as the `spark` option of Engine.run (SparkSettings) or uses local[*];
`session.py` builds and reuses the session, `io.py` reads and writes the stored assets, `submit.py`
is the spark-submit entry point."""
