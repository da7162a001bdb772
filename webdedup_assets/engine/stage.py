"""The stage contract: every stage declared once, run the same way by every engine.

A `Stage` names its parameter model, the artifacts it reads (upstream), whether it is built per
crawl day, and what it needs the upstream artifacts to have been built with. `Engine.run` does
what is common to every stage: it reads the upstream's stored parameters and checks them
(`check_upstream`: one check, one error format naming both values), builds the parameters the
stage stores with its data (storage.serial), times the stage, writes its stats and returns a
typed `StageResult`. For a daily stage it also keeps the crawl-day bookkeeping (days without
upstream rows lose their file, the schema file, the corpus state).

An engine implements a stage as one function `(StageRun) -> StageOutput` registered on its
`Engine` (`@DUCKDB.implements("candidate_pairs")`); a second engine (Spark) registers its own
functions for the same stage names over the same storage layout.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from ..errors import WebdedupError
from ..params import (
    BandingParams,
    CandidateParams,
    FingerprintParams,
    InputParams,
    ParamGroup,
    RepresentativeParams,
    ScoringParams,
)
from ..storage.serial import from_stored, to_stored
from ..storage.state import check_consistent, record_stage
from ..storage.store import Store, read_params, write_schema

# ---- declaring a stage --------------------------------------------------------------------


@dataclass(frozen=True)
class Need:
    """A value this stage needs an upstream artifact to have been built with.

    `expected(params, upstream)` gives the value (None: nothing needed), found at `path` in the
    upstream's stored parameters; `note` explains where the expected value comes from."""

    upstream: str
    path: tuple[str, ...]
    expected: Callable[[Any, dict[str, dict[str, Any]]], Any]
    remedy: str
    note: Callable[[Any, dict[str, dict[str, Any]]], str] | None = None

    @property
    def label(self) -> str:
        return self.path[-1]


@dataclass(frozen=True)
class Stage:
    name: str
    params: type[ParamGroup] | None  # the parameter model it takes (None: none)
    group: str | None  # key of its own parameters in what it stores
    upstream: tuple[str, ...] = ()  # artifacts it reads: must exist; their stored parameters are checked
    daily: bool = False  # built per crawl month (one file per month, see storage.state.crawl_month)
    inherits: tuple[tuple[str, str], ...] = ()  # (group, upstream): stored again with this stage's data
    needs: tuple[Need, ...] = ()
    uniform: tuple[str, ...] = ()  # daily upstreams whose days must all share the latest parameters
    whole_corpus: bool = False  # reads every day of the corpus: the daily assets must agree with the state
    one_lineage: bool = False  # the global assets it follows must be of one chain (require_one_lineage)
    # The parameters, from the upstream's stored ones (duplicate_pairs: scored_pairs' threshold and verify).
    from_upstream: Callable[[dict[str, dict[str, Any]]], ParamGroup] | None = None


def _path(stored: dict[str, Any], path: tuple[str, ...]) -> Any:
    for key in path:
        stored = stored.get(key) if isinstance(stored, dict) else None
    return stored


def _product_note(params: BandingParams, upstream: dict[str, dict[str, Any]]) -> str:
    return f" (bands={params.bands} x rows={params.rows} = {params.bands * params.rows})"


def _simhash(stored: dict[str, Any]) -> bool:
    """The artifact holds SimHash fingerprints: no num_perm to band (blocks of the 64 bits instead)."""
    return (stored.get("fingerprint") or {}).get("fingerprint_method") == "simhash"


def _scored_threshold(upstream: dict[str, dict[str, Any]]) -> ScoringParams:
    scoring = upstream["scored_pairs"].get("scoring")
    if not scoring or scoring.get("threshold") is None:
        raise WebdedupError("duplicate_pairs: scored_pairs holds no threshold; re-materialize scored_pairs")
    return from_stored(ScoringParams, scoring)


STAGES: dict[str, Stage] = {
    s.name: s
    for s in (
        Stage(
            "documents",
            InputParams,
            "input",
            daily=True,  # no upstream: its partitions are the months asked for
        ),
        Stage(
            "fingerprinted",
            FingerprintParams,
            "fingerprint",
            upstream=("documents",),
            daily=True,
        ),
        Stage(
            "band_memberships",
            BandingParams,
            "banding",
            upstream=("fingerprinted",),
            daily=True,
            inherits=(("fingerprint", "fingerprinted"),),
            needs=(
                Need(
                    "fingerprinted",
                    ("fingerprint", "num_perm"),
                    lambda p, up: None if _simhash(up["fingerprinted"]) else p.bands * p.rows,
                    "re-materialize fingerprinted with that num_perm, or band with bands x rows equal to its num_perm",
                    note=_product_note,
                ),
            ),
        ),
        Stage(
            "candidate_pairs",
            CandidateParams,
            "candidates",
            upstream=("documents", "fingerprinted", "band_memberships"),
            inherits=(("fingerprint", "band_memberships"), ("banding", "band_memberships")),
            uniform=("fingerprinted", "band_memberships"),
            whole_corpus=True,
        ),
        Stage(
            "scored_pairs",
            ScoringParams,
            "scoring",
            upstream=("documents", "fingerprinted", "candidate_pairs"),
            inherits=(("fingerprint", "fingerprinted"), ("banding", "candidate_pairs")),
            needs=(
                Need(
                    "candidate_pairs",
                    ("fingerprint",),
                    lambda p, up: up["fingerprinted"].get("fingerprint"),
                    "re-materialize candidate_pairs (and the assets between) before scoring",
                    note=lambda p, up: " (what fingerprinted holds now)",
                ),
            ),
        ),
        Stage(
            "duplicate_pairs",
            ScoringParams,
            "duplicates",
            upstream=("scored_pairs",),
            inherits=(("fingerprint", "scored_pairs"), ("banding", "scored_pairs")),
            needs=(
                Need(
                    "scored_pairs",
                    ("scoring", "threshold"),
                    lambda p, up: p.threshold if p is not None else None,
                    "there is one threshold: re-materialize scored_pairs (and its downstream) with it",
                ),
            ),
            from_upstream=_scored_threshold,
        ),
        Stage(
            "clusters",
            None,
            None,
            upstream=("documents", "duplicate_pairs"),
            inherits=(("fingerprint", "duplicate_pairs"), ("duplicates", "duplicate_pairs")),
            one_lineage=True,
        ),
        Stage(
            "manifest",
            None,
            None,
            upstream=(
                "documents",
                "fingerprinted",
                "band_memberships",
                "candidate_pairs",
                "scored_pairs",
                "duplicate_pairs",
                "clusters",
                "deduped_documents",
            ),
            one_lineage=True,
        ),
        Stage(
            "deduped_documents",
            RepresentativeParams,
            "representatives",
            upstream=("documents", "fingerprinted", "clusters"),
            inherits=(("fingerprint", "clusters"),),
            one_lineage=True,
        ),
    )
}


# ---- the upstream check -------------------------------------------------------------------

# The global assets and the parameter groups each records of the stages it was built from.
LINEAGE = ("candidate_pairs", "scored_pairs", "duplicate_pairs", "clusters", "deduped_documents")


def require_one_lineage(store: Store, stage: str) -> None:
    """The global assets describe one chain: the same fingerprint and banding in each that records
    them, and duplicate_pairs and clusters at scored_pairs' threshold. An asset rebuilt alone with
    other parameters (scored_pairs at 0.8 under duplicate_pairs at 0.9, in Dagster) would publish
    files that contradict each other. Checked before `stage` (clusters, deduped_documents, the
    manifest) over the global assets it follows."""
    before = LINEAGE[: LINEAGE.index(stage)] if stage in LINEAGE else LINEAGE
    built = {asset: store.params(asset) for asset in before if store.files(asset)}
    problems = []
    for group in ("fingerprint", "banding"):
        found = {asset: params[group] for asset, params in built.items() if params.get(group)}
        if len({json.dumps(v, sort_keys=True) for v in found.values()}) > 1:
            problems.append(f"{group}: " + "; ".join(f"{a} {json.dumps(v, sort_keys=True)}" for a, v in found.items()))
    thresholds = {
        asset: (built[asset].get(group) or {}).get("threshold")
        for asset, group in (("scored_pairs", "scoring"), ("duplicate_pairs", "duplicates"), ("clusters", "duplicates"))
        if asset in built
    }
    if len(set(thresholds.values())) > 1:
        problems.append("threshold: " + ", ".join(f"{a} {t}" for a, t in thresholds.items()))
    if problems:
        raise WebdedupError(
            "the global assets were built with other parameters, so their files would contradict each other ("
            + "; ".join(problems)
            + "): materialize the assets after the one rebuilt (or the whole global chain) before "
            + ("the manifest" if stage == "manifest" else stage)
        )


def check_upstream(stage: Stage, params: ParamGroup | None, upstream: dict[str, dict[str, Any]]) -> None:
    """Compare what the upstream artifacts were built with to what this stage needs; the error
    names the stage, the upstream and both values."""
    for need in stage.needs:
        expected = need.expected(params, upstream)
        if expected is None:
            continue
        found = _path(upstream[need.upstream], need.path)
        if found != expected:
            note = need.note(params, upstream) if need.note else ""
            raise WebdedupError(
                f"{stage.name}: {need.upstream} was built with {need.label}={found} but {stage.name} needs "
                f"{need.label}={expected}{note}; {need.remedy}"
            )


def check_uniform(stage: Stage, store: Store, asset: str, latest: dict[str, Any]) -> None:
    """Every day of a daily upstream was built with the parameters of its latest run."""
    for path in store.files(asset):
        other = read_params(path)
        if isinstance(other.get("fingerprint"), dict):  # days fingerprinted before shingle_unit existed: words
            other["fingerprint"] = {"shingle_unit": "word", **other["fingerprint"]}
        for key in ("fingerprint", "banding"):
            if key in latest and other.get(key) != latest[key]:
                raise WebdedupError(
                    f"{stage.name}: {asset} {path.name} was built with {key}={other.get(key)} but {stage.name} "
                    f"needs {key}={latest[key]} (the latest run of {asset}); re-materialize the older days of "
                    f"{asset} with the same parameters"
                )


# ---- running a stage ----------------------------------------------------------------------


@dataclass
class StageRun:
    """What an implementation is given: the store, its checked parameters, the upstream's
    stored parameters, and for a daily stage the partitions (crawl months) to build ([None]:
    unpartitioned)."""

    stage: Stage
    store: Store
    params: Any
    upstream: dict[str, dict[str, Any]]
    partitions: list[str | None] | None = None
    options: dict[str, Any] = field(default_factory=dict)
    derived: dict[str, Any] = field(default_factory=dict)

    def derive(self, **values: Any) -> None:
        """Values the stage derived from its parameters, stored with them (a budget, a version)."""
        self.derived.update(values)

    @property
    def parameters(self) -> dict[str, Any]:
        """The parameters stored with the data: this stage's group and those it inherits."""
        stored: dict[str, Any] = {"stage": self.stage.name}
        for group, source in self.stage.inherits:
            stored[group] = self.upstream[source].get(group)
        if self.stage.group is not None:
            stored[self.stage.group] = {**(to_stored(self.params) if self.params is not None else {}), **self.derived}
        return stored

    def partition_parameters(self, partition: str | None) -> dict[str, Any]:
        return {**self.parameters, "partition": partition}


@dataclass(frozen=True)
class StageOutput:
    """What an implementation returns: rows written and figures measured (per partition too
    for a daily stage; `schema` for a daily stage's schema file)."""

    rows: int
    figures: dict[str, Any]
    partition_rows: dict[str | None, int] | None = None
    partition_figures: dict[str | None, dict[str, Any]] | None = None
    schema: pa.Schema | None = None


@dataclass(frozen=True)
class StageResult:
    stage: str
    rows: int
    parameters: dict[str, Any]  # as stored with the data
    figures: dict[str, Any]
    seconds: float
    partition_rows: dict[str, int] | None = None  # a daily stage: rows per crawl month built

    def stats(self) -> dict[str, Any]:
        return {"rows": self.rows, **self.figures, "seconds": self.seconds}


Implementation = Callable[[StageRun], StageOutput]


class Engine:
    """The implementations of the stages by one engine."""

    def __init__(self, name: str, single_file: bool = True, version: Callable[[], str] | None = None) -> None:
        self.name = name
        self._version = version
        self.stages: dict[str, Implementation] = {}
        # single_file: a global stage writes <asset>/data.parquet only; files another engine left
        # beside it (Spark writes data-00000.parquet, ... in parallel) are removed before it runs.
        self.single_file = single_file

    def describe(self) -> str:
        """The engine and its version, as recorded in each global stage's stats (and the manifest)."""
        return f"{self.name} {self._version()}" if self._version else self.name

    def implements(self, stage: str) -> Callable[[Implementation], Implementation]:
        if stage not in STAGES:
            raise ValueError(f"unknown stage {stage!r} (declared: {', '.join(STAGES)})")

        def register(function: Implementation) -> Implementation:
            self.stages[stage] = function
            return function

        return register

    def run(
        self,
        name: str,
        store: Store,
        params: ParamGroup | None = None,
        months: list[str] | None = None,
        **options: Any,
    ) -> StageResult:
        """Run one stage: upstream check, the implementation, timing, stats; for a daily stage
        `months` are the crawl months to build (None: the unpartitioned asset)."""
        stage = STAGES[name]
        implementation = self.stages.get(name)
        if implementation is None:
            raise WebdedupError(f"the {self.name} engine does not implement stage {name}")
        if params is not None and stage.params is not None and not isinstance(params, stage.params):
            raise TypeError(f"{name} takes {stage.params.__name__}, got {type(params).__name__}")
        started = time.perf_counter()
        if stage.whole_corpus:
            check_consistent(store)
        upstream = {asset: store.params(asset) for asset in stage.upstream}
        for asset in stage.uniform:
            check_uniform(stage, store, asset, upstream[asset])
        check_upstream(stage, params, upstream)
        if stage.one_lineage:
            require_one_lineage(store, name)
        if stage.from_upstream is not None:  # given ones passed the needs: the upstream's are the same, and whole
            params = stage.from_upstream(upstream)
        elif params is None and stage.params is not None:
            params = stage.params()
        run = StageRun(stage, store, params, upstream, options=options)
        if not stage.daily:
            if self.single_file:
                store.remove_other_files(name)
            output = implementation(run)
            seconds = round(time.perf_counter() - started, 4)
            figures = {**output.figures, "engine": self.describe()}
            result = StageResult(name, output.rows, run.parameters, figures, seconds)
            store.write_stats(name, None, result.stats())
            return result
        return self._run_daily(run, implementation, months, started)

    def _run_daily(
        self, run: StageRun, implementation: Implementation, months: list[str] | None, started: float
    ) -> StageResult:
        stage, store = run.stage, run.store
        if months is None:
            run.partitions = [None]
        elif not stage.upstream:  # documents: the months asked for (the input decides which hold rows)
            run.partitions = list(months)
        else:
            present = set(store.partitions(stage.upstream[0]))
            run.partitions = [month for month in months if month in present]
            for month in months:
                if month not in present:
                    store.remove(stage.name, month)  # the month has no upstream rows (any more): no rows
        began = time.perf_counter()
        output = implementation(run)
        share = round((time.perf_counter() - began) / max(1, len(output.partition_rows or {})), 4)
        for partition, rows in (output.partition_rows or {}).items():
            figures = (output.partition_figures or {}).get(partition, {})
            store.write_stats(stage.name, partition, {"rows": rows, **figures, "seconds": share})
        partition_rows = None
        if months is not None:
            partition_rows = dict(output.partition_rows or {})
            write_schema(store, stage.name, output.schema, run.parameters)
            record_stage(store, stage.name, partition_rows, run.parameters)
        seconds = round(time.perf_counter() - started, 4)
        return StageResult(stage.name, output.rows, run.parameters, output.figures, seconds, partition_rows)


def _duckdb_version() -> str:
    import duckdb

    return duckdb.__version__


DUCKDB = Engine(
    "duckdb", version=_duckdb_version
)  # the embedded default: engine/*.py register their stage functions here
