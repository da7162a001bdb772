"""webdedup: near-duplicate detection for web text as a Dagster asset graph.

Layers: core (pure algorithms) -> engine (stages over stored Parquet) -> defs (Dagster) -> cli.
"""

__version__ = "0.1.0"
