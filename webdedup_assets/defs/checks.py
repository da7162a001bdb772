"""Asset checks: blocking invariants for every corpus, and counts pinned by an expectations file."""

from collections.abc import Callable

import dagster as dg

from ..engine import invariants
from ..engine.storage import Store
from .resources import WebdedupStorage


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


def _metadata(details: dict) -> dict[str, dg.MetadataValue]:
    """The details as JSON, and each number in them (actual and expected counts) as its own entry."""
    numbers = {}
    for key, value in details.items():
        if isinstance(value, bool):
            continue
        if isinstance(value, int):
            numbers[key] = dg.MetadataValue.int(value)
        elif isinstance(value, float):
            numbers[key] = dg.MetadataValue.float(value)
        elif isinstance(value, dict):  # e.g. {"expected": 18, "actual": 18}
            for inner, number in value.items():
                if isinstance(number, int) and not isinstance(number, bool):
                    numbers[f"{key}/{inner}"] = dg.MetadataValue.int(number)
                elif isinstance(number, float):
                    numbers[f"{key}/{inner}"] = dg.MetadataValue.float(number)
    return {"details": dg.MetadataValue.json(details), **numbers}


def _result(passed: bool, details: dict) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(
        passed=bool(passed),
        description=None if passed else describe_failure(details),
        metadata=_metadata(details),
    )


def _invariant(
    asset: str, name: str, description: str, check: Callable[[Store], tuple[bool, dict]]
) -> dg.AssetChecksDefinition:
    @dg.asset_check(asset=asset, name=name, description=description, blocking=True)
    def _check(storage: WebdedupStorage) -> dg.AssetCheckResult:
        return _result(*check(storage.store()))

    return _check


def _pinned(asset: str, keys: list[str]) -> dg.AssetChecksDefinition:
    @dg.asset_check(
        asset=asset,
        name=f"{asset}_match_expected_counts",
        description=(
            f"{', '.join(keys)} equal the counts pinned in the input's expectations file "
            "(<input>.expected.json matched by sha256). Without one the check reports WARN with the reason."
        ),
    )
    def _check(storage: WebdedupStorage) -> dg.AssetCheckResult:
        passed, details = invariants.compare_counts(storage.store(), keys)
        if passed is None:  # not a silent pass: shown as a warning with the reason
            return dg.AssetCheckResult(
                passed=False,
                severity=dg.AssetCheckSeverity.WARN,
                description=f"skipped: {details['skipped']}",
                metadata={"skipped": dg.MetadataValue.text(details["skipped"])},
            )
        return _result(passed, details)

    return _check


def _warning(
    asset: str, name: str, description: str, check: Callable[[Store], tuple[bool, dict]]
) -> dg.AssetChecksDefinition:
    """A non-blocking check: when it fails the run goes on and the result is a WARN with its message."""

    @dg.asset_check(asset=asset, name=name, description=description, blocking=False)
    def _check(storage: WebdedupStorage) -> dg.AssetCheckResult:
        passed, details = check(storage.store())
        return dg.AssetCheckResult(
            passed=bool(passed),
            severity=dg.AssetCheckSeverity.WARN,
            description=None if passed else describe_failure(details),
            metadata=_metadata(details),
        )

    return _check


CHECKS = [
    _invariant("documents", "doc_id_unique", "Every doc_id appears once.", invariants.doc_ids_unique),
    _invariant(
        "candidate_pairs",
        "candidates_well_formed",
        "left_doc_id < right_doc_id and no document without shingles is in any candidate.",
        invariants.candidates_well_formed,
    ),
    _invariant(
        "duplicate_pairs",
        "duplicates_meet_threshold",
        "Every duplicate pair has exact Jaccard >= threshold and left_doc_id < right_doc_id.",
        invariants.duplicates_meet_threshold,
    ),
    _invariant(
        "clusters",
        "every_document_in_one_cluster",
        "Every document is in exactly one cluster (singletons included).",
        invariants.every_document_in_one_cluster,
    ),
    _invariant(
        "deduped_documents",
        "one_representative_per_cluster",
        "Exactly one representative per cluster.",
        invariants.one_representative_per_cluster,
    ),
    _warning(
        "deduped_documents",
        "clusters_cohesive",
        "WARN (the run goes on) on giant clusters (over 1,000 documents) and on members whose exact Jaccard to "
        "their representative is below the threshold: they joined by chaining (A~B, B~C). Clusters of three or "
        "more, largest first, at most 100,000 members per run.",
        invariants.cluster_cohesion,
    ),
    _pinned("documents", ["documents"]),
    _pinned("candidate_pairs", ["candidate_pairs"]),
    _pinned("duplicate_pairs", ["duplicate_pairs", "exact_duplicate_pairs", "near_duplicate_pairs"]),
    _pinned("clusters", ["duplicate_clusters", "singletons"]),
    _pinned("deduped_documents", ["representatives"]),
]
