"""Run configuration of each asset, with defaults so the UI and schedules launch with none.

Defaults: 5-token shingles, 120 MinHash values in 20 bands of 6 rows, threshold 0.8. At the
threshold a pair becomes a candidate with probability 1 - (1 - 0.8^6)^20 = 0.998; the classic
8 x 8 at 0.7 gives only 0.378 and stays available through config.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

import dagster as dg
from pydantic import Field

FIXTURE_INPUT = str(Path(__file__).resolve().parents[2] / "fixtures" / "documents.csv")
DEFAULT_INPUT = os.environ.get("WEBDEDUP_INPUT", FIXTURE_INPUT)


class DocumentsConfig(dg.Config):
    input_path: str = Field(
        default=DEFAULT_INPUT,
        description="CSV, Parquet, .warc or .warc.gz file, folder or glob; for commoncrawl a CSV of "
        "(warc_filename, warc_offset, warc_length) targets.",
    )
    input_format: Literal["auto", "csv", "parquet", "warc", "commoncrawl"] = Field(
        default="auto", description="auto: from each file's suffix; commoncrawl: fetch the targets by byte range."
    )
    warc_max_record_bytes: int = Field(
        default=16 * 1024 * 1024, ge=1, description="WARC records (or fetched ranges) larger than this are rejected."
    )
    cc_base_url: str = Field(
        default="https://data.commoncrawl.org/",
        description="Where Common Crawl WARC paths are fetched from: an http(s) URL or a local mirror folder.",
    )
    cc_accept_terms_of_use: bool = Field(
        default=False,
        description="Must be true to fetch from Common Crawl: you accept https://commoncrawl.org/terms-of-use.",
    )
    cc_timeout_seconds: float = Field(default=30.0, gt=0, description="Timeout of one range request.")
    cc_max_retries: int = Field(default=3, ge=0, description="Retries after a timeout, 5xx or 429.")
    cc_retry_backoff_seconds: float = Field(default=1.0, ge=0, description="First retry delay; doubles each time.")
    cc_concurrency: int = Field(default=4, ge=1, description="Range requests in flight.")
    warc_workers: int = Field(
        default=1, ge=0, description="Processes converting local WARC files; 0: one per CPU, never more than files."
    )

    def warc_options(self):
        from ..ingest.options import WarcOptions

        return WarcOptions(
            max_record_bytes=self.warc_max_record_bytes,
            cc_base_url=self.cc_base_url,
            cc_accept_terms_of_use=self.cc_accept_terms_of_use,
            cc_timeout_seconds=self.cc_timeout_seconds,
            cc_max_retries=self.cc_max_retries,
            cc_retry_backoff_seconds=self.cc_retry_backoff_seconds,
            cc_concurrency=self.cc_concurrency,
            workers=self.warc_workers,
        )


class FingerprintConfig(dg.Config):
    shingle_size: int = Field(default=5, ge=1, description="Tokens per shingle.")
    num_perm: int = Field(default=120, ge=1, description="MinHash values per document.")
    seed: int = Field(default=1, ge=0, description="Seed of the MinHash permutations.")


class BandConfig(dg.Config):
    bands: int = Field(default=20, ge=1, description="LSH bands; bands x rows must equal num_perm.")
    rows: int = Field(default=6, ge=1, description="MinHash values per band.")


class CandidateConfig(dg.Config):
    max_pair_slots: int = Field(default=1_000_000, ge=0, description="Budget of pair slots the band join may create.")
    bucket_policy: Literal["fail", "star"] = Field(
        default="fail", description="fail: stop over budget; star: link hot buckets to their first member."
    )
    hot_bucket_size: int = Field(default=1000, ge=2, description="Bucket size above which `star` applies.")


class ScoreConfig(dg.Config):
    threshold: float = Field(default=0.8, gt=0, le=1, description="Exact Jaccard for is_duplicate.")


class DuplicateConfig(dg.Config):
    threshold: float = Field(default=0.8, gt=0, le=1, description="Exact Jaccard a duplicate pair needs.")


class RepresentativeConfig(dg.Config):
    representative_policy: Literal["newest", "oldest", "longest"] = Field(
        default="newest", description="newest: newest crawled_at, then most tokens, then smallest doc_id."
    )
