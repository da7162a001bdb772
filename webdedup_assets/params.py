"""The parameter model: the only place where a default, an allowed range or a description lives.

One frozen model per stage group. The Dagster Config classes (`defs/config.py`) and the
command line flags (`cli.py`) are generated from these fields, so changing a default here
changes it everywhere. Pure: no Dagster, no environment variables, no files.

Validation errors are `ParamError`s naming the parameter, its value and the allowed range; the
CLI shows the parameter as its flag (`--num-perm 0: ...`), Dagster as its config field.
"""

from __future__ import annotations

import math
import re
import types
import typing
from collections.abc import Callable, Mapping
from datetime import date
from typing import Any, Literal

import annotated_types
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.fields import FieldInfo

from .errors import WebdedupError

MIB = 1024 * 1024
MAX_HAMMING_DEFAULT = 3
# Fields added after artifacts were first stored: kept out of the stored parameters while they hold
# their default (storage.serial.to_stored), so the artifacts of the default path are the bytes they
# were before the field existed, and artifacts written before it read back as the default. Such a
# default is part of the stored format: never change it.
STORED_UNLESS_DEFAULT = {"stored_unless_default": True}


class ParamError(ValueError):
    """An invalid parameter value. `render(display)` writes the message with each parameter
    shown as `display(name)` (a CLI flag, or the config field itself)."""

    def __init__(self, names: tuple[str, ...], template: str, **values: Any) -> None:
        self.names = names
        self.template = template
        self.values = values
        super().__init__(self.render())

    def render(self, display: Callable[[str], str] = str) -> str:
        return self.template.format(**{f"p{i}": display(n) for i, n in enumerate(self.names)}, **self.values)


class ParamAdvice(ParamError, WebdedupError):
    """A refusal that names parameters (another column mapping than the held corpus', a pair budget
    to raise): a WebdedupError where a stage raises it (its message names the config fields), a
    ParamError for the command line, which names their flags."""


class ParamGroup(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    @classmethod
    def checked(cls, values: Mapping[str, Any] | None = None) -> typing.Self:
        """Build from a mapping of field values; the first invalid one raises a ParamError."""
        try:
            return cls(**dict(values or {}))
        except ValidationError as err:
            raise param_error(cls, err) from None


class ColumnParams(ParamGroup):
    """Which field of a tabular input (CSV, Parquet, JSON Lines) gives each column of the input contract.

    A field name, or a dotted path into nested objects (`metadata.url`; a column whose own name holds
    the dots is taken first). The defaults are the contract's own names."""

    id_column: str = Field(default="doc_id", min_length=1, description="Field holding the document id.")
    text_column: str = Field(default="body", min_length=1, description="Field holding the text fingerprinted.")
    date_column: str = Field(
        default="crawled_at",
        min_length=1,
        description="Field holding the crawl date: an ISO 8601 date or timestamp, or a number of epoch seconds.",
    )
    url_column: str = Field(
        default="",
        description="Field holding the page URL; the domain is its host when the input has no domain field. "
        "Empty: none.",
    )
    domain_column: str = Field(default="domain", min_length=1, description="Field holding the site's domain.")
    title_column: str = Field(
        default="title", description="Field holding the title; an absent `title` field (or empty: none) gives none."
    )
    source_column: str = Field(
        default="source",
        description="Field holding the source (crawl or feed name); an absent `source` field (or empty: none) gives "
        "none.",
    )
    default_date: str = Field(
        default="",
        description="Crawl date (YYYY-MM-DD) of a record without a usable date; empty: such a record stops the run.",
    )

    @field_validator("default_date")
    @classmethod
    def _a_day(cls, value: str) -> str:
        if value and not re.fullmatch(r"\d{4}-\d{2}-\d{2}", value):
            raise ParamError(("default_date",), "{p0} {value!r}: must be a date YYYY-MM-DD", value=value)
        if value:
            try:
                date.fromisoformat(value)
            except ValueError:
                raise ParamError(("default_date",), "{p0} {value!r}: not a calendar date", value=value) from None
        return value


class InputParams(ColumnParams):
    """How the input is read: its format, its column mapping, and the WARC and Common Crawl options."""

    input_format: Literal["auto", "csv", "parquet", "jsonl", "warc", "commoncrawl"] = Field(
        default="auto",
        description="Input format; auto: from each file's suffix; commoncrawl: fetch WARC byte ranges of the "
        "targets listed in a CSV.",
    )
    warc_max_record_bytes: int = Field(
        default=16 * MIB, ge=1, description="WARC records (or fetched ranges) larger than this many bytes are rejected."
    )
    cc_base_url: str = Field(
        default="https://data.commoncrawl.org/",
        min_length=1,
        description="Where Common Crawl WARC paths are fetched from: an http(s) URL or a local mirror folder.",
    )
    cc_accept_terms_of_use: bool = Field(
        default=False,
        description="Must be true to fetch from Common Crawl: you accept https://commoncrawl.org/terms-of-use.",
    )
    cc_timeout_seconds: float = Field(
        default=30.0, gt=0, description="Seconds one attempt of a range request may take in all (not each read)."
    )
    cc_max_retries: int = Field(default=3, ge=0, description="Retries of a range request after a timeout, 5xx or 429.")
    cc_retry_backoff_seconds: float = Field(
        default=1.0, ge=0, description="Seconds before the first retry; doubles with each retry."
    )
    cc_concurrency: int = Field(default=4, ge=1, description="Range requests in flight.")
    warc_workers: int = Field(
        default=1, ge=0, description="Processes converting local WARC files; 0: one per CPU, never more than files."
    )


class FingerprintParams(ParamGroup):
    """Shingles and MinHash signatures."""

    shingle_size: int = Field(
        default=5, ge=1, description="Tokens per shingle: words, or characters when shingle_unit is char."
    )
    shingle_unit: Literal["word", "char"] = Field(
        default="word",
        description="word: shingles of words (each CJK ideograph, kana or Hangul syllable is a word); char: of "
        "characters of the normalized text, spaces included, for short texts and scripts without word "
        "boundaries (Thai, Khmer...); with char use a shingle_size of 5-9.",
    )
    num_perm: int = Field(default=130, ge=1, description="MinHash values per document (minhash only).")
    seed: int = Field(default=1, ge=0, description="Seed of the MinHash permutations (minhash only).")
    fingerprint_method: Literal["minhash", "simhash"] = Field(
        default="minhash",
        description="minhash: num_perm MinHash values, banded (bands x rows); simhash: one 64-bit SimHash of the "
        "same shingle hashes weighted by their frequency, candidates within max_hamming bits (for short texts: "
        "titles, queries, snippets; num_perm, seed, bands and rows are then unused).",
        json_schema_extra=STORED_UNLESS_DEFAULT,
    )


MAX_SIMHASH_KEYS = 256  # band rows per document a SimHash blocking may write


class BandingParams(ParamGroup):
    """LSH banding of the signatures: bands x rows must equal num_perm."""

    bands: int = Field(default=26, ge=1, description="LSH bands; bands x rows must equal num_perm.")
    rows: int = Field(default=5, ge=1, description="MinHash values per band.")
    max_hamming: int = Field(
        default=MAX_HAMMING_DEFAULT,
        ge=0,
        le=31,
        description="simhash only: pairs whose fingerprints differ in at most this many of 64 bits are certain to "
        "be candidates (the 64 bits are split into max_hamming + key_blocks blocks; a shared key makes a "
        "candidate).",
        json_schema_extra=STORED_UNLESS_DEFAULT,
    )
    key_blocks: int = Field(
        default=1,
        ge=1,
        le=8,
        description="simhash only: blocks per key. Every key_blocks of the max_hamming + key_blocks blocks are one "
        "key (C(max_hamming + key_blocks, key_blocks) keys per document): pairs within max_hamming bits still "
        "always share a key, and longer keys make far fewer chance candidates in a large corpus (e.g. 3: 20 keys "
        "of about 32 bits at max_hamming 3, instead of 4 of 16).",
        json_schema_extra=STORED_UNLESS_DEFAULT,
    )

    @model_validator(mode="after")
    def _key_count(self) -> BandingParams:
        keys = math.comb(self.max_hamming + self.key_blocks, self.key_blocks)
        if self.max_hamming + self.key_blocks > 64 or keys > MAX_SIMHASH_KEYS:
            raise ParamError(
                ("max_hamming", "key_blocks"),
                "{p0} {max_hamming} with {p1} {key_blocks} makes {keys} keys per document (at most "
                f"{MAX_SIMHASH_KEYS}, and at most 64 blocks)",
                max_hamming=self.max_hamming,
                key_blocks=self.key_blocks,
                keys=keys,
            )
        return self


class CandidateParams(ParamGroup):
    """The global band join and its budget."""

    max_pair_slots: int = Field(
        default=0,
        ge=0,
        description="Absolute budget of pair slots the band join may create (over it: bucket_policy); 0: scale "
        "with the corpus, pair_slots_per_document x documents, at least 1,000,000.",
    )
    pair_slots_per_document: int = Field(
        default=300,
        ge=1,
        description="The budget per document when max_pair_slots is 0. An ordinary corpus needs a few (each near-"
        "duplicate pair fills one slot per shared band); one bucket of 50,000 pages needs 25,000 per page.",
    )
    candidate_scope: Literal["global", "domain"] = Field(
        default="global",
        description="global: candidates across the whole corpus (mirrors live on other sites); domain: only "
        "pairs of pages on the same domain, where the domain is a real boundary (e.g. one customer's sites).",
    )
    bucket_policy: Literal["fail", "star"] = Field(
        default="fail",
        description="Over budget: fail before the join, or star: link hot buckets to their first member.",
    )
    hot_bucket_size: int = Field(default=1000, ge=2, description="Bucket size above which the star policy applies.")


class ScoringParams(ParamGroup):
    """The one threshold: scored_pairs' is_duplicate and duplicate_pairs both use it."""

    threshold: float = Field(default=0.7, gt=0, le=1, description="Exact shingle Jaccard a duplicate pair needs.")
    verify: Literal["jaccard", "hamming"] = Field(
        default="jaccard",
        description="What decides a candidate pair: jaccard, its exact shingle Jaccard reaching the threshold; "
        "hamming (simhash only), its SimHash fingerprints lying within max_hamming bits (the Jaccard is still "
        "computed and shown beside).",
        json_schema_extra=STORED_UNLESS_DEFAULT,
    )


class RepresentativeParams(ParamGroup):
    """Which member of a cluster is kept."""

    representative_policy: Literal["newest", "oldest", "longest"] = Field(
        default="newest",
        description="newest: newest crawled_at, then most tokens, then smallest doc_id; oldest: the first copy "
        "seen; longest: the most tokens.",
    )
    verify_against_representative: bool = Field(
        default=False,
        description="Members whose exact Jaccard to their cluster's representative is below the threshold "
        "(joined only by chaining) leave the cluster: they are clustered again among themselves, with their "
        "own representatives, until every member reaches its representative. The clusters asset keeps the "
        "connected components.",
    )
    prefer_domains: str = Field(
        default="",
        description="Comma-separated domains whose copy is kept before the policy's order, in list order "
        "(a subdomain counts as its domain): e.g. the original publisher over aggregators and mirrors.",
    )

    @field_validator("prefer_domains")
    @classmethod
    def _domain_list(cls, value: str) -> str:
        for domain in (item.strip().strip(".") for item in value.split(",")):
            if domain and not re.fullmatch(r"[A-Za-z0-9_\-]+(\.[A-Za-z0-9_\-]+)*", domain):
                raise ParamError(("prefer_domains",), "{p0} {value!r}: not a domain name", value=domain)
        return value


# The master URLs Spark accepts (SparkContext's and spark-submit's forms).
SPARK_MASTER = re.compile(r"local(\[(\d+|\*)(,\d+)?\])?|local-cluster\[\d+,\d+,\d+\]|yarn|(spark|k8s|mesos)://\S+")


class EngineParams(ParamGroup):
    """Which engine computes fingerprinted, band_memberships and the global stages (candidate_pairs ..
    deduped_documents); documents and the manifest run on DuckDB either way."""

    engine: Literal["duckdb", "spark"] = Field(
        default="duckdb",
        description="duckdb: embedded, one machine; spark: Apache Spark (pyspark and Java 17; the webdedup[spark] "
        "extra), for corpora beyond one machine.",
    )
    spark_master: str = Field(
        default="",
        description="Spark master URL for --engine spark (local[4], spark://host:7077, yarn, k8s://...); empty: "
        "local[*] unless spark_remote is given.",
    )
    spark_remote: str = Field(
        default="",
        description="Spark Connect URL for --engine spark (sc://host:15002); excludes spark_master.",
    )

    @model_validator(mode="after")
    def _one_target(self) -> EngineParams:
        if self.spark_master and self.spark_remote:
            raise ParamError(
                ("spark_master", "spark_remote"),
                "give {p0} or {p1}, not both",
            )
        if self.spark_master and not SPARK_MASTER.fullmatch(self.spark_master):
            raise ParamError(
                ("spark_master",),
                "{p0} must be a Spark master URL (local[*], local[4], spark://host:7077, yarn, "
                "k8s://https://host:443), not {value!r}",
                value=self.spark_master,
            )
        if self.spark_remote and not self.spark_remote.startswith("sc://"):
            raise ParamError(
                ("spark_remote",),
                "{p0} must be a Spark Connect URL (sc://host:15002), not {value!r}",
                value=self.spark_remote,
            )
        return self


def check_banding(fingerprint: FingerprintParams, banding: BandingParams) -> None:
    if fingerprint.fingerprint_method == "simhash":  # no signature to band: blocks of the 64 bits
        return
    if banding.bands * banding.rows != fingerprint.num_perm:
        raise ParamError(
            ("bands", "rows", "num_perm"),
            "{p0} {bands} x {p1} {rows} = {product} must equal {p2} {num_perm}",
            bands=banding.bands,
            rows=banding.rows,
            product=banding.bands * banding.rows,
            num_perm=fingerprint.num_perm,
        )


def check_verify(fingerprint: dict[str, Any], scoring: ScoringParams) -> None:
    """verify hamming decides by the SimHash fingerprints: a MinHash corpus has none."""
    if scoring.verify == "hamming" and fingerprint.get("fingerprint_method", "minhash") != "simhash":
        raise ParamError(
            ("verify", "fingerprint_method"),
            "{p0} hamming needs {p1} simhash (the Hamming distance of SimHash fingerprints decides); "
            "use {p0} jaccard or {p1} simhash",
        )


class RunParams(ParamGroup):
    """Every parameter of a run, cross-checked (bands x rows = num_perm)."""

    input: InputParams = InputParams()
    fingerprint: FingerprintParams = FingerprintParams()
    banding: BandingParams = BandingParams()
    candidates: CandidateParams = CandidateParams()
    scoring: ScoringParams = ScoringParams()
    representative: RepresentativeParams = RepresentativeParams()

    @model_validator(mode="after")
    def _cross_check(self) -> RunParams:
        check_banding(self.fingerprint, self.banding)
        check_verify(self.fingerprint.model_dump(), self.scoring)
        return self

    @classmethod
    def from_stage_values(cls, values: Mapping[str, Mapping[str, Any]]) -> RunParams:
        """From {asset name: {field: value}} (the shape of Dagster run config), defaults for the rest."""
        groups = {group: STAGE_GROUPS[group].checked(values.get(asset)) for asset, group in STAGE_OF_ASSET.items()}
        try:
            return cls(**groups)
        except ValidationError as err:
            raise param_error(cls, err) from None

    def stage_values(self) -> dict[str, dict[str, Any]]:
        """{asset name: {field: value}}: the config each asset takes (the Dagster run config ops)."""
        return {asset: getattr(self, group).model_dump() for asset, group in STAGE_OF_ASSET.items()}


# Which parameter group each asset reads (the Dagster op config). duplicate_pairs reads the
# threshold scored_pairs stored, so that the two can never disagree.
STAGE_GROUPS: dict[str, type[ParamGroup]] = {
    "input": InputParams,
    "fingerprint": FingerprintParams,
    "banding": BandingParams,
    "candidates": CandidateParams,
    "scoring": ScoringParams,
    "representative": RepresentativeParams,
}
STAGE_OF_ASSET = {
    "documents": "input",
    "fingerprinted": "fingerprint",
    "band_memberships": "banding",
    "candidate_pairs": "candidates",
    "scored_pairs": "scoring",
    "deduped_documents": "representative",
}


# ---- describing fields and errors ------------------------------------------------------


def base_type(annotation: Any) -> Any:
    """int | None -> int; Literal stays."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return args[0] if len(args) == 1 else annotation
    return annotation


def choices(field: FieldInfo) -> tuple[Any, ...] | None:
    annotation = base_type(field.annotation)
    return typing.get_args(annotation) if typing.get_origin(annotation) is Literal else None


def allowed(field: FieldInfo) -> str:
    """The allowed values of a field in words: 'an integer >= 1', 'a number > 0 and <= 1', 'one of a, b'."""
    options = choices(field)
    if options is not None:
        return "one of " + ", ".join(str(o) for o in options)
    annotation = base_type(field.annotation)
    kind = {int: "an integer", float: "a number", bool: "true or false", str: "text"}.get(annotation, "a value")
    bounds = []
    for item in field.metadata:
        for cls, attr, sign in (
            (annotated_types.Gt, "gt", ">"),
            (annotated_types.Ge, "ge", ">="),
            (annotated_types.Lt, "lt", "<"),
            (annotated_types.Le, "le", "<="),
        ):
            if isinstance(item, cls):
                bounds.append(f"{sign} {getattr(item, attr)}")
        if isinstance(item, annotated_types.MinLen) and item.min_length == 1:
            kind = "non-empty text"
    return f"{kind} {' and '.join(bounds)}".strip()


def param_error(model: type[BaseModel], err: ValidationError) -> ParamError:
    """The first error of a pydantic validation as a ParamError naming field, value and range."""
    first = err.errors()[0]
    original = (first.get("ctx") or {}).get("error")
    if isinstance(original, ParamError):  # raised by a cross-field check
        return original
    loc = [str(part) for part in first["loc"]]
    owner: type[BaseModel] = model
    for part in loc[:-1]:  # nested group: RunParams.fingerprint.num_perm
        annotation = owner.model_fields[part].annotation if part in owner.model_fields else None
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            owner = annotation
    name = loc[-1] if loc else "?"
    field = owner.model_fields.get(name)
    if field is None:
        if first["type"] == "extra_forbidden":
            known = ", ".join(owner.model_fields)
            return ParamError((name,), "unknown parameter {p0} (known: {known})", known=known)
        return ParamError((name,), "{p0}: {msg}", msg=first["msg"])
    return ParamError((name,), "{p0} {value!r}: must be {allowed}", value=first.get("input"), allowed=allowed(field))
