from hypothesis import given
from hypothesis import strategies as st

from webdedup_assets.core.normalize import normalize_text, text_tokens, tokenize
from webdedup_assets.core.reference import jaccard, shingle_set


def test_normalization_example_from_the_spec():
    assert normalize_text("  Café—RÉSUMÉ_数据  ") == "cafe resume 数据"


def test_punctuation_symbols_and_underscores_become_single_spaces():
    assert normalize_text("Hello,   World!!! foo_bar -- (baz) $5") == "hello world foo bar baz 5"


def test_empty_and_none_normalize_to_empty():
    assert normalize_text(None) == ""
    assert normalize_text("") == ""
    assert normalize_text(" \t\n--- ") == ""
    assert text_tokens("  ...  ") == []


def test_cjk_ideographs_kana_and_hangul_are_tokens_of_their_own():
    assert tokenize(normalize_text("数据库abc")) == ["数", "据", "库", "abc"]
    assert text_tokens("カタカナとひらがな") == list("カタカナとひらがな")
    # NFD splits Hangul syllables into jamo; NFC puts them back so each syllable is one token
    assert text_tokens("한국어 텍스트") == ["한", "국", "어", "텍", "스", "트"]


def test_spacing_marks_stay_inside_words():
    # Devanagari vowel sign AA (U+093E, category Mc) must not split the word
    assert text_tokens("राम") == ["राम"]


def test_token_order_matters_for_shingles():
    assert jaccard(shingle_set("alpha beta gamma delta", 2), shingle_set("delta gamma beta alpha", 2)) == 0.0


def test_short_documents_are_one_whole_text_shingle():
    assert len(shingle_set("two words", 5)) == 1
    assert shingle_set("two words", 5) != shingle_set("two other words", 5)
    assert shingle_set("", 5) == set()


def test_chinese_one_character_edit_is_a_near_duplicate():
    page = (
        "数据保留政策规定客户记录只在有明确业务或法律目的时保存"
        "账户关闭后保留二十四个月以便处理争议和税务审计支持对话在十八个月后删除"
    )
    edited = page.replace("审计", "审查", 1)
    assert page != edited
    assert jaccard(shingle_set(page, 5), shingle_set(edited, 5)) >= 0.8


@given(st.text(max_size=200))
def test_normalization_is_idempotent(text):
    once = normalize_text(text)
    assert normalize_text(once) == once


@given(st.text(max_size=200))
def test_normalized_text_has_no_runs_of_spaces_and_no_edges(text):
    normalized = normalize_text(text)
    assert "  " not in normalized
    assert normalized == normalized.strip()
