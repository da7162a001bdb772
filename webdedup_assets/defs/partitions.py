"""Crawl-day partitions: exactly the crawl days present in the data.

The daily stages are partitioned by the UTC day of `crawled_at`, as a dynamic partitions
definition named `crawl_days` whose keys are the days the input holds: nothing before the
first page, no empty calendar between sparse crawls, so the UI's partition bar and "% filled"
count real days. Days are added by whatever ingests:

- `webdedup run` adds the days of its input to its (ephemeral) instance before it runs;
- under `dagster dev` the `discover_crawl_days` sensor adds the days of the configured input
  (WEBDEDUP_INPUT) whenever its files change;
- the daily schedule adds yesterday's day before it requests it.

Dynamic partitions keep the order in which they were added (sorted within each batch), so a
day discovered after later days sorts after them in the UI; ranges are still exact sets of days.
"""

from __future__ import annotations

from collections.abc import Iterable

import dagster as dg

CRAWL_DAYS = "crawl_days"
crawl_days = dg.DynamicPartitionsDefinition(name=CRAWL_DAYS)


def register_days(instance: dg.DagsterInstance, days: Iterable[str]) -> list[str]:
    """Add the crawl days not yet known to the instance, sorted; returns the days added."""
    known = set(instance.get_dynamic_partitions(CRAWL_DAYS))
    new = sorted(set(days) - known)
    if new:
        instance.add_dynamic_partitions(CRAWL_DAYS, new)
    return new


def new_days(instance: dg.DagsterInstance, days: Iterable[str]) -> list[str]:
    """The days not yet registered (sorted), without adding them."""
    known = set(instance.get_dynamic_partitions(CRAWL_DAYS))
    return sorted(set(days) - known)
