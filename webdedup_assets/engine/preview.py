"""Small human-readable previews of stored assets (for the UI and the CLI)."""

from __future__ import annotations

from .storage import Store, connect, sql_string

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


def preview(
    store: Store, asset: str, limit: int = 10, order_by: str | None = None, partition: str | None = None
) -> str:
    """The first rows of an asset (of one partition file when given), long cells cut."""
    source = f"read_parquet({sql_string(str(store.path(asset, partition)))})" if partition else store.scan_sql(asset)
    con = connect()
    try:
        relation = con.sql(f"SELECT * FROM {source} {f'ORDER BY {order_by}' if order_by else ''} LIMIT {limit}")
        return markdown_table(relation.columns, relation.fetchall())
    finally:
        con.close()
