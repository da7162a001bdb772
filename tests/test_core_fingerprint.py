"""The compiled kernel must match the plain-Python reference bit for bit."""

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from webdedup_assets.core import reference
from webdedup_assets.core.fingerprint import fingerprint_texts, shingle_sets
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
