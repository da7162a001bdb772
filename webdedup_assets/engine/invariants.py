"""Checks over stored assets: invariants that hold for every corpus, and pinned counts.

Each function returns (passed, details); engine.checks declares which asset each one checks.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import WebdedupError
from ..params import BandingParams
from ..storage.fileio import atomic_path
from ..storage.objects import ObjectPath, is_uri, open_input, size_and_mtime
from ..storage.serial import stored_value
from ..storage.store import Store, connect, file_identity, scalar
from .stages.documents import stored_input

if TYPE_CHECKING:
    from .shingle_sets import ShingleSets

EXPECTATIONS_SUFFIX = ".expected.json"


def doc_ids_unique(store: Store) -> tuple[bool, dict[str, Any]]:
    con = connect()
    dupes = con.execute(f"""SELECT doc_id FROM {store.scan_sql("documents")}
        GROUP BY doc_id HAVING count(*) > 1 ORDER BY doc_id LIMIT 5""").fetchall()
    total = scalar(con, f"SELECT count(*) FROM {store.scan_sql('documents')}")
    return not dupes, {"documents": total, "duplicated_doc_ids": [d for (d,) in dupes]}


def candidates_well_formed(store: Store) -> tuple[bool, dict[str, Any]]:
    """left < right, and no document without shingles takes part in any candidate."""
    con = connect()
    cand = store.scan_sql("candidate_pairs")
    unordered = scalar(con, f"SELECT count(*) FROM {cand} WHERE NOT left_doc_id < right_doc_id")
    first_unordered = _first_pairs(con, cand, "NOT left_doc_id < right_doc_id") if unordered else []
    # A semi-join on doc_id (hash join); an OR join condition would be a nested loop join,
    # documents x pairs, which does not finish at a million documents.
    empty_ids = con.execute(f"""
        SELECT DISTINCT f.doc_id FROM {store.scan_sql("fingerprinted")} f
         WHERE f.shingle_count = 0
           AND f.doc_id IN (SELECT left_doc_id FROM {cand} UNION ALL SELECT right_doc_id FROM {cand})
         ORDER BY f.doc_id LIMIT 5""").fetchall()
    return unordered == 0 and not empty_ids, {
        "pairs_not_ordered": unordered,
        "first_pairs_not_ordered": first_unordered,
        "empty_documents_in_candidates": [d for (d,) in empty_ids],
    }


def _first_pairs(con, table: str, where: str, extra: str = "", limit: int = 5) -> list[list]:
    """The first offending pairs (left_doc_id, right_doc_id[, extra]) in doc_id order."""
    columns = "left_doc_id, right_doc_id" + (f", {extra}" if extra else "")
    rows = con.execute(f"SELECT {columns} FROM {table} WHERE {where} ORDER BY 1, 2 LIMIT {limit}").fetchall()
    return [list(r) for r in rows]


def _first_ids(con, sql: str, limit: int = 5) -> list:
    return [d for (d,) in con.execute(f"{sql} ORDER BY 1 LIMIT {limit}").fetchall()]


def duplicates_meet_threshold(store: Store) -> tuple[bool, dict[str, Any]]:
    """Every pair reaches the threshold, or with verify hamming lies within max_hamming bits."""
    stored = store.params("duplicate_pairs")
    threshold = stored["duplicates"]["threshold"]
    if stored["duplicates"].get("verify") == "hamming":
        limit = stored_value(BandingParams, stored.get("banding"), "max_hamming")
        rule, column, figures = f"hamming_distance > {limit}", "hamming_distance", {"max_hamming": limit}
        named = "beyond_max_hamming"
    else:
        rule, column, figures = f"exact_jaccard < {threshold!r}", "exact_jaccard", {"threshold": threshold}
        named = "below_threshold"
    con = connect()
    dup = store.scan_sql("duplicate_pairs")
    below = scalar(con, f"SELECT count(*) FROM {dup} WHERE {rule}")
    unordered = scalar(con, f"SELECT count(*) FROM {dup} WHERE NOT left_doc_id < right_doc_id")
    return below == 0 and unordered == 0, {
        **figures,
        f"pairs_{named}": below,
        f"first_pairs_{named}": _first_pairs(con, dup, rule, column) if below else [],
        "pairs_not_ordered": unordered,
        "first_pairs_not_ordered": _first_pairs(con, dup, "NOT left_doc_id < right_doc_id") if unordered else [],
    }


def every_document_in_one_cluster(store: Store) -> tuple[bool, dict[str, Any]]:
    con = connect()
    # each side read once into a table; one full join counts both kinds of unmatched ids
    con.execute(f"CREATE TEMP TABLE d AS SELECT doc_id FROM {store.scan_sql('documents')}")
    con.execute(
        f"CREATE TEMP TABLE c AS SELECT doc_id, count(*) AS n FROM {store.scan_sql('clusters')} GROUP BY doc_id"
    )
    without, not_documents = con.execute(
        "SELECT count(*) FILTER (WHERE c.doc_id IS NULL), count(*) FILTER (WHERE d.doc_id IS NULL) "
        "FROM d FULL OUTER JOIN c ON d.doc_id = c.doc_id"
    ).fetchall()[0]
    queries = {
        "documents_without_cluster": (
            "SELECT d.doc_id FROM d LEFT JOIN c USING (doc_id) WHERE c.doc_id IS NULL",
            without,
        ),
        "documents_in_several_clusters": (
            "SELECT doc_id FROM c WHERE n > 1",
            scalar(con, "SELECT count(*) FROM c WHERE n > 1"),
        ),
        "clustered_ids_not_in_documents": (
            "SELECT c.doc_id FROM c LEFT JOIN d USING (doc_id) WHERE d.doc_id IS NULL",
            not_documents,
        ),
    }
    details: dict[str, Any] = {}
    for key, (sql, count) in queries.items():
        details[key] = count
        details[f"first_{key}"] = _first_ids(con, sql) if count else []
    con.close()
    return all(details[k] == 0 for k in queries), details


def one_representative_per_cluster(store: Store) -> tuple[bool, dict[str, Any]]:
    con = connect()
    clusters = scalar(con, f"SELECT count(DISTINCT cluster_id) FROM {store.scan_sql('clusters')}")
    reps, distinct = con.execute(
        f"SELECT count(*), count(DISTINCT cluster_id) FROM {store.scan_sql('deduped_documents')}"
    ).fetchall()[0]
    details: dict[str, Any] = {"clusters": clusters, "representatives": reps, "clusters_with_representative": distinct}
    representative = store.params("deduped_documents").get("representatives") or {}
    if representative.get("verify_against_representative"):
        # far members split off their component (engine.stages.clustering._verify_against_representative):
        # every component keeps its cluster_id and representative; each part split off has its own
        without = scalar(
            con,
            f"SELECT count(DISTINCT cluster_id) FROM {store.scan_sql('clusters')} WHERE cluster_id NOT IN "
            f"(SELECT cluster_id FROM {store.scan_sql('deduped_documents')})",
        )
        details["parts_split_off"] = distinct - (clusters - without)
        passed = reps == distinct and without == 0
    else:
        passed = reps == clusters == distinct
    if not passed:
        deduped, clu = store.scan_sql("deduped_documents"), store.scan_sql("clusters")
        details["first_clusters_without_representative"] = _first_ids(
            con, f"SELECT DISTINCT cluster_id FROM {clu} WHERE cluster_id NOT IN (SELECT cluster_id FROM {deduped})"
        )
        details["first_clusters_with_several_representatives"] = [
            [cluster, ids]
            for cluster, ids in con.execute(
                f"SELECT cluster_id, list(doc_id ORDER BY doc_id) FROM {deduped} GROUP BY cluster_id "
                "HAVING count(*) > 1 ORDER BY cluster_id LIMIT 5"
            ).fetchall()
        ]
    return passed, details


# ---- pinned counts -------------------------------------------------------------------


def expectations_path(input_path: str) -> Path | ObjectPath | None:
    """fixtures/documents.csv -> fixtures/documents.expected.json; a folder -> folder/webdedup.expected.json
    (an object and a prefix in object storage alike)."""
    if any(ch in input_path for ch in "*?["):
        return None
    path = ObjectPath.of(input_path) if is_uri(input_path) else Path(input_path).expanduser()
    if _is_folder(path):
        return path / f"webdedup{EXPECTATIONS_SUFFIX}"
    return path.with_name(path.name.split(".")[0] + EXPECTATIONS_SUFFIX)


def _is_folder(path: Path | ObjectPath) -> bool:
    if isinstance(path, Path):
        return path.is_dir()
    try:
        size_and_mtime(path)
        return False
    except WebdedupError:  # not an object: a prefix
        return True


def _read_text(path: Path | ObjectPath) -> str | None:
    """The file's text; None when there is no such file."""
    try:
        with open_input(path) as handle:
            return handle.read().decode("utf-8")
    except (FileNotFoundError, WebdedupError):
        return None


def load_expectations(store: Store) -> tuple[dict[str, int] | None, str]:
    """The pinned counts for the current input, or None and the reason they do not apply."""
    input_path = (store.params("documents").get("input") or {}).get("input_path", "")
    _, checksum = stored_input(store)
    path = expectations_path(input_path)
    if path is None:
        return None, f"input {input_path!r} is a glob: no expectations file is looked up"
    text = _read_text(path)
    if text is None:
        return None, f"no expectations file {path} for this input; create one to pin counts"
    try:
        spec = json.loads(text)
    except json.JSONDecodeError as err:
        return None, f"{path} is not valid JSON ({err})"
    if spec.get("input_sha256") != checksum:
        return None, (
            f"{path} pins counts for input sha256 {spec.get('input_sha256')}, but the input now has sha256 {checksum}"
        )
    return dict(spec.get("counts", {})), f"counts pinned by {path}"


def actual_counts(store: Store) -> dict[str, int]:
    con = connect()
    counts: dict[str, int] = {}
    if store.files("documents"):
        counts["documents"] = scalar(con, f"SELECT count(*) FROM {store.scan_sql('documents')}")
    if store.files("candidate_pairs"):
        counts["candidate_pairs"] = scalar(con, f"SELECT count(*) FROM {store.scan_sql('candidate_pairs')}")
    if store.files("duplicate_pairs"):
        dup = store.scan_sql("duplicate_pairs")
        counts["duplicate_pairs"] = scalar(con, f"SELECT count(*) FROM {dup}")
        counts["exact_duplicate_pairs"] = scalar(con, f"SELECT count(*) FROM {dup} WHERE kind = 'exact'")
        counts["near_duplicate_pairs"] = counts["duplicate_pairs"] - counts["exact_duplicate_pairs"]
    if store.files("clusters"):
        clu = store.scan_sql("clusters")
        counts["duplicate_clusters"] = scalar(
            con, f"SELECT count(DISTINCT cluster_id) FROM {clu} WHERE cluster_size > 1"
        )
        counts["singletons"] = scalar(con, f"SELECT count(*) FROM {clu} WHERE cluster_size = 1")
    if store.files("deduped_documents"):
        counts["representatives"] = scalar(con, f"SELECT count(*) FROM {store.scan_sql('deduped_documents')}")
    return counts


def compare_counts(store: Store, keys: list[str]) -> tuple[bool | None, dict[str, Any]]:
    """None when no expectations apply (the reason is in the details)."""
    expected, reason = load_expectations(store)
    if expected is None:
        return None, {"skipped": reason}
    actual = actual_counts(store)
    compared = {k: {"expected": expected[k], "actual": actual.get(k)} for k in keys if k in expected}
    if not compared:
        return None, {"skipped": f"{reason}, but none of {', '.join(keys)} is pinned"}
    passed = all(v["expected"] == v["actual"] for v in compared.values())
    pending = [] if passed else months_not_built(store)
    if pending:  # the counts are the whole input's: a Dagster run of some of its months is no failure
        listed = ", ".join(pending[:3]) + (f" and {len(pending) - 3} more" if len(pending) > 3 else "")
        return None, {"skipped": f"{reason} for the whole input, whose crawl month(s) {listed} are not built yet"}
    return passed, {"source": reason, **compared}


def months_not_built(store: Store) -> list[str]:
    """The crawl months of the stored documents' input that the storage does not hold (read from
    the input's date field; none when it cannot be read that way)."""
    from ..params import InputParams
    from ..storage.serial import from_stored
    from ..storage.state import months_of
    from .columns import mapping_of
    from .reading import input_days

    try:
        stored = store.params("documents").get("input") or {}
        given = from_stored(InputParams, stored)
        days = input_days(stored.get("input_path", ""), given.input_format, mapping=mapping_of(given))
    except (WebdedupError, OSError, ValueError):
        return []
    return sorted(set(months_of(days)) - set(store.partitions("documents")))


GIANT_CLUSTER_SIZE = 1000
COHESION_MAX_MEMBERS = 100_000  # members checked per run at most (largest clusters first): a bounded cost


def member_jaccards(
    store: Store,
    max_members: int | None = None,
    min_size: int = 3,
    changed_clusters: pa.Array | None = None,
    previous_key: str | None = None,
    known_sets: ShingleSets | None = None,
    representatives: pa.Table | None = None,
) -> pa.Table:
    """(doc_id, cluster_id, cluster_size, representative, jaccard): the exact shingle Jaccard of each
    member of a cluster of min_size or more documents to its representative (the representative
    itself left out), the largest clusters first, at most max_members rows (a bounded cost).

    Measured once per build of clusters and deduped_documents: the diagnostics of the
    deduped_documents stage and the clusters_cohesive check share it (a small Arrow file beside
    deduped_documents, keyed by the identity of the files it was measured on).

    changed_clusters and previous_key (an incremental update): the cluster ids, old and new, whose
    members or representative changed, and measured_key(store) before the update; the kept
    measurement, if made under that key, supplies the rows of every other cluster and only the
    rest is measured (the same table as a measurement from scratch). known_sets: shingle sets at
    hand (engine.shingle_sets); only the documents they lack are read from the store.

    representatives (doc_id, cluster_id): those the deduped_documents stage is about to write (it
    measures while it writes them); measured afresh and not kept: keep_member_jaccards keeps the
    table once the file it belongs to is written."""
    max_members = cohesion_cap(max_members)
    if representatives is not None:
        return _measure_member_jaccards(store, max_members, min_size, representatives=representatives)
    key = measured_key(store, max_members, min_size)
    cache = store.asset_dir("deduped_documents") / MEMBER_CACHE
    kept = read_keyed_table(cache)
    if key is not None and kept is not None and kept[1] == key:
        return kept[0]
    usable = changed_clusters is not None and kept is not None and previous_key is not None and kept[1] == previous_key
    previous = kept[0] if usable else None
    table = _measure_member_jaccards(store, max_members, min_size, previous, changed_clusters, known_sets)
    if key is not None:
        write_keyed_table(cache, table, key)
    return table


MEMBER_CACHE = "member_jaccards.arrow"  # not *.parquet: never read as part of the asset
# verify_against_representative: the members that left their component (doc_id, their part's cluster_id)
SPLIT_MEMBERS = "split_members.arrow"


def representatives_relation(con, store: Store, representatives: pa.Table | None) -> str:
    """SQL for the (doc_id, cluster_id) of each cluster's representative on `con`: those given
    (registered on con; the deduped_documents stage before it writes them), else those stored."""
    if representatives is None:
        return f"(SELECT doc_id, cluster_id FROM {store.scan_sql('deduped_documents')})"
    con.register("representatives_arrow", representatives.select(["doc_id", "cluster_id"]))
    return "representatives_arrow"


def keep_member_jaccards(store: Store, table: pa.Table, max_members: int | None = None, min_size: int = 3) -> None:
    """Keep a measurement made on representatives given before deduped_documents was written
    (member_jaccards(..., representatives=)), under the key of the files as they are now."""
    key = measured_key(store, cohesion_cap(max_members), min_size)
    if key is not None:
        write_keyed_table(store.asset_dir("deduped_documents") / MEMBER_CACHE, table, key)


def cluster_parts_sql(con, store: Store) -> str:
    """SQL for (doc_id, cluster_id) of every clustered document as deduped_documents ranked it: its
    component's cluster_id, or (verify_against_representative) the part it was split off into."""
    split = read_keyed_table(store.asset_dir("deduped_documents") / SPLIT_MEMBERS)
    if split is None or split[1] != measured_key(store):
        return f"(SELECT doc_id, cluster_id FROM {store.scan_sql('clusters')})"
    con.register("split_members", split[0])
    return f"""(SELECT c.doc_id, COALESCE(s.cluster_id, c.cluster_id) AS cluster_id
                  FROM {store.scan_sql("clusters")} c LEFT JOIN split_members s USING (doc_id))"""


def read_keyed_table(path: Path) -> tuple[pa.Table, str] | None:
    """(table, the key it was written with) of an Arrow file kept beside an asset (the member
    measurement, the typed diagnostics), or None when there is no readable one."""
    if not path.exists():
        return None
    try:
        with pa.memory_map(str(path)) as source:
            table = pa.ipc.open_file(source).read_all()
    except (OSError, pa.ArrowException):
        return None
    key = (table.schema.metadata or {}).get(b"key", b"").decode()
    return table.replace_schema_metadata(None), key


def write_keyed_table(path: Path, table: pa.Table, key: str) -> None:
    """Keep `table` as an Arrow file with `key` (what it was computed from) in its metadata."""
    with atomic_path(path) as temp:
        schema = table.schema.with_metadata({"key": key})
        with pa.OSFile(str(temp), "wb") as sink, pa.ipc.new_file(sink, schema) as out:
            out.write_table(table.replace_schema_metadata(schema.metadata))


def cohesion_cap(max_members: int | None) -> int:
    """max_members, or COHESION_MAX_MEMBERS read when called (tests lower it)."""
    return COHESION_MAX_MEMBERS if max_members is None else int(max_members)


def measured_key(store: Store, max_members: int | None = None, min_size: int = 3) -> str | None:
    """What a measurement of member Jaccards (and the diagnostics built on it) was made on: the
    identity of the clusters and deduped_documents files and the cap."""
    max_members = cohesion_cap(max_members)
    files = {a: store.files(a) for a in ("clusters", "deduped_documents")}
    if not all(files.values()):
        return None
    try:  # every file of each (Spark writes an asset as several parts)
        identities = {a: [file_identity(f) for f in fs] for a, fs in files.items()}
    except FileNotFoundError:
        return None
    return json.dumps({**identities, "max_members": max_members, "min_size": min_size}, sort_keys=True)


def _measure_member_jaccards(
    store: Store,
    max_members: int,
    min_size: int,
    previous: pa.Table | None = None,
    changed_clusters: pa.Array | None = None,
    known_sets: ShingleSets | None = None,
    representatives: pa.Table | None = None,
) -> pa.Table:
    from ..core.fingerprint import shingling
    from .shingle_sets import load_shingle_sets  # the shingle sets scoring uses, recomputed for these documents

    shingle_size, unit = shingling(store.params("fingerprinted")["fingerprint"])
    con = connect(store)
    try:
        members = _members(con, store, max_members, min_size, representatives)
        jaccard = np.zeros(members.num_rows, np.float64)
        known = np.zeros(members.num_rows, bool)
        if previous is not None and members.num_rows:
            # an unchanged cluster keeps its id, members and representative: its rows are reused
            con.register("members_arrow", members.append_column("row", pa.array(np.arange(members.num_rows))))
            con.register("previous_arrow", previous)
            con.register("changed_arrow", pa.table({"cluster_id": changed_clusters.cast(pa.string())}))
            reused = con.execute("""
                SELECT m.row, p.jaccard FROM members_arrow m
                  JOIN previous_arrow p USING (doc_id, cluster_id, cluster_size, representative)
                 WHERE m.cluster_id NOT IN (SELECT cluster_id FROM changed_arrow)""").fetchnumpy()
            rows = np.asarray(reused["row"], np.int64)
            jaccard[rows], known[rows] = np.asarray(reused["jaccard"], np.float64), True
    finally:
        con.close()
    todo = np.flatnonzero(~known)
    if len(todo):
        measured = members.take(pa.array(todo))
        ids = pa.concat_arrays(
            [measured.column("doc_id").combine_chunks(), measured.column("representative").combine_chunks()]
        )
        if known_sets is not None:
            sets = known_sets.covering(store, shingle_size, ids, unit)
        else:
            sets = load_shingle_sets(store, shingle_size, pc.unique(ids), unit)
        jaccard[todo] = sets.jaccard(
            sets.nodes(measured.column("doc_id")), sets.nodes(measured.column("representative"))
        )
    return members.append_column("jaccard", pa.array(jaccard, pa.float64()))


def members_to_measure(store: Store, max_members: int, min_size: int, representatives: pa.Table) -> pa.Table:
    """(doc_id, cluster_id, cluster_size, representative): the members member_jaccards measures
    for these representatives (doc_id, cluster_id), in its order, without measuring them."""
    con = connect(store)
    try:
        return _members(con, store, max_members, min_size, representatives)
    finally:
        con.close()


def _members(con, store: Store, max_members: int, min_size: int, representatives: pa.Table | None) -> pa.Table:
    reps = representatives_relation(con, store, representatives)
    return con.sql(f"""
        WITH ranked AS (
            SELECT c.doc_id, c.cluster_id, c.cluster_size, r.doc_id AS representative
              FROM {store.scan_sql("clusters")} c
              JOIN {reps} r USING (cluster_id)
             WHERE c.cluster_size >= {int(min_size)} AND c.doc_id <> r.doc_id)
        SELECT doc_id, cluster_id, cluster_size, representative FROM ranked
         ORDER BY cluster_size DESC, cluster_id, doc_id LIMIT {int(max_members)}""").to_arrow_table()


def with_jaccards(members: pa.Table, sets: ShingleSets) -> pa.Table:
    """members (members_to_measure) with the column jaccard measured on these shingle sets."""
    jaccard = sets.jaccard(sets.nodes(members.column("doc_id")), sets.nodes(members.column("representative")))
    return members.append_column("jaccard", pa.array(jaccard, pa.float64()))


def cluster_cohesion(
    store: Store, giant_size: int = GIANT_CLUSTER_SIZE, max_members: int | None = None
) -> tuple[bool, dict[str, Any]]:
    """Clusters that connected components may have chained too far: giant clusters (more than
    giant_size documents), and members whose exact Jaccard to their representative is below the
    threshold (A~B and B~C put A and C together though A and C share little). A cluster of two
    cannot chain, so only clusters of three or more are measured, the largest first, at most
    max_members members per run (`members_checked` says how many)."""
    threshold = float((store.params("duplicate_pairs").get("duplicates") or {})["threshold"])
    con = connect(store)
    try:
        giants = con.execute(f"""SELECT cluster_id, any_value(cluster_size) FROM {store.scan_sql("clusters")}
            WHERE cluster_size > {int(giant_size)} GROUP BY cluster_id ORDER BY 2 DESC, 1 LIMIT 5""").fetchall()
    finally:
        con.close()
    members = member_jaccards(store, max_members)
    jaccard = members.column("jaccard").to_numpy()
    below = np.flatnonzero(jaccard < threshold)
    low: list[list] = []
    for i in below[np.argsort(jaccard[below], kind="stable")][:5]:
        row = members.slice(int(i), 1).to_pylist()[0]
        low.append([row["cluster_id"], row["doc_id"], round(float(jaccard[i]), 4)])
    low_count = int(below.size)
    details = {
        "giant_clusters": [[cluster, size] for cluster, size in giants],
        "giant_cluster_limit": giant_size,
        "members_below_threshold_to_representative": low_count,
        "threshold": threshold,
        "first_members_below (cluster_id, doc_id, jaccard)": low,
        "members_checked": members.num_rows,
    }
    return not giants and not low_count, details
