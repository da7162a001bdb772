"""The compiled fingerprint path must match core.reference bit for bit."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from webdedup_assets.core import reference, unicode_tables
from webdedup_assets.core.fingerprint import fingerprint_texts, shingle_sets
from webdedup_assets.core.hashing import band_hash, to_int64
from webdedup_assets.core.kernel import minhash_sets
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


# The kernel normalizes while it tokenizes (kernel.token_hashes): ASCII words 64 bytes at a time,
# other characters by their core.unicode_tables kind; documents it flags go the exact way.
FUSED = [
    "ΣΟΦΙΑ ΟΔΥΣΣΕΥΣ Σ σ.Σ ΑΣ. ΑΣ' ΑΣ\u0301 Α\u00adΣ ΑΣΑ 1Σ Σ1 ΑΣ日",  # final sigma by neighbours
    "がぎぐ ぱぴ カ\u3099 ハ\u309a ｶﾞ ﾊﾟ",  # kana voicing marks: precomposed and combining
    "caféteria naïve e\u0301te\u0301 ÆØÅ Straße ΐ ǅungla",  # maps and drops inside ASCII words
    "abcdefg\u00e9hijklmnop\u00e9qrstuvwxyz0123456789\u00e9",  # non-ASCII across 8-byte words
    "İstanbul \u1100\u1161\u11a8 தமிழ் ொ",  # context characters: the document is flagged
    "豈更車 \uf900\ufa0a mixed漢字and英語 한국어문장",  # compatibility ideographs map to CJK
    "x" * 7 + "é" + "y" * 9 + "\u00a0" + "z" * 16 + "©",
    "END\u00e9",
    "\u0301\u0301 leading marks \u0301",
]


@pytest.mark.parametrize("shingle_size", [1, 5])
def test_fused_normalization_matches_reference(shingle_size):
    check(FUSED, shingle_size)
    for text in FUSED:
        check([text, "plain ascii words here"], shingle_size)


def test_ascii_table_entries_are_what_the_swar_path_assumes():
    # The 8-byte ASCII path lowercases letters and splits on every other ASCII byte without
    # looking at the tables; the tables must say the same. And no character maps to more
    # characters than its UTF-8 bytes, so tokens <= bytes bounds the kernels' scratch arrays.
    kind, map_offsets, map_codepoints, separator, _, _ = unicode_tables.tables()
    for c in range(128):
        if chr(c).isalnum():
            mapped = map_codepoints[map_offsets[c] : map_offsets[c + 1]].tolist()
            assert (kind[c], mapped) in ((unicode_tables.KIND_IDENTITY, []), (unicode_tables.KIND_MAP, [c | 0x20]))
        else:
            assert kind[c] == unicode_tables.KIND_SEPARATOR and separator[c]
    codepoints = np.arange(kind.shape[0])
    utf8_bytes = 1 + (codepoints >= 0x80) + (codepoints >= 0x800) + (codepoints >= 0x10000)
    assert (np.diff(map_offsets) <= utf8_bytes).all()


def test_documents_at_the_end_of_the_data_buffer():
    # The last document's tail is read past its end only within the buffer; every length 0..20.
    for n in range(21):
        text = ("Ab1 " * 6)[:n]
        check([text], 2)
        check(["é", text], 2)


@pytest.mark.parametrize("num_perm", [1, 7, 8, 32, 37, 64, 72, 128])
def test_every_permutation_block_size_matches_reference(num_perm):
    # minhash_row runs blocks of 32 and 8 permutations as vectors, the rest one at a time.
    coeff_a, coeff_b = MinHashParams(num_perm, 5).coefficients()
    texts = [SAMPLES[8], SAMPLES[13], SAMPLES[22], " ".join(f"w{i}" for i in range(300))]
    signatures = fingerprint_texts(pa.array(texts), 3, coeff_a, coeff_b)[2]
    for text, row in zip(texts, signatures.tolist()):
        shingles = reference.shingle_set(text, 3)
        assert row == reference.minhash_signature(shingles, list(map(int, coeff_a)), list(map(int, coeff_b)))


@pytest.mark.parametrize("num_perm", [7, 64, 72])
def test_minhash_of_shingle_sets_equals_the_fingerprint_signature(num_perm):
    # An add's verification takes its pairs' signatures from their shingle sets (minhash_sets):
    # they must be the fingerprinted values, for empty and flagged documents and in any row order.
    coeff_a, coeff_b = MinHashParams(num_perm, 5).coefficients()
    texts = [t for t in SAMPLES if t is not None] + [" ".join(f"w{i % 40}" for i in range(300))]
    signatures = fingerprint_texts(pa.array(texts), 3, coeff_a, coeff_b)[2]
    flat, offsets = shingle_sets(pa.array(texts), 3)
    offsets = np.asarray(offsets, np.int64)
    rows = np.arange(len(texts), dtype=np.int64)[::-1].copy()
    from_sets = minhash_sets(flat, offsets[:-1].copy(), offsets[1:].copy(), rows, coeff_a, coeff_b)
    assert from_sets.tolist() == signatures[rows].tolist()
    assert (from_sets[rows == 0] == 0xFFFFFFFF).all()  # the empty text: no shingle, no minimum


# Documents longer than the kernel's 64-byte blocks: words that straddle blocks, ASCII words of
# 15/16/64+ bytes (the two-load path and its fallbacks), non-ASCII characters at every offset.
LONG_PIECES = st.sampled_from(
    ["a", "Bc", "x" * 15, "Y" * 16, "z" * 17, "q" * 70, "é", "Straße", "ΣΟΦΙΑ", "日本", "한", "ｶﾞ", "ǅ"]
    + [" ", "  ", ".", "\u0301", "😀"]
)
LONG_DOCUMENTS = st.lists(LONG_PIECES, min_size=20, max_size=120).map("".join)


@settings(max_examples=150, deadline=None)
@given(st.lists(LONG_DOCUMENTS, min_size=1, max_size=4), st.integers(1, 5))
def test_random_long_documents_match_reference(texts, shingle_size):
    check(texts, shingle_size)
