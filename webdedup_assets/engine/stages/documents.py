"""The documents stage: the validated input (engine.reading) stored per crawl month.

A month held in one file is documents/part-<month>.parquet; a month of several files (input
files adopted as they are, storage.adopt; days an add wrote beside kept ones) holds segments
part-<month>.<first day>.parquet, read in name order, so the days keep their order. The corpus
state records every day, its rows and its input files. `webdedup add` keeps the held days of a
month its input does not hold.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from ...errors import WebdedupError
from ...ingest.contract import REQUIRED_COLUMNS
from ...ingest.inputs import WARC_FORMATS, InputFile, day_of_file, require_unchanged, resolve_input
from ...ingest.options import WarcOptions
from ...params import ColumnParams
from ...progress import Task
from ...storage.adopt import MONTH_SQL, adoptable_files
from ...storage.fileio import atomic_path
from ...storage.partitioned import write_split
from ...storage.state import crawl_month, record_documents, require_same_input
from ...storage.store import Store, connect, copy_query, scalar, sql_string
from ...threads import prefetch, thread_count
from ..columns import mapping_for_add, mapping_of, require_same_mapping
from ..reading import (
    combine_checksums,
    combined_sha256,
    input_days,
    load_input,
    read_error,
    select_sql,
    without_empty_shards,
)
from ..stage import DUCKDB, StageOutput, StageRun
from .documents_add import Retained, refuse_dropping, refuse_held_doc_ids, retained_for_add
from .documents_warc import (
    clear_rejections,
    discard_staging,
    input_params,
    record_rejections,
    stage_warc,
    warc_options_of,
)


def stage_documents(
    store: Store,
    input_path: str,
    input_format: str = "auto",
    months: list[str] | None = None,
    coverage: list[str] | None = None,
    warc_options: WarcOptions | None = None,
    extend: bool = False,
    mapping: ColumnParams | None = None,
    replace_days: bool = False,
) -> dict[str, Any]:
    """The documents stage through the contract; returns its figures with the stored input
    parameters (input_path, input_files, input_sha256, extra_columns, warc). `mapping`: the input
    fields that are the contract's columns (None: its own names; with `extend`, the held corpus')."""
    if extend and months is not None:
        mapping = mapping_for_add(store, mapping)
    params = input_params(input_format, warc_options, mapping)
    result = DUCKDB.run(
        "documents",
        store,
        params,
        months,
        input_path=input_path,
        coverage=coverage,
        extend=extend,
        replace_days=replace_days,
    )
    return {**result.parameters["input"], **result.figures, "rows": result.rows, "seconds": result.seconds}


@DUCKDB.implements("documents")
def documents_stage(run: StageRun) -> StageOutput:
    """Validate the input and write the documents asset.

    Options: input_path; coverage; extend (`webdedup add`: the input may be another one than
    the held days'; the held days of the run's months that the input does not hold are kept,
    see documents_add); replace_days (an add may drop the held documents of the days it gives again).

    Unpartitioned ([None]): every document goes to documents/data.parquet.
    With months (crawl-month partitions, YYYY-MM): only files that can hold those months are
    read (a file whose name carries a date outside them is skipped), and each month's documents
    go to documents/part-<month>.parquet and its segments (see _write_months); a month without
    documents keeps no file. Any document read whose month is not in `coverage` (the partitions
    that exist) is reported, with its doc_id, never silently left out.
    """
    store = run.store
    months = None if run.partitions == [None] else list(run.partitions)
    input_path = run.options["input_path"]
    coverage = run.options.get("coverage")
    extend = bool(run.options.get("extend"))
    input_format = run.params.input_format
    mapping = mapping_of(run.params)
    all_files = resolve_input(input_path, input_format)
    files = all_files
    uncovered_files: list[str] = []
    if months is not None:
        if not extend:
            require_same_input(store, input_path, input_format, months)
        require_same_mapping(store, mapping, months, extend)
        wanted = set(months)
        files = [f for f in all_files if (day := day_of_file(f.path)) is None or crawl_month(day) in wanted]
        if all_files and not files:  # none for these months: one that cannot be read says so (else a run read none)
            input_days(input_path, input_format, store, warc_options_of(run.params), mapping, explain=True)
        if coverage is not None:
            uncovered_files = [
                str(f.path)
                for f in all_files
                if (d := day_of_file(f.path)) is not None and crawl_month(d) not in coverage
            ]
    sources, described, warc_summary = files, [f.describe() for f in files], None
    if any(f.format in WARC_FORMATS for f in files):  # WARC -> staged Parquet, validated like any input
        files, described, warc_summary, rejected = stage_warc(store, sources, warc_options_of(run.params))
        record_rejections(store, rejected, sources, extend)
    elif not extend:
        clear_rejections(store)
    files = without_empty_shards(files)
    retained = Retained()
    if extend and months is not None:
        retained = retained_for_add(store, files, months, mapping)
        files = [*files, *retained.staged]
    con = connect(store)
    run.derive(input_path=input_path, input_files=described, **({"warc": warc_summary} if warc_summary else {}))
    if not files:  # every file of the input is dated outside these months
        extra = []
        con.execute(
            "CREATE TEMP VIEW parsed AS SELECT NULL::VARCHAR AS doc_id, NULL::VARCHAR AS source, "
            "NULL::VARCHAR AS domain, NULL::DATE AS crawled_at, NULL::VARCHAR AS title, "
            "NULL::VARCHAR AS body, NULL::INTEGER AS __file_index WHERE false"
        )
        con.execute("CREATE TEMP TABLE keys AS SELECT doc_id, crawled_at, __file_index FROM parsed")
    else:
        extra, defaulted = load_input(con, files, mapping, store if extend else None)
    run.derive(input_sha256=combined_sha256(sources) if sources else None, extra_columns=extra)
    dated = {"documents_given_default_date": defaulted} if mapping.default_date and files else {}
    params = run.parameters
    select = select_sql(extra)
    schema = con.sql(f"SELECT {select} FROM parsed LIMIT 0").arrow().schema
    try:
        if months is None:
            with atomic_path(store.path("documents")) as temp:
                try:
                    copy_query(con, f"SELECT {select} FROM parsed", temp, params)
                except duckdb.Error as err:
                    raise read_error(err, files) from None
            require_unchanged(sources)
            rows = scalar(con, "SELECT count(*) FROM keys")
            return StageOutput(rows, dated, {None: rows}, {None: {}}, schema)
        kept = [p for paths in retained.files.values() for p in paths]
        refuse_held_doc_ids(con, kept)
        if not run.options.get("replace_days"):
            refuse_dropping(con, retained)
        written = _write_months(
            con, store, select, months, params, files, retained.files, mapping == ColumnParams(), retained.by_day
        )
        require_unchanged(sources)
        for f in retained.staged:  # (a run killed before this leaves a .tmp file: removed with the leftovers)
            f.path.unlink(missing_ok=True)
        entries = {**_day_entries(written.pop("day_rows"), sources), **retained.entries}
        record_documents(store, input_path, input_format, months, entries)
        figures = {**written.pop("figures"), **dated}
        if coverage is not None:
            figures.update(_uncovered(con, coverage, uncovered_files))
        return StageOutput(figures["rows"], figures, written["partition_rows"], written["partition_figures"], schema)
    finally:
        con.close()
        discard_staging(store)


def _write_months(
    con,
    store: Store,
    select: str,
    months: list[str],
    params: dict[str, Any],
    files: list[InputFile],
    kept: dict[str, list[Path]] | None = None,
    unmapped: bool = True,
    by_day: set[str] = frozenset(),
) -> dict[str, Any]:
    """Every month of the run as documents/part-<month>.parquet and segments; months without
    documents lose their files.

    An input file that already is exactly the stored form and holds days of one month that no
    other file holds is adopted as a byte copy, a segment part-<month>.<first day>.parquet (see
    _adoptable_files: daily or monthly exports); every other document is written in one pass over
    the input (COPY ... PARTITION_BY month), each month then moved into place. `kept` (`webdedup
    add`): stored files of a month that stay as they are; what is written beside them goes to
    segments named by their first day; the months of `by_day` are written a segment per day.
    `unmapped`: the input is read with the contract's own column names (else only files already
    in the stored form can be adopted)."""
    kept = kept or {}
    wanted = set(months)
    month_list = ", ".join(sql_string(m) for m in months)
    in_run = f"{MONTH_SQL} IN ({month_list})"
    day_rows = dict(
        con.execute(f"SELECT CAST(crawled_at AS VARCHAR), count(*) FROM keys WHERE {in_run} GROUP BY 1").fetchall()
    )
    month_rows: dict[str, int] = {}
    for day, rows in day_rows.items():
        month_rows[crawl_month(day)] = month_rows.get(crawl_month(day), 0) + rows
    stored_schema = con.sql(f"SELECT {select} FROM parsed LIMIT 0").arrow().schema
    adopted = adoptable_files(  # file index -> (month, first day, rows)
        con,
        files,
        stored_schema,
        wanted,
        unmapped,
        held=lambda file, month, first_day: store.holds_copy_of("documents", month, first_day, file.path, file.sha256),
    )
    adopted_rows: dict[str, int] = {}
    for month, _, rows in adopted.values():
        adopted_rows[month] = adopted_rows.get(month, 0) + rows
    copied = sorted(m for m in month_rows if month_rows[m] > adopted_rows.get(m, 0))
    adopted_list = ", ".join(str(i) for i in adopted) or "-1"
    first_copied = dict(
        con.execute(
            f"SELECT {MONTH_SQL}, CAST(min(crawled_at) AS VARCHAR) FROM keys "
            f"WHERE {in_run} AND __file_index NOT IN ({adopted_list}) GROUP BY 1"
        ).fetchall()
    )
    kept_rows = {m: sum(pq.read_metadata(p).num_rows for p in paths) for m, paths in kept.items()}
    staging = store.asset_dir("documents") / f".staging-{os.getpid()}-{uuid.uuid4().hex}"
    staging.parent.mkdir(parents=True, exist_ok=True)
    partition_rows: dict[str, int] = {}
    partition_figures: dict[str, dict[str, Any]] = {}
    try:
        if copied:
            skip = f" AND __file_index NOT IN ({', '.join(str(i) for i in adopted)})" if adopted else ""
            shown = Task(
                "documents", sum(month_rows[m] for m in copied) - sum(adopted_rows.get(m, 0) for m in copied), "docs"
            )
            try:
                split = MONTH_SQL
                if by_day:
                    daily = ", ".join(sql_string(m) for m in sorted(by_day))
                    split = f"CASE WHEN {MONTH_SQL} IN ({daily}) THEN CAST(crawled_at AS VARCHAR) ELSE {MONTH_SQL} END"
                query = f"SELECT {select}, {split} AS __month FROM parsed"
                if adopted or sum(month_rows.values()) < scalar(con, "SELECT count(*) FROM keys"):
                    # Only then: with this filter DuckDB's stream no longer keeps the input order
                    # (it does without it), so the rows of a month may come in another order.
                    query += f" WHERE {in_run}{skip}"
                _split_by_month(con, query, staging, params, shown)
            except _InputFailed as err:  # e.g. a Parquet string column that is not UTF-8
                raise read_error(err.error, files) from None
            finally:
                shown.close()
        for month in months:
            if month not in month_rows and not kept.get(month):
                store.remove("documents", month)  # a month without documents (or whose input was deleted)
                continue
            segments = [
                store.adopt("documents", month, files[i].path, params, segment=first, sha256=files[i].sha256)
                for i, (m, first, _) in sorted(adopted.items(), key=lambda item: item[1][1])
                if m == month
            ]
            staying = kept.get(month, [])
            main = store.path("documents", month)
            # Files are read in name order: a month of one file has part-<month>.parquet, a month of
            # several has segments named by their first day (so the days stay in order, as one run of
            # all the days stores them); a kept month file beside new days becomes such a segment.
            alone = not staying and not segments
            if main in staying and (month in copied or segments):
                oldest = (
                    "SELECT CAST(min(crawled_at) AS VARCHAR) "
                    f"FROM read_parquet({sql_string(str(main))}, hive_partitioning = false)"
                )
                first = scalar(con, oldest)
                staying = [store.rename_to_segment("documents", month, first) if p == main else p for p in staying]
            store.remove_segments("documents", month, keep=[*segments, *staying])
            if month in copied and month in by_day:
                for written in sorted(staging.glob(f"part-{month}-??.parquet")):  # (adopted days have none)
                    store.place_segment("documents", month, written.stem.removeprefix("part-"), written)
            elif month in copied:
                written = staging / f"part-{month}.parquet"
                if not written.exists():
                    raise WebdedupError(f"documents: crawl month {month} has documents but none were written")
                if alone:
                    store.place("documents", month, written)
                else:
                    store.place_segment("documents", month, first_copied[month], written)
            if main not in staying and not (month in copied and alone and month not in by_day):
                main.unlink(missing_ok=True)
            partition_figures[month] = {
                "files_kept": len(staying),
                "segments_adopted": len(segments),
                "days": sorted(d for d in day_rows if crawl_month(d) == month),
            }
            partition_rows[month] = month_rows.get(month, 0) + kept_rows.get(month, 0)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return {
        "day_rows": day_rows,
        "partition_rows": partition_rows,
        "partition_figures": partition_figures,
        "figures": {
            "rows": sum(partition_rows.values()),
            "months": len(months),
            "days_with_documents": len(day_rows),
            "files_adopted": len(adopted),
        },
    }


class _InputFailed(Exception):
    """DuckDB failed while streaming the input (it raises OSError or ArrowInvalid there)."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


# Rows fetched from DuckDB at a time: about 30 MB of pages; the months' row groups are
# regrouped from them (storage.partitioned.write_split).
SPLIT_BATCH_ROWS = 16_384


def _split_by_month(con, query: str, staging: Path, params: dict[str, Any], progress: Task) -> dict[str, int]:
    """The documents of `query` (its last column, __month, names each row's crawl month) as
    staging/part-<month>.parquet, rows in input order within each month.

    One pass over the input, whatever the number of months: DuckDB reads and validates (its
    Parquet reader checks UTF-8, the query types every column) on its threads, a reader thread
    fetches its batches, and pyarrow writers compress each month's row groups on the cores
    (the body with LZ4, the other columns with zstd as every other stored asset). DuckDB's own
    COPY ... PARTITION_BY held every month's rows of a thread in memory and spilled them, which
    made a many-month input much slower than one COPY to a single file."""
    con.execute("SET SESSION preserve_insertion_order = true")
    try:
        reader = con.sql(query).to_arrow_reader(batch_size=SPLIT_BATCH_ROWS)
    except duckdb.Error as err:
        raise _InputFailed(err) from None

    def batches():
        source = iter(reader)
        while True:
            try:
                batch = next(source)
            except StopIteration:
                return
            except (duckdb.Error, pa.ArrowException, OSError) as err:  # DuckDB's error, raised while streaming
                raise _InputFailed(err) from None
            yield batch

    dictionary = [name for name in reader.schema.names if name not in ("doc_id", "body", "title", "__month")]
    return write_split(
        prefetch(batches(), depth=2),
        "__month",
        lambda month: staging / f"part-{month}.parquet",
        params,
        use_dictionary=dictionary,
        threads=thread_count(),
        progress=progress,
        # the bodies are read again by fingerprinted, scored_pairs and deduped_documents: LZ4 for
        # them, which those stages decompress faster than zstd
        lz4=["body"],
    )


def _day_entries(day_rows: dict[str, int], sources: list[InputFile]) -> dict[str, dict[str, Any]]:
    """The corpus-state entry of each day with documents: its rows and the input files that can
    hold it (a file whose name carries another day cannot)."""
    return {
        day: {
            "rows": rows,
            "input_files": [
                {"path": str(f.path), "sha256": f.sha256} for f in sources if (day_of_file(f.path) or day) == day
            ],
        }
        for day, rows in sorted(day_rows.items())
    }


def _uncovered(con, coverage: list[str], uncovered_files: list[str]) -> dict[str, Any]:
    """Documents read whose month has no partition (before, after or between those that exist):
    counted and named, never silently dropped."""
    listed = ", ".join(sql_string(m) for m in coverage)
    where = f"strftime(crawled_at, '%Y-%m') NOT IN ({listed})" if coverage else "true"
    months = f"SELECT DISTINCT strftime(crawled_at, '%Y-%m') m FROM keys WHERE {where} ORDER BY m"
    sample = f"SELECT doc_id FROM keys WHERE {where} ORDER BY doc_id LIMIT 10"
    return {
        "documents_outside_partitions": scalar(con, f"SELECT count(*) FROM keys WHERE {where}"),
        "doc_ids_outside_partitions": [d for (d,) in con.execute(sample).fetchall()],
        "months_outside_partitions": [m for (m,) in con.execute(months).fetchall()],
        "files_outside_partitions": uncovered_files,
    }


def stored_input(store: Store) -> tuple[list[dict[str, Any]], str | None]:
    """Every input file the stored documents were read from (over all crawl days), and the
    combined checksum of those files (the file's own sha256 when there is one)."""
    from ...storage.store import read_params

    seen: dict[str, dict[str, Any]] = {}
    for part in store.files("documents"):
        for f in (read_params(part).get("input") or {}).get("input_files", []):
            seen.setdefault(f["path"], f)
    files = [seen[k] for k in sorted(seen)]
    if not files:
        return [], None
    return files, combine_checksums([(Path(f["path"]).name, f["sha256"]) for f in files])


def stored_extra_columns(store: Store) -> list[str]:
    """Extra (non-contract) columns present in any stored day, in first-seen order: the columns
    of DuckDB's union_by_name scan (names matched case-insensitively, as DuckDB does), read from
    the files' footers (a third of the time of asking DuckDB, at 100 files)."""
    columns: dict[str, str] = {}
    for path in store.require("documents"):
        for name in pq.read_schema(path).names:
            columns.setdefault(name.lower(), name)
    return [c for c in columns.values() if c not in REQUIRED_COLUMNS]
