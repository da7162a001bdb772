"""User-facing errors (defined in webdedup_assets.errors; re-exported for the engine's importers)."""

from ..errors import WebdedupError

__all__ = ["WebdedupError"]
