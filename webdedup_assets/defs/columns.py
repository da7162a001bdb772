"""What each stored column means, for the column schema the UI shows (`dagster/column_schema`).

A column means the same in every asset that holds it, except where an asset's own entry says
otherwise. A column of the input that is not part of the input contract is carried through
unchanged and described as such.
"""

from __future__ import annotations

from collections.abc import Iterable

import dagster as dg

COLUMNS = {
    "doc_id": "Document id (the input's id_column), unique in the corpus.",
    "source": "Crawl or feed the page came from (source_column); empty when the input has none.",
    "domain": "Site of the page: the domain_column, else the host of its URL.",
    "crawled_at": "UTC crawl date of the page; its month is the crawl-month partition.",
    "title": "Page title (title_column); empty when the input has none.",
    "body": "Page text that is fingerprinted (text_column).",
    "token_count": "Unicode word tokens of the normalized text (each CJK ideograph, kana or Hangul syllable one).",
    "shingle_count": "Distinct shingles of the text; 0: too short to shingle, never a candidate.",
    "signature": "MinHash signature: num_perm minimum hash values of the shingle set.",
    "band_index": "LSH band (0 .. bands - 1).",
    "band_hash": "Hash of the band's rows of the signature; equal hashes in a band make a candidate pair.",
    "left_doc_id": "The pair's smaller doc_id.",
    "right_doc_id": "The pair's larger doc_id.",
    "shared_bands": "Bands in which the two signatures agree.",
    "left_domain": "Domain of the left document.",
    "right_domain": "Domain of the right document.",
    "cross_domain": "True when the two documents are on different domains.",
    "exact_jaccard": "Exact Jaccard similarity of the two shingle sets: what decides a duplicate.",
    "minhash_estimate": "Share of equal MinHash values: the signature's estimate of the Jaccard.",
    "is_duplicate": "True when exact_jaccard >= threshold.",
    "reason": "Why the pair is or is not a duplicate, in words.",
    "kind": "exact (identical shingle sets) or near (exact_jaccard >= threshold, below 1).",
    "cluster_id": "cluster-<smallest doc_id of the connected component>: stable when unrelated pages arrive.",
    "cluster_size": "Documents in the cluster (1: no duplicate).",
    "warc_filename": "WARC file of the record.",
    "warc_offset": "Byte offset of the record in its WARC file.",
    "warc_length": "Byte length of the (compressed) record.",
    "warc_record_id": "WARC-Record-ID of the record.",
    "warc_date": "WARC-Date of the record.",
    "capture_url": "WARC-Target-URI: the URL captured.",
    "record_type": "WARC-Type of the record (response, resource, request, metadata, ...).",
    "matched_doc_id": "The corpus page the new page duplicates (the most similar one); empty when none.",
    "matched_cluster_id": "The cluster of the matched corpus page.",
    "nearest_doc_id": "The most similar corpus page among the candidates, a duplicate or not; empty without any.",
    "candidates": "Corpus pages verified against the new page (its LSH candidates).",
}

OWN = {
    (
        "rejected_records",
        "kind",
    ): "What the record is instead of a page: a skipped type (request, metadata, ...) or an error "
    "(not_html, over_size_cap, truncated_gzip, ...).",
    ("rejected_records", "reason"): "Why the record is not a document, in words.",
    ("rejected_records", "doc_id"): "The doc_id the record would have had.",
    ("checked_documents", "doc_id"): "Page of the new input.",
    ("checked_documents", "is_duplicate"): "True when a corpus page has exact_jaccard >= the corpus' threshold.",
    (
        "checked_documents",
        "exact_jaccard",
    ): "Highest exact Jaccard to a corpus candidate; empty when the page has no candidate.",
    ("deduped_documents", "token_count"): "Tokens of the representative (the representative policy's tie-break).",
}


def describe(asset: str, column: str) -> str:
    """The description of a stored column of an asset."""
    own = OWN.get((asset, column)) or COLUMNS.get(column)
    return own or f"Field `{column}` of the input, carried through unchanged."


def table_schema(asset: str, columns: Iterable[tuple[str, str]]) -> dg.TableSchema:
    """`dagster/column_schema`: (name, type) of each stored column, each with its description."""
    return dg.TableSchema(
        columns=[dg.TableColumn(name, kind, description=describe(asset, name)) for name, kind in columns]
    )
