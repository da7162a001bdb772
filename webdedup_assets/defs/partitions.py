"""Crawl-day partitions.

The daily stages are partitioned by the UTC day of `crawled_at`. The range starts at
WEBDEDUP_PARTITION_START (default 2000-01-01) and ends at WEBDEDUP_PARTITION_END when set
(inclusive, so a corpus with future-dated pages can be covered), otherwise yesterday (UTC).
`webdedup run` builds the partitions from the days present in its input instead, so no page
is left out whatever its date.
"""

from __future__ import annotations

import os
from datetime import date, timedelta

import dagster as dg

DEFAULT_START = "2000-01-01"


def daily_partitions() -> dg.DailyPartitionsDefinition:
    start = os.environ.get("WEBDEDUP_PARTITION_START", DEFAULT_START)
    end = os.environ.get("WEBDEDUP_PARTITION_END")
    if end:
        exclusive_end = (date.fromisoformat(end) + timedelta(days=1)).isoformat()
        return dg.DailyPartitionsDefinition(start_date=start, end_date=exclusive_end, timezone="UTC")
    # The last partition is yesterday: a day is fingerprinted once it is complete (the schedule
    # runs it shortly after midnight UTC); pages dated today are reported until then.
    return dg.DailyPartitionsDefinition(start_date=start, timezone="UTC")


def input_day_partitions(days: list[str]) -> dg.StaticPartitionsDefinition:
    """Exactly the crawl days present in an input (used by `webdedup run`)."""
    return dg.StaticPartitionsDefinition(sorted(days))
