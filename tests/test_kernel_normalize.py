"""The fused tokenizer (kernel.token_hashes: normalize_text and tokenize in one pass over the bytes,
driven by core.unicode_tables) must give core.reference's tokens for every codepoint.

Every check goes through what the product runs: core.fingerprint.fingerprint_texts (token counts)
and shingle_sets (the sorted shingle hashes scoring uses), flagged documents included. The
shingle size is larger than any template's token count, so each document is one whole-text
window and its single shingle hash pins the exact token sequence, not just the token set.
"""

from __future__ import annotations

import sys

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from webdedup_assets.core import kernel, unicode_tables
from webdedup_assets.core.fingerprint import fingerprint_texts, normalize_exact, shingle_sets, string_buffers
from webdedup_assets.core.hashing import shingle_hash, token_hash
from webdedup_assets.core.minhash import MinHashParams
from webdedup_assets.core.normalize import normalize_text, text_tokens, tokenize
from webdedup_assets.core.reference import char_tokens, shingle_set, shingle_windows

SIZE = 8  # more than the few tokens of a template below: one whole-text window per document
COEFF_A, COEFF_B = MinHashParams(8, 11).coefficients()
EVERY_CODEPOINT = [chr(c) for c in range(sys.maxunicode + 1) if not 0xD800 <= c <= 0xDFFF]


class Reference:
    """core.reference's (token count, sorted shingle hashes) per document: text_tokens, then
    token_hash, shingle_windows and shingle_hash, as reference.shingle_set does. Memoized by
    normalize_text's output (tokens depend on nothing else), which makes a million documents cheap."""

    def __init__(self, unit: str = "word") -> None:
        self.unit = unit
        self._by_normalized: dict[str, tuple[int, list[int]]] = {}
        self._token_hashes: dict[str, int] = {}

    def __call__(self, text: str) -> tuple[int, list[int]]:
        normalized = normalize_text(text)
        found = self._by_normalized.get(normalized)
        if found is None:
            # text_tokens(text) is tokenize(normalize_text(text)); char_tokens(text) is list(normalize_text(text))
            tokens = list(normalized) if self.unit == "char" else tokenize(normalized)
            hashes = [self._token_hash(t) for t in tokens]
            found = (len(tokens), sorted({shingle_hash(w) for w in shingle_windows(hashes, SIZE)}))
            self._by_normalized[normalized] = found
        return found

    def _token_hash(self, token: str) -> int:
        value = self._token_hashes.get(token)
        if value is None:
            value = self._token_hashes[token] = token_hash(token)
        return value


def mismatches(
    texts: list[str], reference: Reference | None = None, unit: str = "word"
) -> list[tuple[str, tuple, tuple]]:
    """(text, fused, reference) for every document whose fused token count or shingle set differs."""
    reference = reference or Reference(unit)
    array = pa.array(texts, pa.large_string())
    counts, _, _ = fingerprint_texts(array, SIZE, COEFF_A, COEFF_B, unit)
    flat, offsets = shingle_sets(array, SIZE, unit)
    expected = [reference(t) for t in texts]
    want_counts = np.array([n for n, _ in expected], dtype=np.int64)
    want_sizes = np.array([len(s) for _, s in expected], dtype=np.int64)
    bad = (counts != want_counts) | (np.diff(offsets) != want_sizes)
    # element by element for every document whose set has the expected size
    lengths = np.where(bad, 0, want_sizes)
    doc = np.repeat(np.arange(len(texts)), lengths)
    within = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    want_flat = np.fromiter((h for _, s in expected for h in s), dtype=np.uint64, count=int(want_sizes.sum()))
    want_offsets = np.concatenate([[0], np.cumsum(want_sizes)])
    differ = flat[offsets[doc] + within] != want_flat[want_offsets[doc] + within]
    bad[doc[differ]] = True
    return [
        (texts[i], (int(counts[i]), flat[offsets[i] : offsets[i + 1]].tolist()), expected[i])
        for i in np.flatnonzero(bad)
    ]


TEMPLATES = [
    "{}",  # alone: separator, dropped, word, CJK, mapped, flagged
    "Ab{}Cd",  # inside an ASCII word: appended to it, splitting it, or ending it
    "x {} y",  # between separators
    "A{}Σ",  # before a capital sigma: its casing decides final ς (looking back)
    "AΣ{}",  # after one (looking ahead)
    "{}Σ b",  # the first character of the document, then sigma
]


@pytest.mark.parametrize("template", TEMPLATES)
def test_every_codepoint_in_every_template_matches_reference(template):
    texts = [template.format(c) for c in EVERY_CODEPOINT]
    assert mismatches(texts)[:5] == []


@pytest.mark.parametrize("template", ["{}", "Ab{}Cd", "x {} y", "A{}Σ"])
def test_char_unit_every_codepoint_matches_reference(template):
    # kernel.char_hashes: every character of normalize_text's output (and the spaces) a token
    texts = [template.format(c) for c in EVERY_CODEPOINT]
    assert mismatches(texts, unit="char")[:5] == []


def test_every_character_class_across_the_64_byte_block_boundary():
    # The tokenizer reads 64-byte blocks from each document's start: a character that begins at
    # any of the last bytes of a block, after a pending ASCII word or a separator, for the first
    # and last codepoint of every (token class, UTF-8 width) pair.
    codepoints = np.array([ord(c) for c in EVERY_CODEPOINT])
    classes = unicode_tables.token_tables()[0][codepoints].astype(np.int64)
    width = 1 + (codepoints >= 0x80) + (codepoints >= 0x800) + (codepoints >= 0x10000)
    key = classes * 8 + width
    _, first = np.unique(key, return_index=True)
    _, last = np.unique(key[::-1], return_index=True)
    chosen = sorted(set(codepoints[first].tolist()) | set(codepoints[::-1][last].tolist()))
    assert len(chosen) >= 20
    texts = [
        prefix * (n // len(prefix)) + chr(c) + "Zz é" for c in chosen for prefix in ("w", "w ") for n in range(56, 66)
    ]
    assert mismatches(texts)[:5] == []


def test_mismatches_finds_a_wrong_document():
    # the check above is only as good as its comparison: a document fingerprinted as another must show
    class Misreads(Reference):
        def __call__(self, text):
            return super().__call__(text.replace("x", "y").replace("q", " "))

    texts = ["wax on", "plain words", "way on", "aqb", "a b"]
    assert [t for t, _, _ in mismatches(texts, Misreads())] == ["wax on", "aqb"]  # another hash, another count
    assert mismatches(texts) == []


def test_reference_is_core_reference():
    texts = ["ΣΟΦΙΑ σοφία", "日本語のテキスト", "İstanbul ǅ ﬁ", "a b c d e f g h i j", ""]
    reference = Reference()
    for text in texts:
        assert reference(text) == (len(text_tokens(text)), sorted(shingle_set(text, SIZE)))
    chars = Reference("char")
    for text in texts:
        assert chars(text) == (len(char_tokens(text)), sorted(shingle_set(text, SIZE, "char")))
    assert char_tokens("  Ab,  c. ") == ["a", "b", " ", "c"]


def test_char_mismatches_finds_a_wrong_document():
    class Misreads(Reference):
        def __call__(self, text):
            return super().__call__(text.replace("x", "y"))

    texts = ["wax on", "plain"]
    assert [t for t, _, _ in mismatches(texts, Misreads("char"), unit="char")] == ["wax on"]


def test_kernel_flags_only_context_dependent_documents():
    texts = ["plain ascii", "ÉTÉ Straße", "ΣΟΦΙΑ", "각 한국어", "\u1100\u1161\u11a8 jamo", "தமிழ் ொ"]
    data, offsets = string_buffers(pa.array(texts, pa.large_string()))
    raw = np.zeros(len(texts), dtype=np.bool_)
    flagged = kernel.fingerprint_batch(
        data, offsets, raw, unicode_tables.token_tables(), SIZE, COEFF_A, COEFF_B, False
    )[3]
    assert flagged.tolist() == [False, False, False, False, True, True]
    assert mismatches(texts) == []


def test_table_kinds_cover_every_codepoint():
    kind, offsets, codepoints, separator, growth, casing = unicode_tables.tables()
    assert growth >= 2 and casing.shape == kind.shape
    assert kind.shape == (sys.maxunicode + 1,) and set(np.unique(kind)) <= {0, 1, 2, 3, 4, 5}
    assert kind[ord("a")] == unicode_tables.KIND_IDENTITY and kind[ord("A")] == unicode_tables.KIND_MAP
    assert kind[ord(" ")] == unicode_tables.KIND_SEPARATOR and kind[0x0301] == unicode_tables.KIND_DROP
    assert kind[unicode_tables.SIGMA] == unicode_tables.KIND_SIGMA
    assert kind[0x1161] == unicode_tables.KIND_CONTEXT  # Hangul V jamo composes with its neighbour


TRICKY = list(
    "aZ09 _-.,\t\n\u00a0\u2000\u3000éÉß\u1e9eİıﬁﬃΩΩÅKǅǄ\u0345\u0301\u0308\u0327\u093c\u0bbe\u0bc6\u0bca"
    "ΣσςΑΩά\u1100\u1161\u11a8가각힣ㄱ日本語カｶﾞ한\u0f73\u0f71\u0f72ŉǰ\u1e96😀𠀀\U0001d15e\U0001d165\u00ad\u200b"
    "\u0e01\u0e31\u0e48\u0915\u093f\u0600\u05d0\u05b7Я"
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(alphabet=st.sampled_from(TRICKY), max_size=40), min_size=1, max_size=8))
def test_random_tricky_text_matches_reference(texts):
    assert mismatches(texts) == []
    assert mismatches(texts, unit="char") == []


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(alphabet=st.sampled_from(TRICKY), max_size=40) | st.text(max_size=40), min_size=1, max_size=8))
def test_exact_path_matches_normalize_text(texts):
    texts = ["".join(c for c in t if not 0xD800 <= ord(c) <= 0xDFFF) for t in texts]
    assert normalize_exact(texts).to_pylist() == [normalize_text(t) for t in texts]


def test_mixed_batch_keeps_row_order():
    texts = ["ASCII One", "ΣΟΦΙΑ σοφία", "", "Ünïcödé", "plain", "\u1100\u1161\u11a8", "Zz"] * 3
    assert mismatches(texts) == []
    assert mismatches(texts, unit="char") == []


SIGMA_NEIGHBOURS = list("AaΣσς ΑΩ.'’ʼ·\u00ad\u0301\u0345ǅ1_-日한ᾼ\u200b\u2019:ȺⅠⓐ")


def test_capital_sigma_in_every_two_neighbour_context():
    texts = [
        f"{a}{b}Σ{c}{d}"
        for a in SIGMA_NEIGHBOURS
        for b in SIGMA_NEIGHBOURS
        for c in SIGMA_NEIGHBOURS[:12]
        for d in "A .'"
    ]
    assert mismatches(texts)[:5] == []


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(alphabet=st.sampled_from(SIGMA_NEIGHBOURS + ["Σ"] * 5), max_size=30), min_size=1, max_size=8))
def test_random_sigma_text_matches_reference(texts):
    assert mismatches(texts) == []
    assert mismatches(texts, unit="char") == []
