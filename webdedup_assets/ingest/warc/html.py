"""HTML of a page: charset decision, the nesting-depth bound, title and main text.

Resiliparse detects the charset when none is declared, parses the HTML (lexbor) and extracts the
main text. What is done here is what it does not do: the order of charset sources (BOM, HTTP
header, <meta> in the first 4 KiB, detection) with a declared charset kept despite a few stray
bytes, the mapping of labels to the superset codecs browsers decode them with (Python's codecs,
and resiliparse's own mapping, keep e.g. shift_jis, euc_kr and big5 narrower than WHATWG's
decoders), and the bound on nesting depth that keeps extraction time bounded.
"""

from __future__ import annotations

import codecs
import functools
import re

from resiliparse.extract.html2text import extract_plain_text
from resiliparse.parse.encoding import detect_encoding
from resiliparse.parse.html import HTMLTree

from ..options import DEFAULT_MAX_HTML_DEPTH

# Main-content extraction costs about (elements x nesting depth): a page may nest max_html_depth
# levels while it has at most this many elements; a larger page may nest proportionally less
# (never less than MIN_DEPTH_BOUND), so the work of one record stays bounded.
ELEMENTS_AT_FULL_DEPTH = 25_000
MIN_DEPTH_BOUND = 64
META_CHARSET = re.compile(rb"""<meta[^>]{0,200}?charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]{1,40})""", re.IGNORECASE)
# WHATWG labels map some charsets to supersets; browsers decode these so, and so must we.
CHARSET_SUPERSETS = {
    "gb2312": "gb18030",
    "gbk": "gb18030",
    "shift_jis": "cp932",
    "euc_kr": "cp949",
    "big5": "big5hkscs",
    "latin_1": "cp1252",
    "iso8859_1": "cp1252",
    "ascii": "cp1252",
    "iso8859_9": "cp1254",
    "tis_620": "cp874",
    "iso8859_11": "cp874",
}


def _codec(label: str | None) -> str | None:
    """Python codec name for a charset label (with WHATWG superset mapping), or None if unknown."""
    if not label:
        return None
    try:
        name = codecs.lookup(label.strip().strip("\"'").lower()).name
    except LookupError:
        return None
    name = name.replace("-", "_")
    return CHARSET_SUPERSETS.get(name, name)


def decode_html(payload: bytes, http_charset: str | None) -> tuple[str, str, str]:
    """Decode HTML bytes: BOM, then HTTP header charset, then <meta> charset, then detection.

    A declared charset is used only if the bytes decode with it (up to a few stray bytes);
    otherwise the next source is tried. Returns (text, codec, source of the decision).
    """
    declared = [("http", _codec(http_charset))]
    if payload.startswith(b"\xef\xbb\xbf"):
        declared.insert(0, ("bom", "utf_8_sig"))
    elif payload[:2] in (b"\xff\xfe", b"\xfe\xff"):
        declared.insert(0, ("bom", "utf_16"))
    meta = META_CHARSET.search(payload[:4096])
    if meta:
        declared.append(("meta", _codec(meta.group(1).decode("ascii", "replace"))))
    # Pages in the wild are often in their declared charset but for a stray byte or two: a source
    # is kept when at most 0.5 % of the characters (or 2) do not decode, rather than guessing anew.
    for source, codec in declared:
        if not codec:
            continue
        try:
            return payload.decode(codec), codec, source
        except UnicodeDecodeError:
            text = payload.decode(codec, errors="replace")
            if text.count("\ufffd") <= max(2, len(text) // 200):
                return text, codec, f"{source} (lenient)"
    codec = _codec(detect_encoding(payload)) or "utf_8"
    return payload.decode(codec, errors="replace"), codec, "detected"


class HtmlTooDeep(Exception):
    """The page nests deeper than the bound: extracting its text could take minutes."""


@functools.lru_cache(maxsize=8)
def _deeper_than(depth: int) -> str:
    """A CSS selector matching an element with at least `depth` element ancestors."""
    return " > ".join(["*"] * (depth + 1))


def depth_bound(elements: int, max_depth: int) -> int:
    """The nesting depth a page of this many elements may reach (see ELEMENTS_AT_FULL_DEPTH)."""
    budget = max_depth * ELEMENTS_AT_FULL_DEPTH
    return min(max_depth, max(MIN_DEPTH_BOUND, budget // max(1, elements)))


def check_depth(tree: HTMLTree, max_depth: int) -> None:
    """Raise HtmlTooDeep if an element of the parsed tree is nested deeper than the bound.

    Parsing (lexbor) is linear in the input; the check is done in C by two selector queries, the
    second only when the page has more elements than the bound (a page of n elements cannot nest
    deeper than n), at a cost of at most elements x bound steps.
    """
    elements = len(tree.document.query_selector_all("*"))
    bound = depth_bound(elements, max_depth)
    if elements <= bound:
        return
    if tree.document.query_selector(_deeper_than(bound)) is not None:
        why = (
            f"max_html_depth {max_depth}"
            if bound == max_depth
            else f"the bound for a page of {elements} elements; max_html_depth {max_depth} holds up to "
            f"{ELEMENTS_AT_FULL_DEPTH} elements"
        )
        raise HtmlTooDeep(f"HTML nested more than {bound} elements deep ({why}): text extraction refused")


def extract(html: str, max_depth: int = DEFAULT_MAX_HTML_DEPTH) -> tuple[str, str]:
    """(title, main text) of an HTML page; falls back to all visible text if no main content.

    Raises HtmlTooDeep for a page nested deeper than max_depth (see check_depth).
    """
    tree = HTMLTree.parse(html)
    check_depth(tree, max_depth)
    title = (tree.title or "").strip()
    body = extract_plain_text(tree, main_content=True).strip()
    if not body:
        body = extract_plain_text(tree).strip()
    return title, body
