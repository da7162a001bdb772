"""The tokenizer kernel: normalize_text and tokenize fused, over the UTF-8 bytes of a document.

token_hashes normalizes while it tokenizes (core.unicode_tables.token_tables), so it gives
exactly the tokens of core.normalize.text_tokens and the hashes of core.hashing; a document
with characters whose normalization depends on their neighbours is flagged, normalized by
core.fingerprint.normalize_exact (which uses filter_codepoints and collapse_separators below)
and tokenized again as normalized text.
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numba.cpython.unsafe.numbers import trailing_zeros

from .. import hashing
from ..normalize import CJK_RANGES
from .mix import ONES, PRIME_2, TOKEN_SEED, U64, fmix64, fold
from .simd import block_masks, load8, load_u64

_CASE = U64(0x2020202020202020)  # OR-ed into ASCII letters and digits: lowercase (digits have it)
_CJK_RANGES = tuple((int(low), int(high)) for low, high in CJK_RANGES)  # compile-time constants


@njit(inline="always")
def _is_cjk(cp):
    """core.normalize.is_cjk: a CJK ideograph, kana or Hangul syllable (a token of its own)."""
    for low, high in _CJK_RANGES:
        if low <= cp <= high:
            return True
    return False


@njit(inline="always")
def _append(state, word, filled, value, size):
    """Add size (0-8) bytes, value's low bytes (the rest zero), to a word being hashed: state
    (its full 8-byte words folded in), word (the partial one, filled bytes)."""
    combined = word | (value << U64(8 * filled))
    total = filled + size
    if total < 8:
        return state, combined, total
    carry = (value >> U64(8 * (8 - filled) - 1)) >> U64(1)  # the bytes that did not fit
    return fold(state, combined, PRIME_2, 31), carry, total - 8


@njit(inline="always")
def _finish(state, word, filled, length):
    if filled > 0:
        state = fold(state, word, PRIME_2, 31)
    return fmix64(state ^ U64(length))


@njit(inline="always")
def _utf8_word(cp):
    """UTF-8 bytes of cp as a little-endian word, and their count."""
    if cp < 0x80:
        return U64(cp), 1
    if cp < 0x800:
        return U64((0xC0 | (cp >> 6)) | ((0x80 | (cp & 0x3F)) << 8)), 2
    if cp < 0x10000:
        return U64((0xE0 | (cp >> 12)) | ((0x80 | ((cp >> 6) & 0x3F)) << 8) | ((0x80 | (cp & 0x3F)) << 16)), 3
    return (
        U64(
            (0xF0 | (cp >> 18))
            | ((0x80 | ((cp >> 12) & 0x3F)) << 8)
            | ((0x80 | ((cp >> 6) & 0x3F)) << 16)
            | ((0x80 | (cp & 0x3F)) << 24)
        ),
        4,
    )


@njit(inline="always")
def _cased_before(data, start, pos, casing):
    """str.lower's final-sigma test, looking back from pos: is the nearest character before it
    that is not case-ignorable cased?"""
    while pos > start:
        pos -= 1
        while pos > start and (data[pos] & 0xC0) == 0x80:
            pos -= 1
        cp, _ = _decode(data, pos)
        if not casing[cp] & 1:
            return (casing[cp] & 4) != 0
    return False


@njit(inline="always")
def _final_sigma(data, start, at, ahead, end, casing):
    """str.lower's final-sigma rule for a capital sigma at `at` whose next character starts at
    `ahead`: a cased character before it and none after it (case-ignorable ones skipped)."""
    final = _cased_before(data, start, at, casing)
    while final and ahead < end:
        cp, width = _decode(data, ahead)
        if not casing[cp] & 1:
            return not (casing[cp] & 2)
        ahead += width
    return final


@njit(inline="always")
def _ascii_word_hash(data, first, n, end):
    """token_hash of the ASCII letters and digits data[first:first+n], lowercased (OR 0x20)."""
    if n < 16:  # one or two words, no branch: both are folded, the length picks the state
        if first + 16 <= data.shape[0]:  # bytes past the word are masked off: read them raw
            head, tail = load_u64(data, first), load_u64(data, first + 8)
        else:
            head, tail = load8(data, first, end), load8(data, first + 8, end)
        once = fold(TOKEN_SEED, (head | _CASE) & (ONES >> U64(64 - 8 * min(n, 8))), PRIME_2, 31)
        tail = (tail | _CASE) & (ONES >> U64(64 - 8 * max(n - 8, 1)))
        twice = fold(once, tail, PRIME_2, 31)
        select = U64(0) - U64(n > 8)
        return fmix64((once ^ ((once ^ twice) & select)) ^ U64(n))
    state = TOKEN_SEED
    for k in range(0, n - 7, 8):
        state = fold(state, load8(data, first + k, end) | _CASE, PRIME_2, 31)
    if n & 7:
        tail = (load8(data, first + (n & ~7), end) | _CASE) & (ONES >> U64(64 - 8 * (n & 7)))
        state = fold(state, tail, PRIME_2, 31)
    return fmix64(state ^ U64(n))


@njit(nogil=True, cache=True)
def token_hashes(data, start, end, normalized, tables, out):
    """Hash every token of the document data[start:end] into out; returns the token count, or -1
    when the document holds a character that is not context-free (kind 4, see
    core.unicode_tables): the caller then normalizes it exactly and passes normalized=True.

    This is normalize_text and tokenize fused, 64 bytes at a time from bit masks (letter or digit,
    non-ASCII, UTF-8 lead byte), so finding the next word or character never waits on the one
    before. A block of ASCII with no word pending: each word that ends in it is hashed straight
    from the input. Otherwise the block is walked item by item (an ASCII run, a non-ASCII
    character, a separator run) and the pending word's normalized bytes are folded into its hash
    as they come (state, word, filled: see _append), each non-ASCII character by its class
    (core.unicode_tables.token_tables, classes refined from its kinds). No normalized copy of the
    text is written. normalized=True: the text is already normalize_text's output, every
    non-ASCII character is a word character.
    """
    classes, map_offsets, map_codepoints, separator, casing, char_words, char_sizes = tables
    count = 0
    state, word, filled = TOKEN_SEED, U64(0), 0  # the pending word: folded words, partial word
    length = 0  # bytes of the pending word
    pos = start
    while pos < end:
        words, other, leads = block_masks(data, pos, end)
        if other == 0 and length == 0:
            starts = words & ~(words << U64(1))
            ends = ~words & (words << U64(1))
            while ends != 0:  # every start before the last end has its end
                first = np.int64(trailing_zeros(starts))
                n = np.int64(trailing_zeros(ends)) - first
                starts &= starts - U64(1)
                ends &= ends - U64(1)
                out[count] = _ascii_word_hash(data, pos + first, n, end)
                count += 1
            if starts == 0:
                pos += 64
                continue
            skip = np.int64(trailing_zeros(starts))
            if skip > 0:  # the last word goes on past these 64 bytes: start the next block at it
                pos += skip
                continue
            # a word of 64 bytes or more: walk the block
        valid = ONES if end - pos >= 64 else (U64(1) << U64(end - pos)) - U64(1)
        separators = ~words & ~other & valid
        items = (words & ~(words << U64(1))) | leads | (separators & ~(separators << U64(1)))
        while items != 0:
            i = np.int64(trailing_zeros(items))
            items &= items - U64(1)
            bit = U64(1) << U64(i)
            at = pos + i
            if words & bit:  # ASCII letters and digits, lowercased (digits have 0x20 set)
                n = np.int64(trailing_zeros(~(words >> U64(i))))
                for k in range(0, n, 8):
                    size = min(8, n - k)
                    value = (load8(data, at + k, end) | _CASE) & (ONES >> U64(64 - 8 * size))
                    state, word, filled = _append(state, word, filled, value, size)
                length += n
                continue
            if not leads & bit:  # ASCII separators: end the word
                if length > 0:
                    out[count] = _finish(state, word, filled, length)
                    count += 1
                    state, word, filled, length = TOKEN_SEED, U64(0), 0, 0
                continue
            x = load8(data, at, end)
            cp, width = _decode_word(x)
            if normalized:
                c = 6 if _is_cjk(cp) else 1
                size = width if c == 1 else 0
                value = x & (ONES >> U64(64 - 8 * width)) if c == 1 else U64(0)
            else:
                c = classes[cp]
                value = char_words[cp]
                size = np.int64(char_sizes[cp])
            # a word character (as it is, or mapped to word characters) adds its bytes from the
            # table without a branch on its class; every other class adds none
            state, word, filled = _append(state, word, filled, value, size)
            length += size
            if (0x8A >> c) & 1:  # classes 1, 3, 7 in one test (not three branches): the word goes on
                continue
            if c == 0:  # separator: ends the word
                if length > 0:
                    out[count] = _finish(state, word, filled, length)
                    count += 1
                    state, word, filled, length = TOKEN_SEED, U64(0), 0, 0
            elif c == 6:  # CJK: a token of its own, closing the word before it
                if length > 0:
                    out[count] = _finish(state, word, filled, length)
                    count += 1
                    state, word, filled, length = TOKEN_SEED, U64(0), 0, 0
                value = x & (ONES >> U64(64 - 8 * width))
                out[count] = fmix64(fold(TOKEN_SEED, value, PRIME_2, 31) ^ U64(width))
                count += 1
            elif c == 2 or c == 5:  # mapped: classify each output character
                first, last = map_offsets[cp], map_offsets[cp + 1]
                final = False
                if c == 5:  # capital sigma: final form by its neighbours (str.lower's rule)
                    final = _final_sigma(data, start, at, at + width, end, casing)
                    first, last = 0, 1
                for m in range(first, last):
                    mapped = (0x3C2 if final else 0x3C3) if c == 5 else np.int64(map_codepoints[m])
                    if separator[mapped]:
                        if length > 0:
                            out[count] = _finish(state, word, filled, length)
                            count += 1
                            state, word, filled, length = TOKEN_SEED, U64(0), 0, 0
                        continue
                    value, size = _utf8_word(mapped)
                    if _is_cjk(mapped):
                        if length > 0:
                            out[count] = _finish(state, word, filled, length)
                            count += 1
                            state, word, filled, length = TOKEN_SEED, U64(0), 0, 0
                        out[count] = fmix64(fold(TOKEN_SEED, value, PRIME_2, 31) ^ U64(size))
                        count += 1
                    else:
                        state, word, filled = _append(state, word, filled, value, size)
                        length += size
            elif c == 4:  # depends on its neighbours: the caller normalizes the document exactly
                return -1
        pos += 64
    if length > 0:
        out[count] = _finish(state, word, filled, length)
        count += 1
    return count


@njit(inline="always")
def _decode_word(x):
    """(codepoint, byte count) of the UTF-8 character starting x's lowest byte (not ASCII). Two-
    byte characters (Latin, Greek, Cyrillic...) first: a branch that is mostly predicted costs
    less here than decoding every width and selecting."""
    b0 = np.int64(x & U64(0xFF))
    b1 = np.int64((x >> U64(8)) & U64(0x3F))
    if b0 < 0xE0:
        return ((b0 & 0x1F) << 6) | b1, 2
    b2 = np.int64((x >> U64(16)) & U64(0x3F))
    if b0 < 0xF0:
        return ((b0 & 0x0F) << 12) | (b1 << 6) | b2, 3
    b3 = np.int64((x >> U64(24)) & U64(0x3F))
    return ((b0 & 0x07) << 18) | (b1 << 12) | (b2 << 6) | b3, 4


@njit(inline="always")
def _decode(data, pos):
    byte = data[pos]
    if byte < 0x80:
        return np.int64(byte), 1
    if byte >= 0xF0:
        width = 4
        cp = np.int64(byte & 0x07)
    elif byte >= 0xE0:
        width = 3
        cp = np.int64(byte & 0x0F)
    else:
        width = 2
        cp = np.int64(byte & 0x1F)
    for k in range(1, width):
        cp = (cp << 6) | (data[pos + k] & 0x3F)
    return cp, width


@njit(inline="always")
def _space_if_pending(out, cursor, doc_start, pending):
    """Write the one space a run of separators leaves between words (none at a document's start)."""
    if pending and cursor > doc_start:
        out[cursor] = 32
        return cursor + 1
    return cursor


@njit(nogil=True, cache=True)
def filter_codepoints(data, offsets, drop):
    """Remove every character c with drop[c] from each UTF-8 document (a translate to None)."""
    n_docs = offsets.shape[0] - 1
    out = np.empty(offsets[n_docs] - offsets[0] + 1, dtype=np.uint8)
    out_offsets = np.zeros(n_docs + 1, dtype=np.int64)
    cursor = 0
    for i in range(n_docs):
        pos = offsets[i]
        while pos < offsets[i + 1]:
            cp, width = _decode(data, pos)
            if not drop[cp]:
                for j in range(width):
                    out[cursor + j] = data[pos + j]
                cursor += width
            pos += width
        out_offsets[i + 1] = cursor
    return out[:cursor].copy(), out_offsets


@njit(nogil=True, cache=True)
def collapse_separators(data, offsets, separator):
    """Every run of characters c with separator[c] -> one space, trimmed (translate + split + join)."""
    n_docs = offsets.shape[0] - 1
    out = np.empty(offsets[n_docs] - offsets[0] + 1, dtype=np.uint8)
    out_offsets = np.zeros(n_docs + 1, dtype=np.int64)
    cursor = 0
    for i in range(n_docs):
        doc_start = cursor
        pending = False
        pos = offsets[i]
        while pos < offsets[i + 1]:
            cp, width = _decode(data, pos)
            if separator[cp]:
                pending = True
            else:
                cursor = _space_if_pending(out, cursor, doc_start, pending)
                pending = False
                for j in range(width):
                    out[cursor + j] = data[pos + j]
                cursor += width
            pos += width
        out_offsets[i + 1] = cursor
    return out[:cursor].copy(), out_offsets


# token_hash(" ") from the plain-Python definition: calling the numba primitives here would
# compile them (uncached) in every process that imports the kernel, a cost paid by every command
_SPACE_HASH = U64(hashing.token_hash(" "))


@njit(inline="always")
def _char_hash(value, width):
    """token_hash of one character: its UTF-8 bytes (value, little-endian) as a one-word token."""
    return fmix64(fold(TOKEN_SEED, value, PRIME_2, 31) ^ U64(width))


@njit(inline="always")
def _emit_char(out, count, space, value, width):
    """Write the space a run of separators left before this character (never at the start), then
    the character; returns the new count."""
    if space and count > 0:
        out[count] = _SPACE_HASH
        count += 1
    out[count] = _char_hash(value, width)
    return count + 1


@njit(nogil=True, cache=True)
def char_hashes(data, start, end, normalized, tables, out):
    """Hash every character of normalize_text(data[start:end]) into out, the one space of each
    separator run included (core.reference.char_tokens: the shingle unit `char`); returns the
    count, or -1 when the document holds a character that is not context-free (see
    token_hashes: the caller normalizes it exactly and passes normalized=True) or would give
    more characters than it has bytes (the same fallback keeps out's size bounded by bytes).

    One table lookup per character (core.unicode_tables.token_tables); no vector fast path: the
    unit is for short texts and scripts without word boundaries."""
    classes, map_offsets, map_codepoints, separator, casing, char_words, char_sizes = tables
    limit = end - start  # out holds at least this many
    count = 0
    space = False  # a separator run is pending: one space before the next character
    pos = start
    while pos < end:
        byte = data[pos]
        if byte < 0x80:
            cp, width = np.int64(byte), 1
        else:
            cp, width = _decode_word(load8(data, pos, end))
        at = pos
        pos += width
        if normalized:  # normalize_text's output: the space is the only separator
            if cp == 32:
                space = True
                continue
            value, _ = _utf8_word(cp)
            count = _emit_char(out, count, space, value, width)
            space = False
            continue
        c = classes[cp]
        if c == 0:
            space = True
        elif c == 1 or c == 6:  # the character itself
            value, _ = _utf8_word(cp)
            count = _emit_char(out, count, space, value, width)
            space = False
        elif c == 2 or c == 5 or c == 7:  # mapped: each output character (a separator adds to the run)
            first, last = map_offsets[cp], map_offsets[cp + 1]
            final = False
            if c == 5:  # capital sigma: final form by its neighbours (str.lower's rule)
                final = _final_sigma(data, start, at, pos, end, casing)
                first, last = 0, 1
            for m in range(first, last):
                mapped = (0x3C2 if final else 0x3C3) if c == 5 else np.int64(map_codepoints[m])
                if separator[mapped]:
                    space = True
                    continue
                if count + (1 if space and count > 0 else 0) + 1 > limit:  # more characters than bytes
                    return -1
                value, size = _utf8_word(mapped)
                count = _emit_char(out, count, space, value, size)
                space = False
        elif c == 4:  # depends on its neighbours: the caller normalizes the document exactly
            return -1
        # c == 3: dropped (a nonspacing mark)
    return count
