"""The compiled fingerprint path must match core.reference bit for bit."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from webdedup_assets.core import reference
from webdedup_assets.core.fingerprint import fingerprint_texts, shingle_sets
from webdedup_assets.core.hashing import band_hash, to_int64
from webdedup_assets.core.minhash import MinHashParams, band_keys
from webdedup_assets.core.normalize import text_tokens

NUM_PERM = 16
COEFF_A, COEFF_B = MinHashParams(NUM_PERM, 7).coefficients()

SAMPLES = [
    "",
    None,
    "   \t\n ",
    "!!! ... ???",
    "one",
    "two words",
    "a b c d",  # fewer tokens than the shingle size: one whole-text window
    "a b c d e",
    "The quick brown fox jumps over the lazy dog. The quick brown fox!",
    "UPPER lower MiXeD 123 4five six_seven eight-nine",
    "exactly8 exactly16exactly16 supercalifragilisticexpialidocious antidisestablishmentarianism",
    "x" * 7 + " " + "y" * 8 + " " + "z" * 9 + " " + "w" * 64,
    "Ünïcödé façade naïve café résumé Ærøskøbing straße STRASSE",
    "İstanbul ıi Σίσυφος ΟΔΥΣΣΕΥΣ Москва ПРИВЕТ мир",
    "e\u0301te\u0301 combining marks a\u0308 o\u0302",
    "日本語のテキストは空白なしで書かれる。中文也是如此，한국어 문장도 있습니다",
    "mixed漢字and英語words 123中文456 ｶﾀｶﾅ halfwidth",
    "emoji 😀 stay 🎉 separators ♥ ™ © symbols",
    "tabs\tand\nnewlines\r\nand\u00a0nbsp\u2003emspace\u200bzero-width",
    "Arabic مرحبا بالعالم Hebrew שלום עולם Hindi नमस्ते दुनिया Thai สวัสดีชาวโลก",
    "𠀀𠀁 extension B ideographs 𰀀 extension G",
    "ﬁnance ﬂow ligatures ½ ² numbers Ⅻ roman",
    "a" * 1000,
]


def reference_fingerprint(text, shingle_size):
    shingles = reference.shingle_set(text, shingle_size)
    signature = reference.minhash_signature(shingles, list(map(int, COEFF_A)), list(map(int, COEFF_B)))
    return len(text_tokens(text)), shingles, signature


def check(texts, shingle_size):
    tokens, windows, signatures = fingerprint_texts(pa.array(texts, pa.string()), shingle_size, COEFF_A, COEFF_B)
    flat, offsets = shingle_sets(pa.array(texts, pa.string()), shingle_size)
    assert signatures.dtype == np.uint32 and signatures.shape == (len(texts), NUM_PERM)
    for i, text in enumerate(texts):
        n_tokens, shingles, signature = reference_fingerprint(text, shingle_size)
        assert tokens[i] == n_tokens, text
        assert (windows[i] == 0) == (not shingles), text
        assert signatures[i].tolist() == signature, text
        assert flat[offsets[i] : offsets[i + 1]].tolist() == sorted(shingles), text


@pytest.mark.parametrize("shingle_size", [1, 2, 5])
def test_samples_match_reference(shingle_size):
    check(SAMPLES, shingle_size)


def test_each_sample_alone_matches_reference():
    for text in SAMPLES:
        check([text], 5)


def test_band_keys_match_reference():
    _, _, signatures = fingerprint_texts(pa.array(SAMPLES[4:12]), 5, COEFF_A, COEFF_B)
    keys = band_keys(signatures, 4, 4)
    for i, row in enumerate(signatures.tolist()):
        for band in range(4):
            assert keys[i, band] == to_int64(band_hash(band, row[band * 4 : band * 4 + 4]))


def test_sliced_and_chunked_arrays_match():
    array = pa.array(SAMPLES, pa.string())
    whole = fingerprint_texts(array, 5, COEFF_A, COEFF_B)[2]
    sliced = fingerprint_texts(array.slice(3, 10), 5, COEFF_A, COEFF_B)[2]
    chunked = fingerprint_texts(pa.chunked_array([array[:5], array[5:]]), 5, COEFF_A, COEFF_B)[2]
    assert np.array_equal(sliced, whole[3:13])
    assert np.array_equal(chunked, whole)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.text(max_size=80), min_size=1, max_size=6), st.integers(1, 6))
def test_random_unicode_text_matches_reference(texts, shingle_size):
    check(texts, shingle_size)


ASCII_WORDS = st.text(alphabet="abcXYZ019 _-.,!\t\n", max_size=120)


@settings(max_examples=150, deadline=None)
@given(st.lists(ASCII_WORDS, min_size=1, max_size=6), st.integers(1, 6))
def test_random_ascii_text_matches_reference(texts, shingle_size):
    check(texts, shingle_size)


MIXED = st.text(alphabet=st.sampled_from(list("ab é日本語ｶ ßİ\u0301.😀𠀀Я ")), max_size=60)


@settings(max_examples=150, deadline=None)
@given(st.lists(MIXED, min_size=1, max_size=6), st.integers(1, 5))
def test_random_multilingual_text_matches_reference(texts, shingle_size):
    check(texts, shingle_size)
