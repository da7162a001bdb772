"""Crawl-month partitions: exactly the crawl months present in the data.

The daily stages are partitioned by the UTC month of `crawled_at`, as a dynamic partitions
definition named `crawl_months` whose keys (YYYY-MM) are the months the input holds: nothing
before the first page, no empty calendar between sparse crawls. A month, not a day, is the unit
of files and of Dagster materializations: a corpus spanning years of crawl days costs per page,
not milliseconds of events and files per day per asset (the corpus state still records every
day; see the README, "Storage"). Months are added by whatever ingests:

- `webdedup run` adds the months of its input to its (ephemeral) instance before it runs;
- under `dagster dev` the `discover_crawl_months` sensor adds the months of the configured input
  (WEBDEDUP_INPUT) whenever its files change;
- the daily schedule adds the month of yesterday before it requests it.
"""

from __future__ import annotations

from collections.abc import Iterable

import dagster as dg

from ..storage.state import crawl_month

CRAWL_MONTHS = "crawl_months"
crawl_months = dg.DynamicPartitionsDefinition(name=CRAWL_MONTHS)


def register_months(instance: dg.DagsterInstance, days: Iterable[str]) -> list[str]:
    """Add the months of `days` (crawl days or months) not yet known to the instance, sorted;
    returns the months added."""
    known = set(instance.get_dynamic_partitions(CRAWL_MONTHS))
    new = sorted({crawl_month(day) for day in days} - known)
    if new:
        instance.add_dynamic_partitions(CRAWL_MONTHS, new)
    return new


def new_months(instance: dg.DagsterInstance, days: Iterable[str]) -> list[str]:
    """The months of `days` not yet registered (sorted), without adding them."""
    known = set(instance.get_dynamic_partitions(CRAWL_MONTHS))
    return sorted({crawl_month(day) for day in days} - known)
