"""The manifest stage: parameters as used, counts, ratios, input checksums, versions, timings."""

from __future__ import annotations

import json
import platform
import time
from collections.abc import Callable
from datetime import UTC, datetime
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Any

from ...core.minhash import candidate_probability
from ...params import BandingParams
from ...storage.fileio import write_text
from ...storage.objects import ObjectPath
from ...storage.remote import origin_of
from ...storage.serial import stored_value
from ...storage.store import Store, sum_figures
from ..columns import mapping_given
from ..publish import publish
from ..stage import DUCKDB, StageOutput, StageRun
from ..stage import STAGES as CONTRACT
from .documents import stored_input
from .fingerprint import keys_per_document

STAGES = CONTRACT["manifest"].upstream  # the stages it reports on, in pipeline order
PACKAGES = ("webdedup", "dagster", "duckdb", "pyarrow", "pandas", "numpy", "numba", "fastwarc", "resiliparse")


def _merged_stats(store: Store, stage: str) -> dict[str, Any]:
    """Stats of a stage; for partitioned stages numeric figures are summed over partitions."""
    parts = store.stats(stage)
    if len(parts) == 1:
        return parts[0]
    return {"partitions": len(parts), **{key: round(value, 4) for key, value in sum_figures(parts).items()}}


def package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            versions[name] = importlib_metadata.version(name)
        except importlib_metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def _empty_documents(store: Store) -> int:
    """Documents without a shingle, over the whole corpus (a stage's stats count only the files
    it computed, not those an `add` kept)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    return sum(
        pc.sum(pc.equal(pq.read_table(path, columns=["shingle_count"]).column(0), 0)).as_py() or 0
        for path in store.data_files("fingerprinted")
    )


def build_manifest(store: Store) -> dict[str, Any]:
    params = {stage: store.params(stage) for stage in STAGES}
    stats = {stage: _merged_stats(store, stage) for stage in STAGES}
    fingerprint = params["fingerprinted"]["fingerprint"]
    banding = params["band_memberships"]["banding"]
    threshold = params["duplicate_pairs"]["duplicates"]["threshold"]
    cand = stats["candidate_pairs"]
    dup = stats["duplicate_pairs"]
    clusters = stats["clusters"]
    dedup = stats["deduped_documents"]
    documents = cand["documents"]
    input_files, input_sha256 = stored_input(store)
    return {
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "storage_root": origin_of(store.root) or str(store.root),
        "parameters": {
            "documents": {
                **{k: params["documents"]["input"].get(k) for k in ("input_path", "input_format")},
                **mapping_given(params["documents"]["input"]),
            },
            "fingerprinted": fingerprint,
            "band_memberships": banding,
            "candidate_pairs": params["candidate_pairs"]["candidates"],
            "scored_pairs": params["scored_pairs"]["scoring"],
            "duplicate_pairs": params["duplicate_pairs"]["duplicates"],
            "deduped_documents": params["deduped_documents"]["representatives"],
        },
        "lsh": {
            "threshold": threshold,
            "bands": banding["bands"],
            "rows": banding["rows"],
            "candidate_probability_at_threshold": round(
                candidate_probability(threshold, banding["bands"], banding["rows"]), 6
            ),
        }
        if fingerprint.get("fingerprint_method") != "simhash"
        else {  # no bands: every pair within max_hamming bits shares one of the blocks
            "threshold": threshold,
            "fingerprint_method": "simhash",
            "max_hamming": stored_value(BandingParams, banding, "max_hamming"),
            "key_blocks": stored_value(BandingParams, banding, "key_blocks"),
            "blocks": stored_value(BandingParams, banding, "max_hamming")
            + stored_value(BandingParams, banding, "key_blocks"),
            "keys": keys_per_document(fingerprint, BandingParams.checked(banding)),
            "candidate_probability_at_threshold": None,
        },
        "counts": {
            "documents": documents,
            "empty_documents": _empty_documents(store),
            "possible_pairs": cand["possible_pairs"],
            "candidate_pairs": cand["rows"],
            "candidate_reduction_ratio": cand["candidate_reduction_ratio"],
            "same_domain_candidates": cand["same_domain_candidates"],
            "cross_domain_candidates": cand["cross_domain_candidates"],
            "duplicate_pairs": dup["rows"],
            "exact_duplicate_pairs": dup["exact_duplicate_pairs"],
            "near_duplicate_pairs": dup["near_duplicate_pairs"],
            "same_domain_duplicates": dup["same_domain_duplicates"],
            "cross_domain_duplicates": dup["cross_domain_duplicates"],
            "clusters": clusters["clusters"],
            "duplicate_clusters": clusters["duplicate_clusters"],
            "singletons": clusters["singletons"],
            "max_cluster_size": clusters["max_cluster_size"],
            "collision_buckets": cand["collision_buckets"],
            "max_bucket_size": cand["max_bucket_size"],
            "representatives": dedup["rows"],
            "removed": dedup["removed"],
            "retained_ratio": dedup["retained_ratio"],
        },
        "input": {
            "sha256": input_sha256,
            "files": input_files,
            **({"warc": params["documents"]["input"]["warc"]} if params["documents"]["input"].get("warc") else {}),
        },
        "versions": package_versions(),
        # the engine (and its version) that computed each global stage
        "engines": {stage: stats[stage].get("engine") for stage in STAGES if stats[stage].get("engine")},
        "timings_seconds": {stage: stats[stage].get("seconds") for stage in STAGES},
        "stage_stats": stats,
    }


def stage_manifest(
    store: Store,
    output_dir: Path | ObjectPath | None = None,
    on_commit: Callable[[], None] | None = None,
    extra_outputs: Callable[[Path], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The manifest stage through the contract; returns the manifest. With `output_dir`, every
    output is published with it as one set (the caller holds the output folder's writer lock;
    `on_commit`, `extra_outputs`: see publish.publish)."""
    DUCKDB.run("manifest", store, None, output_dir=output_dir, on_commit=on_commit, extra_outputs=extra_outputs)
    return load_manifest(store)


@DUCKDB.implements("manifest")
def manifest_stage(run: StageRun) -> StageOutput:
    """Build the manifest and publish it (option output_dir) or keep it in storage; its figures
    are the counts."""
    store, output_dir = run.store, run.options.get("output_dir")
    started = time.perf_counter()
    manifest = build_manifest(store)
    manifest["timings_seconds"]["manifest"] = round(time.perf_counter() - started, 4)
    if output_dir is not None:
        manifest["outputs"] = publish(
            store, output_dir, manifest, run.options.get("on_commit"), run.options.get("extra_outputs")
        )
    else:
        write_text(store.asset_dir("manifest") / "manifest.json", json.dumps(manifest, indent=2, default=str))
    counts = manifest["counts"]
    return StageOutput(int(counts["representatives"]), {k: v for k, v in counts.items() if k != "representatives"})


def load_manifest(store: Store) -> dict[str, Any]:
    return json.loads((store.asset_dir("manifest") / "manifest.json").read_text())
