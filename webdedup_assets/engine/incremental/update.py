"""The incremental update: `update` and the updater that runs its steps."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import duckdb
import pyarrow as pa

from ...params import CandidateParams, RepresentativeParams, ScoringParams
from ...storage.rows import listing
from ...storage.state import check_consistent, held_days
from ...storage.store import Store, connect, quote_ident, scalar, sql_string, write_batches
from ..diagnostics import write_cluster_diagnostics
from ..invariants import measured_key
from ..stage import DUCKDB, STAGES, StageRun, check_uniform
from ..stages.candidates import require_unique_doc_ids
from ..stages.clustering import ranking_columns
from ..stages.documents import stored_extra_columns
from . import bodies
from .changes import changed_documents, daily_changes
from .components import ComponentsStep
from .layout import UpdateReport, load_state
from .links import LinksStep
from .rebuild import StageRunner, check_fixed_params, commit, full_rebuild_steps, rebuild_reason, stored_choice
from .representatives import RepresentativesStep
from .verify import VerifyStep


def update(
    store: Store,
    candidates: CandidateParams | None = None,
    scoring: ScoringParams | None = None,
    representative: RepresentativeParams | None = None,
    full_rebuild_flag: bool = False,
    run_stage: StageRunner | None = None,
) -> UpdateReport:
    """Bring every global asset up to date with the daily assets, processing only the
    documents that changed since the last update (a full rebuild when it has to, its stages run
    through `run_stage`; the report says why). The caller holds the storage's writer lock."""
    session = UpdateSession(store, candidates, scoring, representative, full_rebuild_flag, run_stage)
    session.finish()
    return session.report


class UpdateSession:
    """One update, a global stage at a time: `advance(stage)` brings the global assets up to and
    including `stage` (each Dagster asset of a whole-chain run does its own stage's work this
    way), `finish()` does the rest. `report` is set once the first stage has been advanced to.
    Its steps share one DuckDB connection, so a session lives in one process; `close()` abandons
    it (nothing is recorded: the next update finds the state behind and rebuilds)."""

    def __init__(
        self,
        store: Store,
        candidates: CandidateParams | None = None,
        scoring: ScoringParams | None = None,
        representative: RepresentativeParams | None = None,
        full_rebuild_flag: bool = False,
        run_stage: StageRunner | None = None,
    ) -> None:
        self.report = UpdateReport("unchanged")
        self.done: list[str] = []
        self._steps = self._run(store, candidates, scoring, representative, full_rebuild_flag, run_stage)

    def advance(self, stage: str) -> None:
        while stage not in self.done:
            self.done.append(next(self._steps))

    def finish(self) -> None:
        self.done.extend(self._steps)

    @property
    def finished(self) -> bool:
        return self.done[-1:] == [GLOBAL_ORDER[-1]]

    def close(self) -> None:
        self._steps.close()

    def _run(self, store, candidates, scoring, representative, full_rebuild_flag, run_stage) -> Iterator[str]:
        started = time.perf_counter()
        check_consistent(store)
        for asset in ("fingerprinted", "band_memberships"):
            check_uniform(STAGES["candidate_pairs"], store, asset, store.params(asset))
        state = load_state(store, damaged_as_absent=full_rebuild_flag)  # what a full rebuild writes again
        if not full_rebuild_flag:
            check_fixed_params(store, state)
        candidates = stored_choice(store, state, "candidates", CandidateParams, candidates)
        scoring = stored_choice(store, state, "scoring", ScoringParams, scoring)
        representative = stored_choice(store, state, "representative", RepresentativeParams, representative)
        days_before = set(state["days"]) if state else set()
        days_now = set(held_days(store))
        report = self.report
        report.days_added, report.days_removed = sorted(days_now - days_before), sorted(days_before - days_now)
        reason = (
            "full_rebuild requested"
            if full_rebuild_flag
            else rebuild_reason(store, state, candidates, scoring, representative)
        )
        if reason is not None:
            report.mode, report.reason = "full", reason
            report.documents_added, report.documents_removed = _documents_since_last_build(store)
            for name in full_rebuild_steps(store, candidates, scoring, representative, run_stage):
                if name == GLOBAL_ORDER[-1]:  # the body index for the next update (engine.incremental.bodies)
                    bodies.sync(store, rebuild_damaged=full_rebuild_flag)
                    report.seconds["total"] = round(time.perf_counter() - started, 4)
                yield name
            return
        changes = daily_changes(store)
        if not changes.any:
            report.seconds["total"] = round(time.perf_counter() - started, 4)
            yield from GLOBAL_ORDER
            return
        indexing = time.perf_counter()
        bodies.sync(store)  # the changed files' bodies, for verification
        report.seconds["body_index"] = round(time.perf_counter() - indexing, 4)
        for name in _Updater(store, state, changes, candidates, scoring, representative, report).steps():
            if name == GLOBAL_ORDER[-1]:
                report.seconds["total"] = round(time.perf_counter() - started, 4)
            yield name


GLOBAL_ORDER = ("candidate_pairs", "scored_pairs", "duplicate_pairs", "clusters", "deduped_documents")


def _documents_since_last_build(store: Store) -> tuple[int, int]:
    """Documents added and removed since the global assets were last built (their clusters list
    every document then; none built, or not readable: every document is new)."""
    con = connect()
    try:
        documents = f"(SELECT doc_id FROM {store.scan_sql('documents')})"
        built = store.path("clusters")
        try:
            before = f"(SELECT doc_id FROM read_parquet({sql_string(str(built))}, hive_partitioning = false))"
            added, removed = con.execute(f"""
                SELECT (SELECT count(*) FROM {documents} d ANTI JOIN {before} b USING (doc_id)),
                       (SELECT count(*) FROM {before} b ANTI JOIN {documents} d USING (doc_id))""").fetchall()[0]
            return added, removed
        except duckdb.Error:  # a full rebuild gets past a missing or damaged clusters file
            return scalar(con, f"SELECT count(*) FROM {documents}"), 0
    finally:
        con.close()


class _Updater(LinksStep, VerifyStep, ComponentsStep, RepresentativesStep):
    def __init__(self, store, state, changes, candidates, scoring, representative, report):
        self.store, self.state, self.changes = store, state, changes
        self.candidates, self.scoring, self.representative = candidates, scoring, representative
        self.report = report
        self.con = connect(store)
        self.con.execute("SET SESSION preserve_insertion_order = true")
        self.figures = dict(state["figures"])
        self.marks: dict[str, float] = {}
        self.clock = time.perf_counter()

    def _mark(self, name: str) -> None:
        now = time.perf_counter()
        self.report.seconds[name] = round(now - self.clock, 4)
        self.clock = now

    def steps(self) -> Iterator[str]:
        """The update's steps; yields each global asset's name once it is written."""
        try:
            yield from self._steps()
        finally:
            self.con.close()

    def _steps(self) -> Iterator[str]:
        con, store = self.con, self.store
        self._documents_table()
        added, removed = changed_documents(con, store, self.changes)
        self.report.documents_added, self.report.documents_removed = added, removed
        self._mark("changes")
        measured_before = measured_key(store)  # what the kept diagnostics were made on
        if not added and not removed:  # files rewritten with the same content
            self.report.mode = "unchanged"
            if self._reorder_deduped():  # their rows in another order, which deduped_documents follows
                self.report.mode = "incremental"
                self._keep_diagnostics(pa.array([], pa.string()), measured_before)
            commit(store, self.candidates, self.scoring, self.representative, self.figures)
            yield from GLOBAL_ORDER
            return
        self.report.mode = "incremental"
        # The held documents were unique at the last update: a repeat now involves a row of a changed file.
        require_unique_doc_ids(store, con, "(SELECT * FROM docs SEMI JOIN new_rows USING (doc_id))")
        self._links()
        self._mark("candidates")
        self._record_seconds("candidate_pairs", "body_index", "changes", "candidates")
        yield "candidate_pairs"
        self._score()
        self._mark("scoring")
        self._record_seconds("scored_pairs", "scoring")
        yield "scored_pairs"
        self._duplicates()
        self._mark("duplicates")
        self._record_seconds("duplicate_pairs", "duplicates")
        yield "duplicate_pairs"
        self._clusters()
        self._mark("clusters")
        self._record_seconds("clusters", "clusters")
        yield "clusters"
        self._representatives()  # marks representatives, deduped_documents, cluster_inspection
        # cluster_diagnostics.csv as the full stage writes it (bounded, see engine.diagnostics),
        # recomputed for the touched clusters only
        changed = (
            self.con.sql("SELECT cluster_id FROM touched_old UNION SELECT cluster_id FROM regrouped")
            .to_arrow_table()["cluster_id"]
            .combine_chunks()
        )
        self._keep_diagnostics(changed, measured_before, self.shingle_sets)
        self._mark("diagnostics")
        self._record_seconds(
            "deduped_documents", "representatives", "deduped_documents", "cluster_inspection", "diagnostics"
        )
        commit(store, self.candidates, self.scoring, self.representative, self.figures)
        yield "deduped_documents"

    def _record_seconds(self, asset: str, *steps: str) -> None:
        """The asset's stats take the seconds of the update's steps that wrote it (the manifest's
        timings and the Dagster metadata read them)."""
        stats = self.store.stats(asset)[0]
        seconds = round(sum(self.report.seconds.get(step, 0.0) for step in steps), 4)
        self.store.write_stats(asset, None, {**stats, "seconds": seconds})

    def _keep_diagnostics(self, changed: pa.Array, measured_before, known_sets=None) -> None:
        figures = write_cluster_diagnostics(
            self.store, changed_clusters=changed, previous_key=measured_before, known_sets=known_sets
        )
        stats = self.store.stats("deduped_documents")[0]
        self.store.write_stats("deduped_documents", None, {**stats, **figures})

    def _documents_table(self) -> None:
        """Temp table `docs`: every stored document's narrow columns (those ranking reads), its
        documents file (index in self.files) and row there. The update looks documents up five
        times (uniqueness, domains to rescore, ranking, the representatives' keys and files); one
        scan into memory costs about what each scan of the documents files cost, once."""
        con, store = self.con, self.store
        self.files = store.data_files("documents")
        narrow = ", ".join(f"d.{quote_ident(c)}" for c in ranking_columns(stored_extra_columns(store)))
        if not self.files:
            con.execute("""CREATE TEMP TABLE docs
                (doc_id VARCHAR, domain VARCHAR, crawled_at DATE, file_idx BIGINT, file_row BIGINT)""")
            return
        con.register(
            "file_index", pa.table({"filename": [str(f) for f in self.files], "file_idx": range(len(self.files))})
        )
        con.execute(f"""CREATE TEMP TABLE docs AS
            SELECT {narrow}, f.file_idx, d.file_row_number AS file_row
              FROM read_parquet({listing(self.files)}, union_by_name = true, filename = true, file_row_number = true,
                                hive_partitioning = false) d
              JOIN file_index f USING (filename)""")
        con.unregister("file_index")

    # -- candidates ------------------------------------------------------------------------

    # -- writing ---------------------------------------------------------------------------

    @property
    def upstream(self) -> dict[str, dict[str, Any]]:
        if not hasattr(self, "_upstream"):
            self._upstream = {a: self.store.params(a) for a in ("documents", "fingerprinted", "band_memberships")}
        return self._upstream

    def _stage_run(self, name: str, params, **derived) -> StageRun:
        stage = STAGES[name]
        run = StageRun(stage, self.store, params, {a: self.upstream[a] for a in stage.upstream})
        if derived:
            run.derive(**derived)
        return run

    def _write(self, asset: str, query: str, parameters, rows: int, figures, schema: pa.Schema | None = None) -> None:
        reader = self.con.sql(query).arrow(batch_size=65_536)
        target_schema = schema if schema is not None else reader.schema
        written = write_batches(self.store.path(asset), target_schema, reader, parameters)
        assert written == rows, (asset, written, rows)
        self.store.write_stats(asset, None, {"rows": rows, **figures, "engine": DUCKDB.describe(), "seconds": 0.0})
