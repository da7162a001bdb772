"""Stage runners over stored Parquet: DuckDB for joins and aggregations, Arrow batches
streamed through core for fingerprinting. Each stage is declared once in engine.stage (its
parameter model, upstream, per-day or global); the modules here register their DuckDB
implementation on `DUCKDB`, and each stage_* function runs one through the contract and
returns its StageResult (documents and manifest still return a dict of figures)."""

from ..errors import WebdedupError
from .candidates import stage_candidate_pairs
from .clustering import stage_clusters, stage_deduped_documents
from .documents import stage_documents
from .fingerprint import stage_band_memberships, stage_fingerprinted
from .manifest import stage_manifest
from .scoring import stage_duplicate_pairs, stage_scored_pairs
from .stage import DUCKDB, STAGES, StageResult
from .storage import Store

__all__ = [
    "DUCKDB",
    "STAGES",
    "StageResult",
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
