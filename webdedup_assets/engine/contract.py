"""The input contract (defined in webdedup_assets.ingest.contract; re-exported for the engine's importers)."""

from ..ingest.contract import CONTRACT_SCHEMA, REQUIRED_COLUMNS

__all__ = ["CONTRACT_SCHEMA", "REQUIRED_COLUMNS"]
