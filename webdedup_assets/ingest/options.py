"""How WARC input is read and, for Common Crawl targets, fetched."""

from __future__ import annotations

from dataclasses import dataclass

TERMS_URL = "https://commoncrawl.org/terms-of-use"
DEFAULT_CC_BASE_URL = "https://data.commoncrawl.org/"
DEFAULT_MAX_RECORD_BYTES = 16 * 1024 * 1024
DEFAULT_MAX_HTML_DEPTH = 2000


@dataclass(frozen=True)
class WarcOptions:
    """How WARC input is read and, for Common Crawl targets, fetched."""

    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES
    cc_base_url: str = DEFAULT_CC_BASE_URL
    cc_accept_terms_of_use: bool = False
    cc_timeout_seconds: float = 30.0
    cc_max_retries: int = 3
    cc_retry_backoff_seconds: float = 1.0
    cc_concurrency: int = 4
    workers: int = 1  # processes converting local WARC files; 0: one per CPU; never more than files
    max_html_depth: int = DEFAULT_MAX_HTML_DEPTH  # deeper HTML is rejected (html_too_deep) before extraction
    default_date: str = ""  # YYYY-MM-DD: a record whose date cannot be read at all (see records.lenient_date)
