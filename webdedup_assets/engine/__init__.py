"""Stage runners over stored Parquet: DuckDB for joins and aggregations, Arrow batches
streamed through core for fingerprinting. Each stage_* function reads its upstream from a
Store, writes its own asset atomically and returns the figures it measured."""

from .candidates import stage_candidate_pairs
from .clustering import stage_clusters, stage_deduped_documents
from .documents import stage_documents
from .errors import WebdedupError
from .fingerprint import stage_band_memberships, stage_fingerprinted
from .manifest import stage_manifest
from .partitions import band_days, fingerprint_days
from .scoring import stage_duplicate_pairs, stage_scored_pairs
from .storage import Store

__all__ = [
    "band_days",
    "fingerprint_days",
    "Store",
    "WebdedupError",
    "stage_band_memberships",
    "stage_candidate_pairs",
    "stage_clusters",
    "stage_deduped_documents",
    "stage_documents",
    "stage_duplicate_pairs",
    "stage_fingerprinted",
    "stage_manifest",
    "stage_scored_pairs",
]
