"""The checks of each asset, declared once: the Dagster layer turns them into asset checks and
the pipeline (`webdedup run`) evaluates the same table after each stage."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from ..storage.store import Store
from .invariants import (
    candidates_well_formed,
    cluster_cohesion,
    compare_counts,
    doc_ids_unique,
    duplicates_meet_threshold,
    every_document_in_one_cluster,
    one_representative_per_cluster,
)


@dataclass(frozen=True)
class Check:
    """A check of an asset. kind: "blocking" (a failure stops the run before anything is
    published), "warning" (reported, the run goes on) or "pinned" (counts pinned by an
    expectations file; passed is None when there is none, with the reason in the details)."""

    asset: str
    name: str
    description: str
    evaluate: Callable[[Store], tuple[bool | None, dict[str, Any]]]
    kind: str

    @property
    def label(self) -> str:
        return f"{self.asset}:{self.name}"


def _pinned(asset: str, keys: list[str]) -> Check:
    return Check(
        asset,
        f"{asset}_match_expected_counts",
        f"{', '.join(keys)} equal the counts pinned in the input's expectations file "
        "(<input>.expected.json matched by sha256). Without one the check passes and says so.",
        partial(compare_counts, keys=keys),
        "pinned",
    )


CHECKS = [
    Check("documents", "doc_id_unique", "Every doc_id appears once.", doc_ids_unique, "blocking"),
    Check(
        "candidate_pairs",
        "candidates_well_formed",
        "left_doc_id < right_doc_id and no document without shingles is in any candidate.",
        candidates_well_formed,
        "blocking",
    ),
    Check(
        "duplicate_pairs",
        "duplicates_meet_threshold",
        "Every duplicate pair has exact Jaccard >= threshold (with verify hamming: fingerprints within "
        "max_hamming bits) and left_doc_id < right_doc_id.",
        duplicates_meet_threshold,
        "blocking",
    ),
    Check(
        "clusters",
        "every_document_in_one_cluster",
        "Every document is in exactly one cluster (singletons included).",
        every_document_in_one_cluster,
        "blocking",
    ),
    Check(
        "deduped_documents",
        "one_representative_per_cluster",
        "Exactly one representative per cluster.",
        one_representative_per_cluster,
        "blocking",
    ),
    Check(
        "deduped_documents",
        "clusters_cohesive",
        "WARN (the run goes on) on giant clusters (over 1,000 documents) and on members whose exact Jaccard to "
        "their representative is below the threshold: they joined by chaining (A~B, B~C). Clusters of three or "
        "more, largest first, at most 100,000 members per run.",
        cluster_cohesion,
        "warning",
    ),
    _pinned("documents", ["documents"]),
    _pinned("candidate_pairs", ["candidate_pairs"]),
    _pinned("duplicate_pairs", ["duplicate_pairs", "exact_duplicate_pairs", "near_duplicate_pairs"]),
    _pinned("clusters", ["duplicate_clusters", "singletons"]),
    _pinned("deduped_documents", ["representatives"]),
]


def describe_failure(details: dict) -> str:
    """The whole message of a failed check: every non-empty figure, the first offenders by doc_id."""
    parts = []
    for key, value in details.items():
        if value in (0, [], None, ""):
            continue
        if isinstance(value, dict):
            value = ", ".join(f"{k} {v}" for k, v in value.items())
        elif isinstance(value, list):
            value = ", ".join("(" + ", ".join(map(repr, v)) + ")" if isinstance(v, list) else repr(v) for v in value)
        parts.append(f"{key.replace('_', ' ')}: {value}")
    return "; ".join(parts)
