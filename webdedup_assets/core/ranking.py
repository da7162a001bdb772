"""Representative policies: which member of a cluster is kept."""

from __future__ import annotations

# Each policy is an ordered list of (column, direction); doc_id ASC always breaks the last tie
# so the choice is total and stable.
REPRESENTATIVE_POLICIES: dict[str, list[tuple[str, str]]] = {
    # The freshest copy, then the most complete one.
    "newest": [("crawled_at", "DESC"), ("token_count", "DESC"), ("doc_id", "ASC")],
    # The first copy seen (keeps the original over later mirrors).
    "oldest": [("crawled_at", "ASC"), ("token_count", "DESC"), ("doc_id", "ASC")],
    # The most complete copy, then the freshest.
    "longest": [("token_count", "DESC"), ("crawled_at", "DESC"), ("doc_id", "ASC")],
}


def policy_order_by(policy: str) -> str:
    """SQL ORDER BY body for a policy; raises with the allowed names on an unknown one."""
    if policy not in REPRESENTATIVE_POLICIES:
        raise ValueError(
            f"unknown representative policy {policy!r}; choose one of {', '.join(sorted(REPRESENTATIVE_POLICIES))}"
        )
    return ", ".join(f"{col} {direction}" for col, direction in REPRESENTATIVE_POLICIES[policy])
