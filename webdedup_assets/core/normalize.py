"""Text normalization and tokenization: the reference definition.

normalize_text: Unicode NFD, drop nonspacing marks (category Mn, except the kana voicing
marks U+3099/U+309A, which tell different Japanese words apart), NFC again (so Hangul
syllables and voiced kana come back together), lowercase, every run of
characters that are not letters, numbers or spacing marks (punctuation, symbols, `_`,
whitespace, controls) becomes one space, trimmed.

tokenize: split the normalized text on spaces; inside a word every CJK ideograph, kana and
Hangul syllable is a token of its own, so text without spaces still gives useful shingles.

The compiled kernel (core.kernel.tokenize) must reproduce exactly these tokens; it reads the raw
UTF-8 bytes and normalizes as it tokenizes. CJK_RANGES is the one definition both use.
"""

from __future__ import annotations

import sys
import unicodedata
from functools import lru_cache

# Kana voicing marks are Mn but change the word (か/が), so they are kept.
KEPT_MARKS = frozenset({0x3099, 0x309A})

# Inclusive codepoint ranges whose characters are each a token of their own.
CJK_RANGES: tuple[tuple[int, int], ...] = (
    (0x3040, 0x309F),  # Hiragana
    (0x30A0, 0x30FF),  # Katakana
    (0x31F0, 0x31FF),  # Katakana phonetic extensions
    (0x3400, 0x4DBF),  # CJK Unified Ideographs Extension A
    (0x4E00, 0x9FFF),  # CJK Unified Ideographs
    (0xAC00, 0xD7AF),  # Hangul syllables
    (0xF900, 0xFAFF),  # CJK Compatibility Ideographs
    (0xFF66, 0xFF9F),  # Halfwidth katakana
    (0x20000, 0x2FA1F),  # CJK Extensions B-F and compatibility supplement
    (0x30000, 0x323AF),  # CJK Extensions G-H
)


def is_cjk(codepoint: int) -> bool:
    for low, high in CJK_RANGES:
        if low <= codepoint <= high:
            return True
    return False


@lru_cache(maxsize=1)
def _translation_tables() -> tuple[dict[int, None], dict[int, str]]:
    """Built once per process: Mn codepoints -> deleted; separators -> space."""
    drop_marks: dict[int, None] = {}
    separators: dict[int, str] = {}
    for codepoint in range(sys.maxunicode + 1):
        category = unicodedata.category(chr(codepoint))
        if category == "Mn" and codepoint not in KEPT_MARKS:
            drop_marks[codepoint] = None
        elif category[0] not in "LNM" and codepoint not in KEPT_MARKS:
            separators[codepoint] = " "
    return drop_marks, separators


def normalize_text(text: str | None) -> str:
    """Normalize one document; see the module docstring for the exact rules."""
    if not text:
        return ""
    drop_marks, separators = _translation_tables()
    text = unicodedata.normalize("NFD", text).translate(drop_marks)
    text = unicodedata.normalize("NFC", text).lower()
    return " ".join(text.translate(separators).split())


def tokenize(normalized: str) -> list[str]:
    """Tokens of an already normalized text (the output of normalize_text)."""
    tokens: list[str] = []
    for word in normalized.split(" "):
        current: list[str] = []
        for char in word:
            if is_cjk(ord(char)):
                if current:
                    tokens.append("".join(current))
                    current = []
                tokens.append(char)
            else:
                current.append(char)
        if current:
            tokens.append("".join(current))
    return tokens


def text_tokens(text: str | None) -> list[str]:
    """normalize_text followed by tokenize."""
    return tokenize(normalize_text(text))
