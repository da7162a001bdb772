"""The compiled table-driven normalizer must give exactly core.normalize.normalize_text."""

from __future__ import annotations

import sys

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from webdedup_assets.core import kernel, unicode_tables
from webdedup_assets.core.fingerprint import normalize_exact, prepare_texts, string_buffers
from webdedup_assets.core.normalize import normalize_text

ALL_CHARS = [chr(c) for c in range(0x80, sys.maxunicode + 1) if not 0xD800 <= c <= 0xDFFF]


def prepared(texts: list[str]) -> list[str]:
    return prepare_texts(pa.array(["é", *texts], pa.string())).to_pylist()[1:]  # é: never all-ASCII


def expected(t: str) -> str:
    """ASCII documents pass through raw (the kernel lowercases and splits them)."""
    return t if t.isascii() else normalize_text(t)


def test_every_codepoint_alone_and_between_letters():
    for template in ("{}", "Ab{}Cd", "x {} y", "A{}Σ", "AΣ{}", "{}Σ b"):
        texts = [template.format(c) for c in ALL_CHARS]
        got = prepared(texts)
        mismatches = [(t, g) for t, g in zip(texts, got) if g != expected(t)]
        assert mismatches[:5] == []


def test_kernel_flags_only_context_dependent_documents():
    texts = ["plain ascii", "ÉTÉ Straße", "ΣΟΦΙΑ", "각 한국어", "\u1100\u1161\u11a8 jamo", "தமிழ் ொ"]
    data, offsets = string_buffers(pa.array(texts, pa.large_string()))
    _, _, flagged = kernel.normalize_batch(data, offsets, *unicode_tables.tables())
    assert flagged.tolist() == [False, False, False, False, True, True]
    assert prepared(texts) == [expected(t) for t in texts]


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
def test_random_tricky_text_matches_normalize_text(texts):
    assert prepared(texts) == [expected(t) for t in texts]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=60), min_size=1, max_size=8))
def test_random_unicode_matches_normalize_text(texts):
    texts = [t.encode("utf-8", "replace").decode("utf-8", "replace") for t in texts]
    texts = ["".join(c for c in t if not 0xD800 <= ord(c) <= 0xDFFF) for t in texts]
    assert prepared(texts) == [expected(t) for t in texts]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(alphabet=st.sampled_from(TRICKY), max_size=40) | st.text(max_size=40), min_size=1, max_size=8))
def test_exact_path_matches_normalize_text(texts):
    texts = ["".join(c for c in t if not 0xD800 <= ord(c) <= 0xDFFF) for t in texts]
    assert normalize_exact(texts).to_pylist() == [normalize_text(t) for t in texts]


def test_mixed_batch_keeps_row_order():
    texts = ["ASCII One", "ΣΟΦΙΑ σοφία", "", "Ünïcödé", "plain", "\u1100\u1161\u11a8", "Zz"] * 3
    assert prepare_texts(pa.array(texts)).to_pylist() == [expected(t) for t in texts]


SIGMA_NEIGHBOURS = list("AaΣσς ΑΩ.'’ʼ·\u00ad\u0301\u0345ǅ1_-日한ᾼ\u200b\u2019:ȺⅠⓐ")


def test_capital_sigma_in_every_two_neighbour_context():
    texts = [
        f"{a}{b}Σ{c}{d}"
        for a in SIGMA_NEIGHBOURS
        for b in SIGMA_NEIGHBOURS
        for c in SIGMA_NEIGHBOURS[:12]
        for d in "A .'"
    ]
    got = prepared(texts)
    assert [(t, g) for t, g in zip(texts, got) if g != expected(t)][:5] == []


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(alphabet=st.sampled_from(SIGMA_NEIGHBOURS + ["Σ"] * 5), max_size=30), min_size=1, max_size=8))
def test_random_sigma_text_matches_normalize_text(texts):
    assert prepared(texts) == [expected(t) for t in texts]
