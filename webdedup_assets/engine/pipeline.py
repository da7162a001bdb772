"""The pipeline: `webdedup run` and `webdedup add` as the stages called in order, in plain Python.

Both are one update of the corpus held in a storage root: `run` makes the storage hold exactly
its input and rebuilds the global stages from scratch; `add` extends the held corpus and updates
the global stages for the documents that changed (engine.incremental.update). Both leave the
incremental state that the next `add` extends.

Validate first, commit last: the input is resolved before anything changes; every change to the
storage is made inside a storage transaction (storage.transaction) that is undone when anything
fails, and the outputs are published as one set at the very end, which is the commit point.
Each stage reports its progress, and after a stage the checks of its asset (checks.CHECKS)
are evaluated: a failed blocking check stops the command before anything is published.

The Dagster definitions (defs/) call the same stage functions; nothing here imports Dagster.
"""

from __future__ import annotations

import errno
import logging
import re
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from ..errors import INTERRUPTED, WebdedupError
from ..ingest.inputs import InputFile, resolve_input
from ..params import (
    BandingParams,
    CandidateParams,
    EngineParams,
    FingerprintParams,
    ParamAdvice,
    ParamError,
    RepresentativeParams,
    RunParams,
    ScoringParams,
    check_banding,
)
from ..storage.fileio import make_folder
from ..storage.objects import ObjectPath, is_uri
from ..storage.remote import origin_of
from ..storage.serial import from_stored, stored_value
from ..storage.state import clear_days, held_days, months_of, remove_leftovers, reset_outdated, writer_lock
from ..storage.store import Store
from ..storage.transaction import StorageTransaction, discard, storage_transaction
from . import incremental
from .checks import CHECKS, Check, describe_failure
from .columns import given_mapping, mapping_for_add, mapping_of
from .incremental.layout import UpdateReport
from .publish import OUTPUT_NAMES, publication_prepared, recover, require_replaceable
from .reading import input_days, no_days_error
from .shards import FOLDER as SHARDS
from .shards import emit_shards as emit
from .shards import require_emittable
from .stage import DUCKDB, StageResult
from .stages.documents import stage_documents
from .stages.documents_warc import warc_options_of
from .stages.manifest import stage_manifest
from .verify import damage_message, damage_named

PROGRESS = logging.getLogger("webdedup.progress")
Notice = Callable[[str], None]


def _silent(message: str) -> None: ...


def shown(storage_root: Path) -> str:
    """A storage root as the user named it: the URI of one in object storage, not its local copy."""
    return origin_of(storage_root) or str(storage_root)


class StageFailed(WebdedupError):
    """A stage failed: the user's message, the stage, and a refusal naming parameters (`advice`)."""

    def __init__(self, stage: str, message: str, advice: ParamAdvice | None = None) -> None:
        super().__init__(message)
        self.stage, self.advice = stage, advice


@dataclass
class CheckOutcome:
    check: Check
    passed: bool | None  # None: a pinned count check without expectations
    details: dict[str, Any]

    @property
    def message(self) -> str:
        if self.passed is None:
            return f"skipped: {self.details['skipped']}"
        return describe_failure(self.details)


class ChecksFailed(WebdedupError):
    """A blocking check failed: the command stopped and published nothing."""

    def __init__(self, failed: list[CheckOutcome], checks: list[CheckOutcome]) -> None:
        super().__init__("; ".join(f"{o.check.label}: {o.message}" for o in failed))
        self.failed = failed
        self.checks = checks  # every check evaluated before the command stopped


@dataclass
class Outcome:
    """What a command did: the published manifest, every check evaluated, the update's report."""

    manifest: dict[str, Any]
    days: list[str]
    checks: list[CheckOutcome] = field(default_factory=list)
    report: UpdateReport | None = None
    step_seconds: dict[str, float] = field(default_factory=dict)

    @property
    def failed_checks(self) -> list[CheckOutcome]:
        return [o for o in self.checks if o.passed is False and o.check.kind != "warning"]

    @property
    def warnings(self) -> list[CheckOutcome]:
        return [o for o in self.checks if o.passed is False and o.check.kind == "warning"]

    @property
    def skipped_checks(self) -> list[CheckOutcome]:
        return [o for o in self.checks if o.passed is None]


def stage_runner(chosen: EngineParams) -> Callable[..., StageResult]:
    """Engine.run of the chosen engine (fingerprinted, band_memberships and the global stages)."""
    if chosen.engine == "duckdb":
        return DUCKDB.run
    from .spark.engine import SPARK
    from .spark.session import SparkSettings

    settings = SparkSettings(master=chosen.spark_master or None, remote=chosen.spark_remote or None)
    return partial(SPARK.run, spark=settings)


class _Steps:
    """Runs the stages of one command: progress lines, seconds, errors named by stage, checks."""

    def __init__(self, store: Store, checked: bool) -> None:
        self.store = store
        self.checked = checked
        self.checks: list[CheckOutcome] = []
        self.seconds: dict[str, float] = {}

    def run(self, name: str, call: Callable[[], Any], timed_as: str | None = None) -> Any:
        if INTERRUPTED.is_set():  # a Ctrl-C that a DuckDB query swallowed while it ended
            raise KeyboardInterrupt
        PROGRESS.info("%-18s running", name)
        started = time.perf_counter()
        try:
            result = call()
        except (StageFailed, ChecksFailed):
            raise
        except ParamError as err:
            if not isinstance(err, ParamAdvice):
                raise
            PROGRESS.info("%-18s failed", name)  # a refusal naming parameters (by flag on the command line)
            raise StageFailed(name, str(err), err) from None
        except WebdedupError as err:
            PROGRESS.info("%-18s failed", name)
            raise StageFailed(name, str(err)) from None
        except Exception as err:  # a damaged file, a bug or the machine (memory, disk): one line
            if isinstance(err, RuntimeError) and str(err) == "Query interrupted":  # DuckDB's form of Ctrl-C
                raise KeyboardInterrupt from None
            PROGRESS.info("%-18s failed", name)
            damaged = damage_message(self.store)
            if damaged is not None:
                raise WebdedupError(damaged) from None
            if getattr(err, "errno", None) == errno.ENOSPC or "No space left on device" in str(err):  # (DuckDB's too)
                raise StageFailed(
                    name,
                    f"the disk is full (no space left on device) under {self.store.root} (with its spill folder "
                    ".duckdb_tmp) or the output folder: free space there, or give --storage a larger disk",
                ) from None
            first = str(err).strip().splitlines()[0] if str(err).strip() else ""
            raise StageFailed(name, f"{type(err).__name__}: {first}") from err
        self.seconds[timed_as or name] = round(time.perf_counter() - started, 3)
        if isinstance(result, StageResult):
            PROGRESS.info("%-18s done: %s rows in %.2f s", name, result.rows, result.seconds)
        elif isinstance(result, dict):  # documents and manifest: a dict of figures
            rows = result.get("rows", result.get("counts", {}).get("representatives"))
            seconds = result.get("seconds") or result.get("timings_seconds", {}).get("manifest")
            PROGRESS.info("%-18s done: %s rows in %.2f s", name, rows, seconds or 0.0)
        else:
            PROGRESS.info("%-18s done in %.2f s", name, self.seconds[timed_as or name])
        if self.checked:
            self._check(name)
        return result

    def _check(self, asset: str) -> None:
        failed = []
        for check in CHECKS:
            if check.asset != asset:
                continue
            passed, details = check.evaluate(self.store)
            outcome = CheckOutcome(check, passed, details)
            self.checks.append(outcome)
            if check.kind == "blocking" and not passed:
                failed.append(outcome)
        if failed:
            raise ChecksFailed(failed, self.checks)

    def global_stage(self, runner: Callable[..., StageResult]) -> Callable[[str, Any], StageResult]:
        """A global stage run through these steps (the full rebuild's `run_stage`)."""
        return lambda name, params: self.run(name, lambda: runner(name, self.store, params))


@contextmanager
def _writing(
    storage_root: Path, output_dir: Path | ObjectPath, purpose: str, notice: Notice
) -> Iterator[StorageTransaction]:
    """The writer locks of both folders, what dead commands left tidied, and the storage
    transaction of this command (rolled back, and said so, when the block fails). An output in
    object storage has no lock of its own (storage.sets: what two writers there may expect)."""
    local = None if isinstance(output_dir, ObjectPath) else output_dir
    folders = [storage_root] if local is None else [local, storage_root]
    created = {top for top in map(_first_missing, folders) if top is not None}
    for folder in folders:
        make_folder(folder)
    transaction = None
    try:
        with _locked(folders, storage_root, output_dir, purpose, notice) as transaction:
            yield transaction
    except BaseException:
        if transaction is None or transaction.undone:  # the folders this command created go too
            for top in created:
                shutil.rmtree(top, ignore_errors=True)
        raise


def _first_missing(folder: Path) -> Path | None:
    """The outermost of `folder` and its parents that does not exist (None: the folder exists)."""
    missing = [p for p in (folder, *folder.parents) if not p.exists()]
    return missing[-1] if missing else None


@contextmanager
def _locked(
    folders: list[Path], storage_root: Path, output_dir: Path | ObjectPath, purpose: str, notice: Notice
) -> Iterator[StorageTransaction]:
    local = None if isinstance(output_dir, ObjectPath) else output_dir
    with ExitStack() as locks:
        for folder in folders:
            report = locks.enter_context(writer_lock(folder, purpose=purpose))
            for stale in report.stale:
                notice(
                    f"took over the writer lock of {report.path} left by pid {stale.get('pid')} "
                    f"(started {stale.get('started')}), which is no longer running"
                )
        recovered = recover(local) if local is not None else None  # before the leftovers go: it names a staging
        if recovered:  # its command had reached its commit point: its storage stands
            discard(storage_root)
        if recovered == "completed":
            notice(f"completed the publishing of {output_dir} that an interrupted run had begun")
        elif recovered == "lost":
            notice(
                f"an interrupted publishing of {output_dir} could not be completed (its staged files are gone): "
                "its outputs may mix two publications until this command publishes"
            )
        removed = [path for folder in reversed(folders) for path in remove_leftovers(folder)]
        if removed:
            notice(f"removed {len(removed)} temporary file(s) left by interrupted runs (first: {removed[0]})")
        transaction = None
        try:
            with storage_transaction(storage_root) as transaction:
                yield transaction
        except BaseException:
            if transaction is None or transaction.undone:
                notice(f"nothing was changed: {shown(storage_root)} and {output_dir} are as they were")
            elif transaction.committed:  # stopped after its commit point: its results stand
                notice(f"{output_dir} holds this command's results: it stopped after publishing them")
            raise


def _check_input(
    input_path: str, input_format: str, storage_root: Path, output_dir: Path | ObjectPath
) -> list[InputFile]:
    """The input's files: it exists, it does not lie where the command writes (publishing or the
    storage would replace it), and an input folder does not hold the folders the command writes
    (the next command would read the outputs back as input). The output folder holds no file of
    the user's under a name webdedup publishes."""
    files = resolve_input(input_path, input_format)
    require_replaceable(output_dir)
    if is_uri(input_path):  # an input prefix and the prefixes the command writes are apart, as folders are
        prefix = re.split(r"[*?\[]", input_path.rstrip("/"))[0]
        prefix = prefix if prefix == input_path.rstrip("/") else prefix.rsplit("/", 1)[0]
        for place, flag in ((str(output_dir), "--output"), (origin_of(storage_root), "--storage")):
            if place and is_uri(place) and (f"{place}/".startswith(f"{prefix}/") or prefix.startswith(f"{place}/")):
                raise WebdedupError(f"{flag} {place} and the input {input_path} overlap: give {flag} outside the input")
        return files
    source = Path(input_path).expanduser().resolve()
    written = [(storage_root, "--storage")]
    if isinstance(output_dir, Path):
        written += [(output_dir / name, "--output") for name in OUTPUT_NAMES]
    for place, flag in written:
        if source.is_relative_to(place.resolve()):
            raise WebdedupError(
                f"the input {input_path} is inside {place}, which {flag} replaces when the command writes; "
                "move the input out of it"
            )
    if not source.is_dir():
        return files
    for folder, flag in ((output_dir, "--output"), (storage_root, "--storage")):
        if isinstance(folder, ObjectPath):
            continue
        if folder.resolve().is_relative_to(source.resolve()):
            raise WebdedupError(
                f"{flag} {folder} is inside the input folder {input_path}: the next command would read its files "
                f"back as input; give an {flag} folder outside the input"
            )
    return files


def run(
    input_path: str,
    storage_root: Path,
    output_dir: Path | ObjectPath,
    params: RunParams,
    engine: EngineParams | None = None,
    notice: Notice = _silent,
    emit_shards: bool = False,
) -> Outcome:
    """Deduplicate exactly this input: the storage holds its crawl days and no other (the held
    days it lacks are cleared, and a notice says so), the global stages are rebuilt with every
    check, the outputs published (`emit_shards`: the kept records in the input's own form too,
    engine.shards). Raises StageFailed, ChecksFailed or WebdedupError (then nothing changed)."""
    input_format = params.input.input_format
    engine = engine or EngineParams()
    files = _check_input(input_path, input_format, storage_root, output_dir)  # before anything is touched
    if emit_shards:
        require_emittable(files)
    store = Store(storage_root)
    with damage_named(store), _writing(storage_root, output_dir, f"webdedup run {input_path}", notice) as transaction:
        if reset_outdated(store):
            notice(
                f"{shown(storage_root)} was written by an earlier webdedup in another layout: rebuilt from the input"
            )
        warc_options, mapping = warc_options_of(params.input), mapping_of(params.input)
        days = input_days(input_path, input_format, store=store, warc_options=warc_options, mapping=mapping)
        stale = [day for day in held_days(store) if day not in set(days)]
        if stale:
            clear_days(store, stale)
        if not days:  # empty or unreadable input: one month, so that documents validates it and says why
            days = [time.strftime("%Y-%m-%d", time.gmtime())]
        months = months_of(days)
        steps = _Steps(store, checked=True)
        runner = stage_runner(engine)
        documents = steps.run(
            "documents",
            lambda: stage_documents(
                store,
                input_path,
                input_format,
                months=months,
                coverage=months,
                warc_options=warc_options,
                mapping=mapping,
            ),
        )
        if not documents["rows"] and stale:  # an empty export given by mistake would clear the corpus
            held = f"the corpus in {shown(storage_root)} ({len(stale)} crawl day(s)) is left as it is"
            raise WebdedupError(f"{input_path} holds no documents: {held} (to empty it, remove that folder)")
        steps.run("fingerprinted", lambda: runner("fingerprinted", store, params.fingerprint, months))
        steps.run("band_memberships", lambda: runner("band_memberships", store, params.banding, months))
        report = None
        with publication_prepared(store, output_dir):  # the fingerprints are final: built beside the stages
            global_stage = steps.global_stage(runner)
            if engine.engine == "duckdb":  # the full rebuild records the state the next `add` extends
                report = incremental.update(
                    store,
                    params.candidates,
                    params.scoring,
                    params.representative,
                    full_rebuild_flag=True,
                    run_stage=global_stage,
                )
            else:
                incremental.run_global_stages(global_stage, params.candidates, params.scoring, params.representative)

            def shards(staging: Path) -> dict[str, Any]:
                return emit(store, files, mapping, staging / SHARDS, input_path)

            manifest = steps.run(
                "manifest",
                lambda: stage_manifest(
                    store, output_dir, on_commit=transaction.commit, extra_outputs=shards if emit_shards else None
                ),
            )
    if stale:  # (said once it stands: a command that fails puts the days back)
        notice(
            f"cleared {len(stale)} crawl day(s) held in {shown(storage_root)} that this input does not hold "
            f"({stale[0]} .. {stale[-1]}); the results cover exactly {input_path}"
        )
    return Outcome(manifest, days, steps.checks, report, steps.seconds)


def held_params(store: Store, given: dict[str, dict[str, Any]]) -> tuple[FingerprintParams, BandingParams]:
    """Fingerprint and banding of an `add`: the held corpus' (a different value given is refused:
    an add fingerprints only its own days), the given ones for a new corpus."""
    chosen: dict[str, Any] = {}
    for group, asset, model in (
        ("fingerprint", "fingerprinted", FingerprintParams),
        ("banding", "band_memberships", BandingParams),
    ):
        held = store.params(asset).get(group) if store.files(asset) else None
        wanted = given.get(group, {})
        if held is not None:
            values = {k: stored_value(model, held, k) for k in model.model_fields}
            differ = {k: (values[k], v) for k, v in wanted.items() if values[k] != v}
            if differ:  # each parameter named by its flag on the command line
                shown = ", ".join(f"{{p{i}}}={{held{i}}} (held) vs {{given{i}}} (given)" for i in range(len(differ)))
                held_values = {f"held{i}": a for i, (a, _) in enumerate(differ.values())}
                given_values = {f"given{i}": b for i, (_, b) in enumerate(differ.values())}
                raise ParamError(
                    tuple(differ),
                    f"add: {shown}: changing a {{group}} parameter needs a full rebuild of every day; run `webdedup "
                    "run` on the whole input instead",
                    group=group,
                    **held_values,
                    **given_values,
                )
            chosen[group] = model.checked(values)
        else:
            chosen[group] = model.checked(wanted)
    fingerprint, banding = chosen["fingerprint"], chosen["banding"]
    simhash = fingerprint.fingerprint_method == "simhash"
    if not simhash and banding.bands * banding.rows != fingerprint.num_perm and "rows" not in given.get("banding", {}):
        banding = BandingParams.checked({"bands": banding.bands, "rows": fingerprint.num_perm // banding.bands})
    check_banding(fingerprint, banding)
    return fingerprint, banding


def global_params(store: Store, given: dict[str, dict[str, Any]], full_rebuild: bool = False) -> dict[str, Any]:
    """candidates, scoring and representative of an `add`: the values given over the held
    corpus' (a group not given: None, the update keeps the held one). A full rebuild gets past a
    damaged state (it writes it again)."""
    state = incremental.load_state(store, damaged_as_absent=full_rebuild)
    held = state["parameters"] if state else {}
    chosen: dict[str, Any] = {}
    for group, model in (
        ("candidates", CandidateParams),
        ("scoring", ScoringParams),
        ("representative", RepresentativeParams),
    ):
        if given.get(group):
            base = from_stored(model, held[group]).model_dump() if held.get(group) else {}
            chosen[group] = model.checked({**base, **given[group]})
        else:
            chosen[group] = None
    return chosen


def add(
    input_path: str,
    input_format: str,
    storage_root: Path,
    output_dir: Path | ObjectPath,
    given: dict[str, dict[str, Any]],
    full_rebuild: bool = False,
    notice: Notice = _silent,
    replace_days: bool = False,
) -> Outcome:
    """Extend the held corpus with this input's crawl days (a held day given again is replaced;
    dropping its held documents needs `replace_days`), update the global stages, publish. `given`:
    {group: {field: value}} given; other global groups keep the held values. Raises StageFailed or
    WebdedupError (then nothing was changed)."""
    _check_input(input_path, input_format, storage_root, output_dir)
    store = Store(storage_root)
    with damage_named(store), _writing(storage_root, output_dir, f"webdedup add {input_path}", notice) as transaction:
        if not store.files("documents"):
            notice(f"{shown(storage_root)} held no corpus: a new one is started with {input_path}")
        fingerprint, banding = held_params(store, given)
        chosen = global_params(store, given, full_rebuild)
        mapping = mapping_for_add(store, given_mapping(store, given.get("columns")))
        days = input_days(input_path, input_format, store=store, mapping=mapping, explain=True)
        if not days:
            raise no_days_error(input_path, input_format)
        months = months_of(days)  # the held days of these months that the input lacks are kept
        steps = _Steps(store, checked=False)
        documents = partial(stage_documents, months=months, extend=True, mapping=mapping, replace_days=replace_days)
        steps.run("documents", lambda: documents(store, input_path, input_format))
        steps.run("fingerprinted", lambda: DUCKDB.run("fingerprinted", store, fingerprint, months))
        steps.run("band_memberships", lambda: DUCKDB.run("band_memberships", store, banding, months))
        if isinstance(output_dir, Path) and (output_dir / SHARDS).is_dir():  # stale once the corpus changes
            notice(f"{output_dir / SHARDS} goes: an add does not emit shards (`webdedup run --emit-shards` does)")
        with publication_prepared(store, output_dir):
            groups = (chosen["candidates"], chosen["scoring"], chosen["representative"])
            report = steps.run("update", lambda: incremental.update(store, *groups, full_rebuild_flag=full_rebuild))
            manifest = steps.run(
                "manifest", lambda: stage_manifest(store, output_dir, on_commit=transaction.commit), "publish"
            )
        return Outcome(manifest, days, steps.checks, report, steps.seconds)
