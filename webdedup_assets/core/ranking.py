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


def preferred_domains(listed: str) -> list[str]:
    """The domains of a comma-separated preference list, in order: lower case, no blanks, each once."""
    domains: list[str] = []
    for item in listed.split(","):
        domain = item.strip().lower().strip(".")
        if domain and domain not in domains:
            domains.append(domain)
    return domains


def domain_rank(domain: str | None, domains: list[str]) -> int:
    """The position of a document's domain in the preference list (a subdomain counts as its
    listed domain); len(domains) when it is not listed."""
    host = (domain or "").lower()
    for rank, listed in enumerate(domains):
        if host == listed or host.endswith("." + listed):
            return rank
    return len(domains)


def domain_rank_sql(domains: list[str]) -> str:
    """domain_rank as a SQL expression over the column `domain` (DuckDB and Spark SQL alike)."""
    cases = " ".join(
        f"WHEN lower(domain) = '{d}' OR right(lower(domain), {len(d) + 1}) = '.{d}' THEN {rank}"
        for rank, d in enumerate(domains)
    )
    return f"CASE {cases} ELSE {len(domains)} END"


def policy_order_by(policy: str, prefer_domains: str = "") -> str:
    """SQL ORDER BY body for a policy, after the preferred domains when any are listed; raises
    with the allowed names on an unknown policy."""
    if policy not in REPRESENTATIVE_POLICIES:
        raise ValueError(
            f"unknown representative policy {policy!r}; choose one of {', '.join(sorted(REPRESENTATIVE_POLICIES))}"
        )
    keys = ", ".join(f"{col} {direction}" for col, direction in REPRESENTATIVE_POLICIES[policy])
    domains = preferred_domains(prefer_domains)
    return f"{domain_rank_sql(domains)} ASC, {keys}" if domains else keys
