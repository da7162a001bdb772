"""Representatives re-chosen for the touched clusters only; deduped_documents and cluster_inspection.

Ranking, the winners' rows and cluster_inspection cost what the touched clusters cost: the
members ranked are those of the touched clusters (their clusters from the updater's `regrouped`
table), the winners' full rows are read by row group, and cluster_inspection is recomputed from
the touched clusters' pairs and members only (the kept Parquet copy supplies the other rows).

deduped_documents is one Parquet file (published as it is), so replacing some of its rows
rewrites it: the rewrite goes through the old file row group by row group, drops the rows of the
touched clusters and splices the new representatives in at their place in the full stage's
stored order (the order of the documents files, then the row in the file), with no sort over
wide rows. The old rows keep their relative order as long as the documents files keep the order
of the documents they still hold (always so when a day is added or removed); the rows of a
documents file written again in another order (a day given again from a file sorted otherwise)
are reordered among themselves in memory, their row groups encoded again; when that is more than
MOVED_BYTES of rows, the whole file is sorted by that key in DuckDB (the same result, at the cost
of a sort). A row group that only loses rows keeps the body pages that lose none as they are
(storage.parquet_splice); the new rows after the last old one form new row groups.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ...core.ranking import policy_order_by
from ...storage import parquet_splice
from ...storage.fileio import atomic_path
from ...storage.store import quote_ident, row_groups, save_table, sql_string, with_params, write_batches, write_csv
from ...threads import prefetch
from ..publish import report_path
from ..stage import DUCKDB
from ..stages.clustering import cluster_inspection, deduped_layout, ranked_sql, representative_rows
from ..stages.documents import stored_extra_columns
from .layout import incremental_dir

ROW_SHIFT = 40  # key = file index << 40 | row number in the file (a file holds < 2**40 rows)


class RepresentativesStep:
    """Mixed into the updater (engine.incremental.update._Updater): uses its con, store, parameters and report."""

    def _representatives(self) -> None:
        con, store = self.con, self.store
        con.execute("CREATE TEMP TABLE members AS SELECT doc_id FROM regrouped")
        con.execute("DROP TABLE IF EXISTS ranked")
        policy = self.representative
        order_by = policy_order_by(policy.representative_policy, policy.prefer_domains)
        con.execute(ranked_sql(store, order_by, "members", clusters="regrouped", documents="docs"))
        con.execute(
            "CREATE TEMP TABLE winners AS "
            "SELECT doc_id, cluster_id, cluster_size, token_count FROM ranked WHERE rank = 1"
        )
        files = self.files  # as in the table `docs` (engine.incremental.update)
        _, schema = self._deduped_schema()
        self._mark("representatives")
        rows = self._rewrite_deduped(files, schema)
        if rows is None:  # no row to change (touched clusters without a row there)
            rows = pq.ParquetFile(store.path("deduped_documents")).metadata.num_rows
        documents = self.documents
        figures = {
            "documents": documents,
            "removed": documents - rows,
            "retained_ratio": round(rows / documents, 4) if documents else 0.0,
        }
        store.write_stats(
            "deduped_documents", None, {"rows": rows, **figures, "engine": DUCKDB.describe(), "seconds": 0.0}
        )
        self._mark("deduped_documents")
        # cluster_inspection: rows of untouched clusters kept, touched ones recomputed from their own rows
        inspection_path = incremental_dir(store) / "cluster_inspection.parquet"
        fresh = cluster_inspection(con, store, stored_extra_columns(store), pairs="new_dup", clusters="regrouped")
        con.execute(f"""CREATE TEMP TABLE inspection AS
            SELECT * FROM (
              SELECT * FROM read_parquet({sql_string(str(inspection_path))}, hive_partitioning = false) i
               WHERE i.cluster_id NOT IN (SELECT cluster_id FROM touched_old)
              UNION ALL BY NAME SELECT * FROM ({fresh.sql_query()}))
             ORDER BY cluster_id""")
        save_table(con, "inspection", inspection_path)
        write_csv(report_path(store, "cluster_inspection.csv"), con.sql("SELECT * FROM inspection ORDER BY cluster_id"))
        self._mark("cluster_inspection")

    def _deduped_schema(self) -> tuple[pa.Schema, pa.Schema]:
        """The documents' schema and deduped_documents' (the documents' columns, then the cluster's)."""
        doc_schema = self.con.sql(f"SELECT * FROM {self.store.scan_sql('documents')} LIMIT 0").arrow().schema
        return doc_schema, pa.schema(
            [*doc_schema, ("cluster_id", pa.string()), ("cluster_size", pa.int64()), ("token_count", pa.int32())]
        )

    def _reorder_deduped(self) -> bool:
        """Documents files written again with the same rows (no document added, removed or changed):
        deduped_documents is put in their row order, its rows otherwise unchanged. Returns whether
        its order changed."""
        self.con.execute("CREATE TEMP TABLE touched_old (cluster_id VARCHAR)")
        self.con.execute(
            "CREATE TEMP TABLE winners (doc_id VARCHAR, cluster_id VARCHAR, cluster_size BIGINT, token_count INTEGER)"
        )
        for asset in ("candidate_pairs", "scored_pairs", "duplicate_pairs", "clusters"):
            self.upstream.setdefault(asset, self.store.params(asset))  # as stored: unchanged
        _, schema = self._deduped_schema()
        rows = self._rewrite_deduped(self.files, schema)
        return rows is not None

    def _new_representatives(self, files, schema: pa.Schema) -> tuple[np.ndarray, Iterator[pa.Table]]:
        """The keys of the winners of the touched clusters (ascending) and their full rows (every
        column of `schema`) in that order, read by row group as they are taken, as the full stage
        reads them: an add of many pages holds a row group of them at a time, not all of them."""
        located = self.con.sql("""SELECT d.file_idx, d.file_row AS file_row_number, w.cluster_id, w.cluster_size,
                   w.token_count
              FROM winners w JOIN docs d USING (doc_id) ORDER BY d.file_idx, d.file_row""").to_arrow_table()
        file_idx = located["file_idx"].to_numpy()
        keys = (file_idx << ROW_SHIFT) | located["file_row_number"].to_numpy()
        names = np.array([str(f) for f in files] or [""], dtype=object)[file_idx]
        winners = located.drop_columns(["file_idx"]).add_column(0, "filename", pa.array(names, pa.string()))
        return keys, representative_rows(files, winners, schema)

    def _rewrite_deduped(self, files, schema: pa.Schema) -> int | None:
        """deduped_documents without the touched clusters' rows, with the rows of their winners (the
        table `winners`), in the full stage's stored order (see the module docstring). Returns the
        rows written (None: nothing changes, the file is left as it is)."""
        con, store = self.con, self.store
        old_path = store.path("deduped_documents")
        new_keys, new_rows = self._new_representatives(files, schema)
        # the old rows kept (row number in the old file) and every final representative's key
        con.execute(f"""CREATE TEMP TABLE kept AS
            SELECT o.doc_id, o.file_row_number AS old_row FROM
              read_parquet({sql_string(str(old_path))}, file_row_number = true, hive_partitioning = false) o
             WHERE o.cluster_id NOT IN (SELECT cluster_id FROM touched_old)""")
        con.execute(f"""CREATE TEMP TABLE rep_keys AS
            SELECT doc_id, (file_idx << {ROW_SHIFT}) | file_row AS key FROM docs
             WHERE doc_id IN (SELECT doc_id FROM kept) OR doc_id IN (SELECT doc_id FROM winners)""")
        kept = con.execute(
            "SELECT k.old_row, r.key FROM kept k JOIN rep_keys r USING (doc_id) ORDER BY k.old_row"
        ).fetchnumpy()
        kept_rows, kept_keys = (np.asarray(v, np.int64) for v in kept.values())
        parameters = self._stage_run(
            "deduped_documents",
            self.representative,
            order_by=policy_order_by(self.representative.representative_policy, self.representative.prefer_domains),
        ).parameters
        old = pq.ParquetFile(old_path)
        moves = _moved_groups(old, kept_rows, kept_keys)
        if not len(new_keys) and len(kept_rows) == old.metadata.num_rows and not moves[2]:
            return None  # no row leaves, comes or moves
        if moved_bytes(old, moves[2]) > MOVED_BYTES:  # documents files reordered much of their rows
            return self._sorted_rewrite(schema, new_rows, parameters)
        options = deduped_layout(schema)
        parts = splice_parts(old, schema, kept_rows, kept_keys, new_rows, new_keys, moves)
        with atomic_path(old_path) as temp:
            # the next part's rows are decoded on a reader thread while this one is written
            rows, figures = parquet_splice.rewrite(
                old_path, temp, with_params(schema, parameters), "body", prefetch(parts, depth=1), options
            )
        self.report.deduped_rewrite = figures.as_dict()
        return rows

    def _sorted_rewrite(self, schema: pa.Schema, new_rows: Iterator[pa.Table], parameters) -> int:
        con, store = self.con, self.store
        batches = (batch for table in new_rows for batch in table.to_batches())
        con.register("new_reps_arrow", pa.RecordBatchReader.from_batches(schema, batches))
        names = ", ".join(f"u.{quote_ident(f.name)}" for f in schema)
        reader = con.sql(f"""SELECT {names} FROM (
              SELECT * FROM {store.scan_sql("deduped_documents")} o
               WHERE o.cluster_id NOT IN (SELECT cluster_id FROM touched_old)
              UNION ALL BY NAME SELECT * FROM new_reps_arrow) u
              JOIN rep_keys r USING (doc_id) ORDER BY r.key""").arrow(batch_size=8_192)
        rows = write_batches(store.path("deduped_documents"), schema, row_groups(reader), parameters)
        con.unregister("new_reps_arrow")
        return rows


MOVED_BYTES = 512 << 20  # decoded bytes of old row groups reordered in memory; more: a sorted rewrite
TAKE_ROWS = 4_096  # rows of a reordered region copied at a time


def _moved_groups(old: pq.ParquetFile, kept_rows: np.ndarray, kept_keys: np.ndarray):
    """The kept rows' final order (indices into kept_rows, by key), whether the rows before each
    index close a block (closed[k]: kept[0..k] only change places among themselves) and the old row
    groups holding a row that moves (none when the keys ascend). Rows move within closed blocks (a
    documents file rewritten with its rows in another order moves only that file's rows), so the
    groups outside them are spliced as before."""
    order = np.argsort(kept_keys, kind="stable")
    count = len(order)
    closed = np.maximum.accumulate(order) == np.arange(count)
    if closed.all():
        return order, closed, set()
    ends = np.flatnonzero(closed)
    sizes = np.diff(np.concatenate(([-1], ends)))
    moved = np.flatnonzero(np.repeat(sizes > 1, sizes))  # rows of blocks of more than one row
    bounds = np.cumsum([old.metadata.row_group(g).num_rows for g in range(old.metadata.num_row_groups)])
    return order, closed, set(np.searchsorted(bounds, kept_rows[moved], side="right").tolist())


def moved_bytes(old: pq.ParquetFile, groups: set[int]) -> int:
    """Decoded bytes of the old row groups `groups` (those splice_parts reorders in memory)."""
    return sum(old.metadata.row_group(g).total_byte_size for g in groups)


class _Ahead:
    """Rows of tables given in order, taken from the front: only the table being taken from is held."""

    def __init__(self, tables: Iterable[pa.Table]) -> None:
        self._tables = iter(tables)
        self._head: pa.Table | None = None

    def take(self, count: int) -> list[pa.Table]:
        """The next `count` rows, as slices of the tables given."""
        pieces = []
        while count > 0:
            if self._head is None or not self._head.num_rows:
                self._head = next(self._tables, None)
                if self._head is None:
                    raise ValueError(f"{count} new row(s) more keyed than given")
            pieces.append(self._head.slice(0, count))
            self._head = self._head.slice(pieces[-1].num_rows)
            count -= pieces[-1].num_rows
        return pieces

    def rest(self) -> Iterator[pa.Table]:
        if self._head is not None and self._head.num_rows:
            yield self._head
        self._head = None
        yield from self._tables


def splice_parts(
    old: pq.ParquetFile, schema: pa.Schema, kept_rows, kept_keys, new: Iterable[pa.Table], new_keys, moves=None
):
    """The rewritten file's row groups, in the full stage's stored order: the old file's kept rows
    (row numbers `kept_rows`, ascending; their keys `kept_keys`) with the rows of `new` (tables
    whose rows follow `new_keys`, ascending, read as they are taken) spliced in at their keys. An
    old row group that only loses rows is a parquet_splice.Keep (its kept pages are copied); one
    that new rows go into is decoded and becomes an Encode with them; consecutive old row groups
    whose rows change places among themselves (a documents file reordered: keys not ascending) are
    decoded together, reordered and encoded again (bounded by the caller: moved_bytes); the new rows
    after every kept row (a day added after the others) form new row groups, bounded like the
    stage's (storage.row_groups).
    moves: _moved_groups of these rows, when the caller has them."""
    order, closed, moved = moves if moves is not None else _moved_groups(old, kept_rows, kept_keys)
    new = _Ahead(new)
    # new row i goes before the kept row at sorted index `at[i]` (len(kept_rows): after the last one)
    at = np.searchsorted(kept_keys[order], new_keys, side="left")
    inside = int(np.searchsorted(at, len(kept_rows), side="left"))  # new rows before some kept row
    taken = 0  # new rows placed so far
    start = 0  # first row of the current row group
    first = 0  # index in kept_rows of the group's first kept row
    region: list[pa.Table] | None = None  # kept rows of the moved groups being read, in old order
    region_first = 0  # index in kept_rows of the region's first row
    groups = old.metadata.num_row_groups
    for group in range(groups):
        stop = start + old.metadata.row_group(group).num_rows
        last = first + int(np.searchsorted(kept_rows[first:], stop, side="left"))
        if group in moved or region is not None:
            if region is None:
                region, region_first, region_kept = [], first, []
            if last > first:
                region_kept.append(kept_rows[first:last] - start + sum(t.num_rows for t in region))
                region.append(parquet_splice.conform(old.read_row_group(group), schema))
            start, first = stop, last
            if last == 0 or not closed[last - 1]:
                continue  # the block goes on into the next group
            # the region's rows (closed blocks of the order) in final order, new rows among them,
            # taken from the decoded groups a few thousand at a time (one copy, bounded)
            upto = min(inside, int(np.searchsorted(at, last, side="left")))
            final = np.concatenate(region_kept)[order[region_first:last] - region_first]
            places = at[taken:upto] - region_first  # new row i goes before old row places[i]
            index = np.empty(len(final) + len(places), np.int64)
            index[np.arange(len(final)) + np.searchsorted(places, np.arange(len(final)), side="right")] = final
            decoded = sum(t.num_rows for t in region)
            index[places + np.arange(len(places))] = decoded + np.arange(len(places))
            source = pa.concat_tables([*region, *new.take(upto - taken)])
            taken = upto
            region = region_kept = None
            pieces = (source.take(index[lo : lo + TAKE_ROWS]) for lo in range(0, len(index), TAKE_ROWS))
            for table in row_groups(pieces):
                yield parquet_splice.Encode(table)
            source = pieces = table = None  # not held while the next group is decoded
            continue
        upto = min(inside, int(np.searchsorted(at, last, side="left")))
        if upto == taken:
            yield parquet_splice.Keep(group, kept_rows[first:last] - start)
        else:
            pieces: list[pa.Table] = []
            if last > first:
                rows = parquet_splice.conform(old.read_row_group(group), schema)
                local = kept_rows[first:last] - start
                # a piece ends where the kept rows skip a row or where new rows go in
                cuts = set((np.flatnonzero(np.diff(local) != 1) + 1).tolist())
                cuts.update(int(a) - first for a in at[taken:upto] if first < a < last)
                bounds = [0, *sorted(cuts), last - first]
                for lo, hi in zip(bounds, bounds[1:]):
                    here = int(np.searchsorted(at[:upto], first + lo, side="right"))
                    if here > taken:  # new rows whose place is before kept row `first + lo`
                        pieces.extend(new.take(here - taken))
                        taken = here
                    pieces.append(rows.slice(int(local[lo]), hi - lo))
            if upto > taken:
                pieces.extend(new.take(upto - taken))
                taken = upto
            for table in row_groups(pieces):  # bounded like the stage's, new rows included
                yield parquet_splice.Encode(table)
            rows = pieces = table = None  # not held while the next group is decoded
        start, first = stop, last
    for table in row_groups(new.rest()):
        yield parquet_splice.Encode(table)
