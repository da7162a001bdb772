"""The compiled kernel must match the plain-Python reference bit for bit."""

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from webdedup_assets.core import reference
from webdedup_assets.core.fingerprint import fingerprint_texts, shingle_sets, shingle_sets_into
from webdedup_assets.core.hashing import shingle_hash, token_hash
from webdedup_assets.core.minhash import MinHashParams
from webdedup_assets.core.normalize import text_tokens

SAMPLES = [
    "",
    None,
    "x",
    "Hello, World! foo_bar",
    "  Café—RÉSUMÉ_数据  ",
    "数据库系统很好用，性能稳定。",
    "カタカナとひらがなが混ざった文章です",
    "한국어 텍스트입니다 그리고 English words",
    "Ελληνικά ΚΕΊΜΕΝΟ με τόνους",
    "Русский текст, с пунктуацией!",
    "averyveryverylongtokenwithmorethaneightbytes andsixteenbyteword12 x",
    "12345678 abcdefgh ABCDEFGHI",
    "emoji 😀 between words 🎉 end",
    "ﬁnancial ligature and Ⅻ roman numeral",
]


def _reference(texts, shingle_size, params):
    coeff_a, coeff_b = params.coefficients()
    a, b = [int(x) for x in coeff_a], [int(x) for x in coeff_b]
    out = []
    for text in texts:
        shingles = reference.shingle_set(text, shingle_size)
        out.append((len(text_tokens(text)), shingles, reference.minhash_signature(shingles, a, b)))
    return out


@pytest.mark.parametrize("shingle_size", [1, 3, 5])
def test_kernel_matches_reference_on_multilingual_samples(shingle_size):
    params = MinHashParams(num_perm=32, seed=7)
    tokens, _, signatures = fingerprint_texts(pa.array(SAMPLES), shingle_size, *params.coefficients())
    flat, offsets = shingle_sets(pa.array(SAMPLES), shingle_size)
    for i, (n_tokens, shingles, signature) in enumerate(_reference(SAMPLES, shingle_size, params)):
        assert tokens[i] == n_tokens, SAMPLES[i]
        assert signatures[i].tolist() == signature, SAMPLES[i]
        assert set(flat[offsets[i] : offsets[i + 1]].tolist()) == shingles, SAMPLES[i]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(max_size=120), min_size=1, max_size=6), st.integers(1, 6))
def test_kernel_matches_reference_on_random_text(texts, shingle_size):
    params = MinHashParams(num_perm=8, seed=3)
    tokens, _, signatures = fingerprint_texts(pa.array(texts), shingle_size, *params.coefficients())
    for i, (n_tokens, _, signature) in enumerate(_reference(texts, shingle_size, params)):
        assert tokens[i] == n_tokens
        assert signatures[i].tolist() == signature


def test_hashes_are_fixed_values_across_machines_and_processes():
    # Pinned values: a change here changes every stored fingerprint (bump FINGERPRINT_VERSION).
    assert token_hash("hello") == token_hash(b"hello") == 0x7F42DE68BCBB9969
    assert token_hash("数据") == 0x2B19654E8D4751E0
    assert shingle_hash([1, 2, 3]) == 0x8A3F213D5497C305


def test_empty_documents_have_no_shingles_and_a_sentinel_signature():
    params = MinHashParams(num_perm=4, seed=1)
    tokens, shingles, signatures = fingerprint_texts(pa.array(["", None, "..."]), 5, *params.coefficients())
    assert tokens.tolist() == [0, 0, 0]
    assert shingles.tolist() == [0, 0, 0]
    assert (signatures == np.uint32(0xFFFFFFFF)).all()


def test_signatures_are_deterministic_for_a_seed_and_differ_between_seeds():
    texts = pa.array(["the quick brown fox jumps over the lazy dog"] * 2)
    a1 = fingerprint_texts(texts, 3, *MinHashParams(16, 1).coefficients())[2]
    a2 = fingerprint_texts(texts, 3, *MinHashParams(16, 1).coefficients())[2]
    b = fingerprint_texts(texts, 3, *MinHashParams(16, 2).coefficients())[2]
    assert (a1 == a2).all()
    assert not (a1 == b).all()


def test_shingle_hash_depends_on_order():
    assert shingle_hash([1, 2, 3]) != shingle_hash([3, 2, 1])
    assert shingle_hash([1, 2]) != shingle_hash([1, 2, 0])


@pytest.mark.parametrize("unit", ["word", "char"])
def test_shingle_sets_into_writes_the_same_sets_in_the_room_of_their_windows(unit):
    """scoring's variant: the sets written into a given array sized by fingerprinted's shingle
    window counts equal shingle_sets' (a text that needs the exact normalizer included), and a
    too small array is refused instead of written past."""
    texts = pa.array(
        [
            "the cat sat on the mat and the cat sat again",
            "Cafe\u0301 cre\u0300me bru\u0302le\u0301e and more cre\u0300me",  # flagged: exact normalizer
            "",
            "one",
            "a b c d e f g h a b c d",
        ],
        pa.large_string(),
    )
    size = 3 if unit == "word" else 5
    coeff_a, coeff_b = MinHashParams(16, 1).coefficients()
    _, windows, _ = fingerprint_texts(texts, size, coeff_a, coeff_b, unit=unit)
    flat, offsets = shingle_sets(texts, size, unit)
    out = np.full(int(windows.sum()) + 3, 7, np.uint64)
    placed = shingle_sets_into(texts, size, unit, out[3:])
    assert placed is not None and len(placed) == len(texts) + 1
    for i in range(len(texts)):
        expected = flat[offsets[i] : offsets[i + 1]]
        assert np.array_equal(out[3:][placed[i] : placed[i + 1]], expected), i
    assert (out[:3] == 7).all()  # nothing written before the room given
    small = np.zeros(int(windows[0]) - 1, np.uint64)  # not even the first text's windows
    assert shingle_sets_into(texts, size, unit, small) is None
