"""Small human-readable previews of stored assets (for the UI and the CLI)."""

from __future__ import annotations

from ..storage.store import Store, connect, sql_string

MAX_CELL = 60


def _cell(value) -> str:
    text = "" if value is None else str(value)
    if isinstance(value, float):
        text = f"{value:.4f}"
    if isinstance(value, (list, tuple)) or hasattr(value, "__len__") and not isinstance(value, str):
        text = f"[{len(value)} values]"
    text = text.replace("|", "\\|").replace("\n", " ")
    return text if len(text) <= MAX_CELL else text[: MAX_CELL - 1] + "…"


def markdown_table(columns: list[str], rows: list[tuple]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def preview(store: Store, asset: str, limit: int = 10, order_by: str | None = None) -> str:
    """The first rows of an asset, long cells cut."""
    source = store.scan_sql(asset)
    con = connect()
    try:
        relation = con.sql(f"SELECT * FROM {source} {f'ORDER BY {order_by}' if order_by else ''} LIMIT {limit}")
        return markdown_table(relation.columns, relation.fetchall())
    finally:
        con.close()


def partition_previews(store: Store, asset: str, partitions: list[str], limit: int = 5) -> dict[str, str]:
    """The first rows (in file order) of each partition's first file, as Markdown, keyed by
    partition.

    One DuckDB scan over all the files: the filter on file_row_number skips every row group but
    each file's first, so hundreds of partitions cost a fraction of a second, not a query each.
    Partitions without a file are left out."""
    files = {}
    for p in partitions:
        stored = store.partition_files(asset, p)
        if stored:
            files[str(stored[0])] = p
    if not files:
        return {}
    listing = ", ".join(sql_string(f) for f in files)
    con = connect()
    try:
        relation = con.sql(
            f"SELECT * FROM read_parquet([{listing}], union_by_name = true, filename = true, "
            f"file_row_number = true, hive_partitioning = false) WHERE file_row_number < {int(limit)}"
        )
        columns = [c for c in relation.columns if c not in ("filename", "file_row_number")]
        rows: dict[str, list[tuple]] = {}
        name_at, number_at = relation.columns.index("filename"), relation.columns.index("file_row_number")
        keep = [relation.columns.index(c) for c in columns]
        for row in relation.fetchall():
            rows.setdefault(row[name_at], []).append((row[number_at], tuple(row[i] for i in keep)))
    finally:
        con.close()
    return {
        files[name]: markdown_table(columns, [r for _, r in sorted(found, key=lambda item: item[0])])
        for name, found in rows.items()
    }


PAIR_WORDS = 8  # differing words shown per side


def _words(text: str | None) -> list[str]:
    return [w for w in "".join(ch.lower() if ch.isalnum() else " " for ch in (text or "")).split() if w]


def _differing(left: str | None, right: str | None) -> tuple[str, str]:
    """The words only one side has (first occurrences, in text order), at most PAIR_WORDS each."""
    a, b = _words(left), _words(right)
    only_a = [w for w in dict.fromkeys(a) if w not in set(b)]
    only_b = [w for w in dict.fromkeys(b) if w not in set(a)]
    return " ".join(only_a[:PAIR_WORDS]) or "—", " ".join(only_b[:PAIR_WORDS]) or "—"


def pair_preview(store: Store, asset: str, limit: int = 5) -> str:
    """The lowest-Jaccard pairs of a pair asset (the ones worth a look), side by side: both
    titles and the words each body has that the other lacks."""
    con = connect(store)
    try:
        rows = con.execute(f"""
            WITH pairs AS (
                SELECT left_doc_id, right_doc_id, exact_jaccard FROM {store.scan_sql(asset)}
                 ORDER BY exact_jaccard, left_doc_id, right_doc_id LIMIT {int(limit)}),
            docs AS (
                SELECT doc_id, title, body FROM {store.scan_sql("documents")}
                 WHERE doc_id IN (SELECT left_doc_id FROM pairs UNION SELECT right_doc_id FROM pairs))
            SELECT p.left_doc_id, p.right_doc_id, p.exact_jaccard, l.title, r.title, l.body, r.body
              FROM pairs p JOIN docs l ON l.doc_id = p.left_doc_id JOIN docs r ON r.doc_id = p.right_doc_id
             ORDER BY p.exact_jaccard, p.left_doc_id, p.right_doc_id""").fetchall()
    finally:
        con.close()
    table = []
    for left, right, jaccard, left_title, right_title, left_body, right_body in rows:
        only_left, only_right = _differing(left_body, right_body)
        table.append((left, right, jaccard, left_title, right_title, only_left, only_right))
    columns = ["left", "right", "jaccard", "left title", "right title", "only in left", "only in right"]
    return markdown_table(columns, table)
