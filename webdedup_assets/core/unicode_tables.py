"""Per-codepoint tables that let the compiled kernel reproduce core.normalize.normalize_text.

normalize_text = NFD, drop nonspacing marks (Mn, except the kana voicing marks), NFC, lower(), every run of characters
outside L/N/M -> one space, trimmed. For most text this is a function of each character
alone; the table holds, per codepoint c, kind[c] and M(c) = lower(NFC(drop_Mn(NFD(c)))).

A document is mapped character by character only when every character is context-free:

* after NFD and dropping Mn, every remaining character has canonical combining class 0
  (so canonical reordering cannot move anything across it), and none of them can be the
  second character of a canonical composition (every such candidate is collected from the
  two-character canonical decompositions, plus the Hangul V and T jamo). Then NFC of the
  concatenation is the concatenation itself: nothing can compose across characters.
* Hangul syllables (U+AC00-U+D7A3) decompose into jamo and compose back to themselves;
  what could follow and compose with them (V or T jamo) is itself not context-free.
* U+03A3 GREEK CAPITAL SIGMA: str.lower() maps it by context (final sigma, the only
  context-dependent lowercase mapping in CPython): ς when the nearest character before it
  that is not case-ignorable is cased and the nearest one after it is not (or there is
  none), else σ. The kernel applies that rule with per-codepoint casing bits, which are
  read off str.lower() itself (see _casing), so they are the properties CPython uses.

Any document holding another character is flagged and normalized by normalize_text itself,
so the result is always exactly normalize_text's. tests/test_kernel_normalize.py runs every
codepoint, alone and between neighbours, through the fused tokenizer against core.reference.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
import unicodedata
from functools import lru_cache
from pathlib import Path

import numpy as np

from .normalize import KEPT_MARKS

KIND_SEPARATOR = 0  # M(c) is made of separators only
KIND_IDENTITY = 1  # M(c) == c and c is a word character: copy its bytes
KIND_MAP = 2  # anything else: map to M(c), classify each output character
KIND_DROP = 3  # M(c) is empty (nonspacing marks)
KIND_CONTEXT = 4  # not context-free: the whole document goes to normalize_text
KIND_SIGMA = 5  # U+03A3: lowercased to final ς or σ by its neighbours, as str.lower() does

# casing bits per codepoint, over the characters it leaves after NFD and dropping Mn
CASE_IGNORABLE = 1  # all of them are case-ignorable (or there are none)
FIRST_CASED = 2  # the first one that is not case-ignorable is cased
LAST_CASED = 4  # the last one that is not case-ignorable is cased

SIGMA = 0x03A3


def composition_seconds() -> set[int]:
    """Every character that can be the second of a canonical composition (a superset)."""
    seconds = set(range(0x1161, 0x1176)) | set(range(0x11A8, 0x11C3))  # Hangul V and T jamo
    for codepoint in range(sys.maxunicode + 1):
        mapping = unicodedata.decomposition(chr(codepoint))
        if mapping and not mapping.startswith("<"):
            parts = mapping.split()
            if len(parts) == 2:
                seconds.add(int(parts[1], 16))
    return seconds


def _is_separator(char: str) -> bool:
    return unicodedata.category(char)[0] not in "LNM"


def _cache_file() -> Path:
    """Tables depend on the Unicode database of this Python and on this module's code."""
    digest = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:12]
    name = f"unicode-tables-py{sys.version_info[0]}{sys.version_info[1]}-{unicodedata.unidata_version}-{digest}.npz"
    return Path(__file__).resolve().parent / "__pycache__" / name


NAMES = ("kind", "offsets", "codepoints", "separator", "growth", "casing", "marks", "classes", "words", "sizes")


@lru_cache(maxsize=1)
def _all_tables() -> dict[str, np.ndarray]:
    """Load the tables from __pycache__ (fast) or build and store them (slow: once per install)."""
    path = _cache_file()
    try:
        with np.load(path) as stored:
            return {name: stored[name] for name in NAMES}
    except (OSError, KeyError, ValueError):
        pass
    arrays = dict(zip(NAMES, (*_build_tables(), _build_marks())))
    arrays["growth"] = np.asarray(arrays["growth"], dtype=np.int64)
    token = _token_arrays(arrays["kind"], arrays["offsets"], arrays["codepoints"], arrays["separator"])
    arrays.update(zip(("classes", "words", "sizes"), token))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temp = tempfile.mkstemp(dir=path.parent, suffix=".npz.tmp")
        with os.fdopen(handle, "wb") as out:
            np.savez(out, **arrays)
        os.replace(temp, path)
    except OSError:  # a read-only install: build once per process
        pass
    return arrays


def _build_marks() -> np.ndarray:
    marks = np.zeros(sys.maxunicode + 1, dtype=np.uint8)
    for codepoint in range(sys.maxunicode + 1):
        if unicodedata.category(chr(codepoint)) == "Mn" and codepoint not in KEPT_MARKS:
            marks[codepoint] = 1
    return marks


def nonspacing_marks() -> np.ndarray:
    """uint8[0x110000]: 1 for category Mn (what normalize_text drops after NFD)."""
    return _all_tables()["marks"]


def tables() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int, np.ndarray]:
    """(kind uint8[0x110000], map_offsets int64[0x110001], map_codepoints uint32[], separator uint8[],
    growth, casing uint8[0x110000]): growth bounds the normalized bytes per input byte (a space
    may precede each output character); casing holds the CASE_IGNORABLE/FIRST_CASED/LAST_CASED bits."""
    t = _all_tables()
    return t["kind"], t["offsets"], t["codepoints"], t["separator"], int(t["growth"]), t["casing"]


def _casing(char: str) -> tuple[bool, bool]:
    """(case-ignorable, cased) as CPython's final-sigma rule sees them, read off str.lower():
    alone before Σ, a cased non-ignorable character makes it final; after a cased "A", an
    ignorable one is skipped (final) and a non-ignorable one decides by being cased."""
    alone = (char + "\u03a3").lower()[-1] == "\u03c2"
    after_cased = ("A" + char + "\u03a3").lower()[-1] == "\u03c2"
    ignorable = after_cased and not alone
    return ignorable, alone


def _build_tables() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    size = sys.maxunicode + 1
    seconds = composition_seconds()
    kind = np.empty(size, dtype=np.uint8)
    separator = np.zeros(size, dtype=np.uint8)
    lengths = np.zeros(size, dtype=np.int64)
    mapped: dict[int, list[int]] = {}
    growth = 2  # ASCII: "a" after a separator may be written as " a"
    ignorable = np.zeros(size, dtype=np.bool_)
    cased = np.zeros(size, dtype=np.bool_)
    for codepoint in range(size):
        ignorable[codepoint], cased[codepoint] = _casing(chr(codepoint))
    casing = np.zeros(size, dtype=np.uint8)

    def set_casing(codepoint: int, kept: list[str]) -> None:
        decisive = [ord(c) for c in kept if not ignorable[ord(c)]]
        bits = 0 if decisive else CASE_IGNORABLE
        if decisive and cased[decisive[0]]:
            bits |= FIRST_CASED
        if decisive and cased[decisive[-1]]:
            bits |= LAST_CASED
        casing[codepoint] = bits

    for codepoint in range(size):
        char = chr(codepoint)
        category = unicodedata.category(char)
        is_sep = category[0] not in "LNM"
        separator[codepoint] = is_sep
        if category in ("Cn", "Cs", "Co", "Cc", "Zs"):  # no decomposition, no case: separators
            kind[codepoint] = KIND_SEPARATOR
            set_casing(codepoint, list(unicodedata.normalize("NFD", char)) if category != "Cs" else [char])
            continue
        if codepoint == SIGMA:
            kind[codepoint] = KIND_SIGMA
            set_casing(codepoint, [char])
            continue
        decomposed = unicodedata.normalize("NFD", char)
        kept = [c for c in decomposed if unicodedata.category(c) != "Mn" or ord(c) in KEPT_MARKS]
        if 0xAC00 <= codepoint <= 0xD7A3:
            kept = [char]
        set_casing(codepoint, kept)
        # A voiced kana (が) decomposes to its base and a kept voicing mark, and NFC puts them
        # back: the character maps to itself whatever surrounds it (a base kana is a starter
        # that composes with nothing before it; marks that could reorder are flagged themselves).
        recomposes = (
            len(kept) > 1
            and all(ord(c) in KEPT_MARKS for c in kept[1:])
            and not (unicodedata.combining(kept[0]) or ord(kept[0]) in seconds)
            and unicodedata.normalize("NFC", "".join(kept)) == char
        )
        if 0xAC00 <= codepoint <= 0xD7A3 or recomposes:
            pass
        elif any(unicodedata.combining(c) or ord(c) in seconds or ord(c) == SIGMA for c in kept):
            kind[codepoint] = KIND_CONTEXT
            continue
        result = unicodedata.normalize("NFC", "".join(kept)).lower()
        if result == "":
            kind[codepoint] = KIND_DROP
        elif all(_is_separator(c) for c in result):
            kind[codepoint] = KIND_SEPARATOR
        elif result == char and not is_sep:
            kind[codepoint] = KIND_IDENTITY
        else:
            kind[codepoint] = KIND_MAP
            mapped[codepoint] = [ord(c) for c in result]
            lengths[codepoint] = len(result)
            out_bytes = len(result.encode("utf-8")) + len(result)
            growth = max(growth, -(-out_bytes // len(char.encode("utf-8"))))
    offsets = np.zeros(size + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    codepoints = np.zeros(max(1, int(offsets[-1])), dtype=np.uint32)
    for codepoint, values in mapped.items():
        codepoints[offsets[codepoint] : offsets[codepoint] + len(values)] = values
    return kind, offsets, codepoints, separator, growth, casing


# Token classes: the kinds above refined for the fused tokenizer (core.kernel.tokenize.token_hashes), so
# its per-character step is one table lookup for the common cases.
CLASS_WORD = 1  # KIND_IDENTITY, not CJK: its bytes go into the current word
CLASS_CJK = 6  # KIND_IDENTITY and CJK: a token of its own
CLASS_PLAIN_MAP = 7  # KIND_MAP to word characters (no separator, no CJK), at most 8 UTF-8 bytes


@lru_cache(maxsize=1)
def token_tables() -> tuple[np.ndarray, ...]:
    """(classes uint8[0x110000], map_offsets, map_codepoints, separator, casing, words uint64[0x110000],
    sizes uint8[0x110000]): classes are the kinds with CLASS_CJK and CLASS_PLAIN_MAP split off; for
    a word character (CLASS_WORD, CLASS_PLAIN_MAP) words[c] holds the UTF-8 bytes it adds to the
    word (c itself, or M(c)) little-endian and sizes[c] their count, 0 for every other class, so
    the kernel appends them without looking at the class. Derived from the kinds when the tables
    are built and kept with them."""
    t = _all_tables()
    return t["classes"], t["offsets"], t["codepoints"], t["separator"], t["casing"], t["words"], t["sizes"]


def _token_arrays(kind: np.ndarray, offsets: np.ndarray, codepoints: np.ndarray, separator: np.ndarray):
    """(classes, words, sizes) of token_tables, from the kinds and mappings."""
    from .normalize import CJK_RANGES, is_cjk

    classes = kind.copy()
    cjk = np.zeros(kind.shape[0], dtype=np.bool_)
    for low, high in CJK_RANGES:
        cjk[low : high + 1] = True
    classes[(kind == KIND_IDENTITY) & cjk] = CLASS_CJK
    cp = np.arange(kind.shape[0], dtype=np.uint64)
    utf8 = np.where(
        cp < 0x80,
        cp,
        np.where(
            cp < 0x800,
            (0xC0 | cp >> 6) | (0x80 | cp & 0x3F) << 8,
            np.where(
                cp < 0x10000,
                (0xE0 | cp >> 12) | (0x80 | cp >> 6 & 0x3F) << 8 | (0x80 | cp & 0x3F) << 16,
                (0xF0 | cp >> 18)
                | (0x80 | cp >> 12 & 0x3F) << 8
                | (0x80 | cp >> 6 & 0x3F) << 16
                | (0x80 | cp & 0x3F) << 24,
            ),
        ),
    ).astype(np.uint64)
    width = (1 + (cp >= 0x80) + (cp >= 0x800) + (cp >= 0x10000)).astype(np.uint8)
    word = classes == CLASS_WORD
    words = np.where(word, utf8, 0).astype(np.uint64)
    sizes = np.where(word, width, 0).astype(np.uint8)
    for codepoint in np.flatnonzero(kind == KIND_MAP).tolist():
        mapped = codepoints[offsets[codepoint] : offsets[codepoint + 1]].tolist()
        encoded = "".join(map(chr, mapped)).encode("utf-8")
        if len(encoded) <= 8 and not any(separator[m] or is_cjk(m) for m in mapped):
            classes[codepoint] = CLASS_PLAIN_MAP
            words[codepoint] = int.from_bytes(encoded, "little")
            sizes[codepoint] = len(encoded)
    return classes, words, sizes
