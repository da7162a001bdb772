"""Stage runners over stored Parquet: DuckDB for joins and aggregations, Arrow batches
streamed through core for fingerprinting. Each stage is declared once in engine.stage (its
parameter model, upstream, per-day or global); the modules of engine/stages register their
implementations on `DUCKDB` and `SPARK`, and each stage_* function runs one through the contract and
returns its StageResult (documents and manifest still return a dict of figures)."""

from ..errors import WebdedupError
from ..storage.store import Store
from .stage import DUCKDB, STAGES, StageResult
from .stages import candidates_spark, clustering_spark, fingerprint_spark, scoring_spark  # noqa: F401  (register them on SPARK)
from .stages.candidates import stage_candidate_pairs
from .stages.clustering import stage_clusters, stage_deduped_documents
from .stages.documents import stage_documents
from .stages.fingerprint import stage_band_memberships, stage_fingerprinted
from .stages.manifest import stage_manifest
from .stages.scoring import stage_duplicate_pairs, stage_scored_pairs

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
