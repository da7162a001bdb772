"""Compiled fingerprint kernels (numba) over the UTF-8 bytes of a batch of documents.

Input is an Arrow-style string column: `data` (uint8 bytes) and `offsets` (int64, n+1) of raw
documents. token_hashes normalizes while it tokenizes (core.unicode_tables.token_tables), so
it gives exactly the tokens of core.normalize.text_tokens and the hashes of core.hashing;
documents with characters whose normalization depends on their neighbours are flagged and
fingerprinted again from normalize_text's output (core.fingerprint). tests/test_kernel_reference.py
and tests/test_core_fingerprint.py check this bit for bit against core.reference.

Hot loops are written for AVX2-class x86 without AVX-512: a few llvmlite intrinsics give
unaligned 8-byte loads, 64-byte compare masks and the MinHash vector step. Words are read
little-endian, as core.hashing defines them, so the kernels refuse a big-endian machine.

All kernels release the GIL (nogil) so the engine can run batches on several threads,
and are cached on disk so a CLI run does not pay the JIT compilation every time.
normalize_batch, filter_codepoints and collapse_separators are the table-driven and exact
normalizers (core.fingerprint.prepare_texts, normalize_exact).
"""

from __future__ import annotations

import sys

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.cpython.unsafe.numbers import trailing_zeros
from numba.extending import intrinsic

from .hashing import FMIX_1, FMIX_2, PRIME_1, PRIME_2, SHINGLE_SEED, TOKEN_SEED
from .sets import sort_unique

if sys.byteorder != "little":  # _load_u64 reads token bytes as little-endian words
    raise ImportError("webdedup_assets.core.kernel needs a little-endian machine")

_U64 = np.uint64
_TOKEN_SEED = _U64(TOKEN_SEED)
_SHINGLE_SEED = _U64(SHINGLE_SEED)
_PRIME_1 = _U64(PRIME_1)
_PRIME_2 = _U64(PRIME_2)
_FMIX_1 = _U64(FMIX_1)
_FMIX_2 = _U64(FMIX_2)
_LOW = _U64(0x0101010101010101)
_HIGH = _U64(0x8080808080808080)
_CASE = _U64(0x2020202020202020)  # OR-ed into ASCII letters and digits: lowercase (digits have it)
_ONES = _U64(0xFFFFFFFFFFFFFFFF)


@njit(inline="always")
def _fmix64(value):
    value ^= value >> _U64(33)
    value *= _FMIX_1
    value ^= value >> _U64(33)
    value *= _FMIX_2
    value ^= value >> _U64(33)
    return value


@njit(inline="always")
def _fold(state, word, prime, bits):
    mixed = (state ^ word) * prime
    return (mixed << _U64(bits)) | (mixed >> _U64(64 - bits))


@njit(inline="always")
def _is_cjk(cp):
    return (
        (0x3040 <= cp <= 0x30FF)
        or (0x31F0 <= cp <= 0x31FF)
        or (0x3400 <= cp <= 0x4DBF)
        or (0x4E00 <= cp <= 0x9FFF)
        or (0xAC00 <= cp <= 0xD7AF)
        or (0xF900 <= cp <= 0xFAFF)
        or (0xFF66 <= cp <= 0xFF9F)
        or (0x20000 <= cp <= 0x2FA1F)
        or (0x30000 <= cp <= 0x323AF)
    )


@intrinsic
def _load_u64(typingctx, data, pos):
    """data[pos:pos+8] as one unaligned 64-bit load (the caller keeps pos+8 <= len(data))."""

    def codegen(context, builder, signature, args):
        array = context.make_array(signature.args[0])(context, builder, args[0])
        pointer = builder.bitcast(builder.gep(array.data, [args[1]]), ir.IntType(64).as_pointer())
        return builder.load(pointer, align=1)

    return types.uint64(data, pos), codegen


@njit(inline="always")
def _load8(data, pos, end):
    """The bytes data[pos:pos+8] as a little-endian word; bytes at or past end read as 0 (a separator)."""
    if pos + 8 <= end:
        return _load_u64(data, pos)
    if pos >= end:
        return _U64(0)
    if pos + 8 <= data.shape[0]:
        return _load_u64(data, pos) & ((_U64(1) << _U64(8 * (end - pos))) - _U64(1))
    word = _U64(0)
    for k in range(end - pos):
        word |= _U64(data[pos + k]) << _U64(8 * k)
    return word


@njit(inline="always")
def _alnum_mask(x):
    """Bit 7 of each byte of x set where that byte is an ASCII letter or digit (SWAR: no carry
    crosses a byte because the high bits are cleared first)."""
    x7 = x & ~_HIGH
    low = x7 | (_LOW * _U64(0x20))
    digit = (x7 + _LOW * _U64(0x80 - 0x30)) & ~(x7 + _LOW * _U64(0x7F - 0x39))
    alpha = (low + _LOW * _U64(0x80 - 0x61)) & ~(low + _LOW * _U64(0x7F - 0x7A))
    return (digit | alpha) & ~x & _HIGH


@njit(inline="always")
def _append(state, word, filled, value, size):
    """Add size (0-8) bytes, value's low bytes (the rest zero), to a word being hashed: state
    (its full 8-byte words folded in), word (the partial one, filled bytes)."""
    combined = word | (value << _U64(8 * filled))
    total = filled + size
    if total < 8:
        return state, combined, total
    carry = (value >> _U64(8 * (8 - filled) - 1)) >> _U64(1)  # the bytes that did not fit
    return _fold(state, combined, _PRIME_2, 31), carry, total - 8


@njit(inline="always")
def _finish(state, word, filled, length):
    if filled > 0:
        state = _fold(state, word, _PRIME_2, 31)
    return _fmix64(state ^ _U64(length))


@njit(inline="always")
def _utf8_word(cp):
    """UTF-8 bytes of cp as a little-endian word, and their count."""
    if cp < 0x80:
        return _U64(cp), 1
    if cp < 0x800:
        return _U64((0xC0 | (cp >> 6)) | ((0x80 | (cp & 0x3F)) << 8)), 2
    if cp < 0x10000:
        return _U64((0xE0 | (cp >> 12)) | ((0x80 | ((cp >> 6) & 0x3F)) << 8) | ((0x80 | (cp & 0x3F)) << 16)), 3
    return (
        _U64(
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
    that is not case-ignorable cased? (normalize_batch tracks the same thing going forward.)"""
    while pos > start:
        pos -= 1
        while pos > start and (data[pos] & 0xC0) == 0x80:
            pos -= 1
        cp, _ = _decode(data, pos)
        if not casing[cp] & 1:
            return (casing[cp] & 4) != 0
    return False


@njit(inline="always")
def _movemask(flags):
    """Bit 7 of each byte of flags -> bits 0-7 (byte i -> bit i): one multiply gathers them."""
    return ((flags >> _U64(7)) * _U64(0x0102040810204080)) >> _U64(56)


@njit(inline="always")
def _ascii_word_hash(data, first, n, end):
    """token_hash of the ASCII letters and digits data[first:first+n], lowercased (OR 0x20)."""
    if n < 16:  # one or two words, no branch: both are folded, the length picks the state
        if first + 16 <= data.shape[0]:  # bytes past the word are masked off: read them raw
            head, tail = _load_u64(data, first), _load_u64(data, first + 8)
        else:
            head, tail = _load8(data, first, end), _load8(data, first + 8, end)
        once = _fold(_TOKEN_SEED, (head | _CASE) & (_ONES >> _U64(64 - 8 * min(n, 8))), _PRIME_2, 31)
        tail = (tail | _CASE) & (_ONES >> _U64(64 - 8 * max(n - 8, 1)))
        twice = _fold(once, tail, _PRIME_2, 31)
        select = _U64(0) - _U64(n > 8)
        return _fmix64((once ^ ((once ^ twice) & select)) ^ _U64(n))
    state = _TOKEN_SEED
    for k in range(0, n - 7, 8):
        state = _fold(state, _load8(data, first + k, end) | _CASE, _PRIME_2, 31)
    if n & 7:
        tail = (_load8(data, first + (n & ~7), end) | _CASE) & (_ONES >> _U64(64 - 8 * (n & 7)))
        state = _fold(state, tail, _PRIME_2, 31)
    return _fmix64(state ^ _U64(n))


@intrinsic
def _classify64(typingctx, data, pos):
    """(letters and digits, non-ASCII, UTF-8 lead bytes) as bit masks of the 64 bytes
    data[pos:pos+64], bit i for byte i (the caller keeps pos+64 <= len(data)): vector compares
    and movemasks on two 32-byte loads."""

    def codegen(context, builder, signature, args):
        array = context.make_array(signature.args[0])(context, builder, args[0])
        vector = ir.VectorType(ir.IntType(8), 32)
        i64 = ir.IntType(64)

        def splat(value):
            return ir.Constant(vector, [value] * 32)

        alnum_halves, high_halves, lead_halves = [], [], []
        for half in range(2):
            at = builder.add(args[1], ir.Constant(i64, 32 * half))
            pointer = builder.bitcast(builder.gep(array.data, [at]), vector.as_pointer())
            v = builder.load(pointer, align=1)
            alpha = builder.icmp_unsigned("<=", builder.sub(builder.or_(v, splat(0x20)), splat(0x61)), splat(25))
            digit = builder.icmp_unsigned("<=", builder.sub(v, splat(0x30)), splat(9))
            high = builder.icmp_signed("<", v, splat(0))
            lead = builder.icmp_unsigned(">=", v, splat(0xC0))
            for flags, out in ((builder.or_(alpha, digit), alnum_halves), (high, high_halves), (lead, lead_halves)):
                bits = builder.bitcast(flags, ir.IntType(32))
                out.append(builder.shl(builder.zext(bits, i64), ir.Constant(i64, 32 * half)))
        masks = [builder.or_(*halves) for halves in (alnum_halves, high_halves, lead_halves)]
        return context.make_tuple(builder, signature.return_type, masks)

    return types.UniTuple(types.uint64, 3)(data, pos), codegen


@njit(inline="always")
def _block_masks(data, pos, end):
    """_classify64 of data[pos:pos+64] with the bytes at or past end cleared."""
    if pos + 64 <= data.shape[0]:
        words, other, leads = _classify64(data, pos)
    else:
        words = _U64(0)
        other = _U64(0)
        leads = _U64(0)
        for k in range(8):
            x = _load8(data, pos + 8 * k, end)
            words |= _movemask(_alnum_mask(x)) << _U64(8 * k)
            other |= _movemask(x & _HIGH) << _U64(8 * k)
            leads |= _movemask(x & (x << _U64(1)) & _HIGH) << _U64(8 * k)
    if end - pos < 64:
        valid = (_U64(1) << _U64(end - pos)) - _U64(1)
        words &= valid
        other &= valid
        leads &= valid
    return words, other, leads


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
    (core.unicode_tables.token_tables, the kinds of normalize_batch). No normalized copy of the
    text is written. normalized=True: the text is already normalize_text's output, every
    non-ASCII character is a word character.
    """
    classes, map_offsets, map_codepoints, separator, casing, char_words, char_sizes = tables
    count = 0
    state, word, filled = _TOKEN_SEED, _U64(0), 0  # the pending word: folded words, partial word
    length = 0  # bytes of the pending word
    pos = start
    while pos < end:
        words, other, leads = _block_masks(data, pos, end)
        if other == 0 and length == 0:
            starts = words & ~(words << _U64(1))
            ends = ~words & (words << _U64(1))
            while ends != 0:  # every start before the last end has its end
                first = np.int64(trailing_zeros(starts))
                n = np.int64(trailing_zeros(ends)) - first
                starts &= starts - _U64(1)
                ends &= ends - _U64(1)
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
        valid = _ONES if end - pos >= 64 else (_U64(1) << _U64(end - pos)) - _U64(1)
        separators = ~words & ~other & valid
        items = (words & ~(words << _U64(1))) | leads | (separators & ~(separators << _U64(1)))
        while items != 0:
            i = np.int64(trailing_zeros(items))
            items &= items - _U64(1)
            bit = _U64(1) << _U64(i)
            at = pos + i
            if words & bit:  # ASCII letters and digits, lowercased (digits have 0x20 set)
                n = np.int64(trailing_zeros(~(words >> _U64(i))))
                for k in range(0, n, 8):
                    size = min(8, n - k)
                    value = (_load8(data, at + k, end) | _CASE) & (_ONES >> _U64(64 - 8 * size))
                    state, word, filled = _append(state, word, filled, value, size)
                length += n
                continue
            if not leads & bit:  # ASCII separators: end the word
                if length > 0:
                    out[count] = _finish(state, word, filled, length)
                    count += 1
                    state, word, filled, length = _TOKEN_SEED, _U64(0), 0, 0
                continue
            x = _load8(data, at, end)
            cp, width = _decode_word(x)
            if normalized:
                c = 6 if _is_cjk(cp) else 1
                size = width if c == 1 else 0
                value = x & (_ONES >> _U64(64 - 8 * width)) if c == 1 else _U64(0)
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
                    state, word, filled, length = _TOKEN_SEED, _U64(0), 0, 0
            elif c == 6:  # CJK: a token of its own, closing the word before it
                if length > 0:
                    out[count] = _finish(state, word, filled, length)
                    count += 1
                    state, word, filled, length = _TOKEN_SEED, _U64(0), 0, 0
                value = x & (_ONES >> _U64(64 - 8 * width))
                out[count] = _fmix64(_fold(_TOKEN_SEED, value, _PRIME_2, 31) ^ _U64(width))
                count += 1
            elif c == 2 or c == 5:  # mapped: classify each output character
                first, last = map_offsets[cp], map_offsets[cp + 1]
                final = False
                if c == 5:  # capital sigma: final form by its neighbours (str.lower's rule)
                    final = _cased_before(data, start, at, casing)
                    ahead = at + width
                    while final and ahead < end:
                        cp2, width2 = _decode(data, ahead)
                        if not casing[cp2] & 1:
                            final = not (casing[cp2] & 2)
                            break
                        ahead += width2
                    first, last = 0, 1
                for m in range(first, last):
                    mapped = (0x3C2 if final else 0x3C3) if c == 5 else np.int64(map_codepoints[m])
                    if separator[mapped]:
                        if length > 0:
                            out[count] = _finish(state, word, filled, length)
                            count += 1
                            state, word, filled, length = _TOKEN_SEED, _U64(0), 0, 0
                        continue
                    value, size = _utf8_word(mapped)
                    if _is_cjk(mapped):
                        if length > 0:
                            out[count] = _finish(state, word, filled, length)
                            count += 1
                            state, word, filled, length = _TOKEN_SEED, _U64(0), 0, 0
                        out[count] = _fmix64(_fold(_TOKEN_SEED, value, _PRIME_2, 31) ^ _U64(size))
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
def _shingle(tokens, first, size):
    state = _SHINGLE_SEED
    for k in range(first, first + size):
        state = _fold(state, tokens[k], _PRIME_1, 27)
    return _fmix64(state ^ _U64(size))


@njit(inline="always")
def _window_count(n_tokens, shingle_size):
    if n_tokens == 0:
        return 0
    if n_tokens < shingle_size:
        return 1
    return n_tokens - shingle_size + 1


@njit(nogil=True, cache=True)
def shingle_hashes(tokens, n_tokens, shingle_size, out):
    """Hash every window of tokens[:n_tokens] into out; returns the window count.

    Same values as _shingle per window, computed token position by token position across all
    windows at once: the loop over windows has no carried dependency, so LLVM vectorizes it.
    """
    windows = _window_count(n_tokens, shingle_size)
    if windows == 0:
        return 0
    size = min(shingle_size, n_tokens)
    for w in range(windows):
        out[w] = _SHINGLE_SEED
    for k in range(size):
        for w in range(windows):
            mixed = (out[w] ^ tokens[w + k]) * _PRIME_1
            out[w] = (mixed << _U64(27)) | (mixed >> _U64(37))
    length = _U64(size)
    for w in range(windows):
        out[w] = _fmix64(out[w] ^ length)
    return windows


def _minhash_blocks(blocks):
    """An intrinsic for permutations p0 .. p0 + 8*blocks - 1 in one pass over the shingles.

    hi32((a*h + b) mod 2^64) = hi32(a_lo*h_lo + b) + a_lo*h_hi + a_hi*h_lo (mod 2^32): per 8
    permutations, two 32x32->64 multiplies (vpmuludq, even and odd lanes) plus b, a blend of
    their high halves, two 32-bit multiplies (vpmulld) and a vpminud; LLVM's own vectorization
    of the 64-bit product needs half again as many instructions and a shuffle per 4 values.
    Shingles are read once per 8*blocks permutations (8 bits of state per block, in registers).
    """

    @intrinsic
    def minhash_blocks(typingctx, shingles, windows, a_lo, a_hi, b_even, b_odd, p0, out):
        def codegen(context, builder, signature, args):
            shingles_a, windows, a_lo_a, a_hi_a, b_even_a, b_odd_a, p0, out_a = (
                context.make_array(t)(context, builder, v) if isinstance(t, types.Array) else v
                for t, v in zip(signature.args, args)
            )
            i32, i64 = ir.IntType(32), ir.IntType(64)
            v8, v4 = ir.VectorType(i32, 8), ir.VectorType(i64, 4)
            low32, by32 = ir.Constant(v4, [0xFFFFFFFF] * 4), ir.Constant(v4, [32] * 4)

            def vector_at(array, index, kind):
                return builder.load(builder.bitcast(builder.gep(array.data, [index]), kind.as_pointer()), align=4)

            permutations, bests = [], []
            for block in range(blocks):
                first = builder.add(p0, ir.Constant(i64, 8 * block))
                half = builder.lshr(first, ir.Constant(i64, 1))
                a_low, a_high = vector_at(a_lo_a, first, v8), vector_at(a_hi_a, first, v8)
                a_pairs = builder.bitcast(a_low, v4)
                even, odd = builder.and_(a_pairs, low32), builder.lshr(a_pairs, by32)
                b_e, b_o = vector_at(b_even_a, half, v4), vector_at(b_odd_a, half, v4)
                permutations.append((first, a_low, a_high, even, odd, b_e, b_o))
                bests.append(cgutils.alloca_once_value(builder, ir.Constant(v8, [0xFFFFFFFF] * 8)))
            with cgutils.for_range(builder, windows) as loop:
                h = builder.load(builder.gep(shingles_a.data, [loop.index]))
                h4 = builder.insert_element(ir.Constant(v4, None), h, ir.Constant(i32, 0))
                h4 = builder.shuffle_vector(h4, ir.Constant(v4, None), ir.Constant(ir.VectorType(i32, 4), [0] * 4))
                h_low4 = builder.and_(h4, low32)
                h8 = builder.bitcast(h4, v8)
                h_low8 = builder.shuffle_vector(h8, h8, ir.Constant(v8, [0] * 8))
                h_high8 = builder.shuffle_vector(h8, h8, ir.Constant(v8, [1] * 8))
                for (_, a_low, a_high, even, odd, b_e, b_o), best_at in zip(permutations, bests):
                    t_even = builder.add(builder.mul(even, h_low4), b_e)  # permutations 0, 2, 4, 6
                    t_odd = builder.add(builder.mul(odd, h_low4), b_o)  # 1, 3, 5, 7
                    shifted = builder.bitcast(builder.lshr(t_even, by32), v8)
                    high = builder.shuffle_vector(
                        shifted, builder.bitcast(t_odd, v8), ir.Constant(v8, [0, 9, 2, 11, 4, 13, 6, 15])
                    )
                    cross = builder.add(builder.mul(a_low, h_high8), builder.mul(a_high, h_low8))
                    value = builder.add(high, cross)
                    best = builder.load(best_at)
                    builder.store(builder.select(builder.icmp_unsigned("<", value, best), value, best), best_at)
            for (first, *_), best_at in zip(permutations, bests):
                at = builder.bitcast(builder.gep(out_a.data, [first]), v8.as_pointer())
                builder.store(builder.load(best_at), at, align=4)
            return context.get_dummy_value()

        return types.void(shingles, windows, a_lo, a_hi, b_even, b_odd, p0, out), codegen

    return minhash_blocks


_minhash_32 = _minhash_blocks(4)
_minhash_8 = _minhash_blocks(1)


@njit(nogil=True, cache=True)
def split_coefficients(coeff_a, coeff_b):
    """(a_lo, a_hi uint32; b_even, b_odd uint64) of the first 8*(num_perm // 8) permutations, the
    layout of _minhash_blocks."""
    vector = coeff_a.shape[0] // 8 * 8
    a_lo = np.empty(vector, dtype=np.uint32)
    a_hi = np.empty(vector, dtype=np.uint32)
    for p in range(vector):
        a_lo[p] = np.uint32(coeff_a[p] & _U64(0xFFFFFFFF))
        a_hi[p] = np.uint32(coeff_a[p] >> _U64(32))
    b_even = coeff_b[0:vector:2].copy()
    b_odd = coeff_b[1:vector:2].copy()
    return a_lo, a_hi, b_even, b_odd


@njit(nogil=True, cache=True)
def minhash_row(shingles, windows, split, coeff_a, coeff_b, out):
    """out[p] = min over windows of ((a[p]*h + b[p]) mod 2^64) >> 32 (the reference definition);
    split = split_coefficients(coeff_a, coeff_b). Vector blocks of 32 and 8 permutations, then
    one at a time (min of the high halves equals the high half of the min)."""
    a_lo, a_hi, b_even, b_odd = split
    vector = a_lo.shape[0]
    p0 = 0
    while p0 + 32 <= vector:
        _minhash_32(shingles, windows, a_lo, a_hi, b_even, b_odd, p0, out)
        p0 += 32
    while p0 < vector:
        _minhash_8(shingles, windows, a_lo, a_hi, b_even, b_odd, p0, out)
        p0 += 8
    for p in range(vector, coeff_a.shape[0]):
        a = coeff_a[p]
        b = coeff_b[p]
        best = np.uint32(0xFFFFFFFF)
        for w in range(windows):
            best = min(best, np.uint32((a * shingles[w] + b) >> _U64(32)))
        out[p] = best


@njit(nogil=True, cache=True)
def fingerprint_batch(data, offsets, normalized, tables, shingle_size, coeff_a, coeff_b):
    """Token counts, shingle window counts, (n, num_perm) uint32 MinHash signatures and the
    flagged documents (see token_hashes; their row is left empty for the caller to fill)."""
    n_docs = offsets.shape[0] - 1
    num_perm = coeff_a.shape[0]
    token_counts = np.zeros(n_docs, dtype=np.int64)
    shingle_counts = np.zeros(n_docs, dtype=np.int64)
    signatures = np.full((n_docs, num_perm), 0xFFFFFFFF, dtype=np.uint32)
    flagged = np.zeros(n_docs, dtype=np.bool_)
    longest = 0
    for i in range(n_docs):
        longest = max(longest, offsets[i + 1] - offsets[i])
    # tokens <= bytes: no table entry maps a character to more characters than its UTF-8 bytes
    scratch = np.empty(longest + 1, dtype=np.uint64)
    shingles = np.empty(longest + 1, dtype=np.uint64)
    split = split_coefficients(coeff_a, coeff_b)
    for i in range(n_docs):
        n_tokens = token_hashes(data, offsets[i], offsets[i + 1], normalized[i], tables, scratch)
        if n_tokens < 0:
            flagged[i] = True
            continue
        windows = shingle_hashes(scratch, n_tokens, shingle_size, shingles)
        token_counts[i] = n_tokens
        shingle_counts[i] = windows
        if windows > 0:
            minhash_row(shingles, windows, split, coeff_a, coeff_b, signatures[i])
    return token_counts, shingle_counts, signatures, flagged


@njit(nogil=True, cache=True)
def shingle_sets_batch(data, offsets, normalized, tables, shingle_size):
    """Sorted unique shingle hashes per document, flattened, with int64 offsets, and the flagged
    documents (see token_hashes; their set is left empty for the caller to fill)."""
    n_docs = offsets.shape[0] - 1
    longest = 0
    for i in range(n_docs):
        longest = max(longest, offsets[i + 1] - offsets[i])
    scratch = np.empty(longest + 1, dtype=np.uint64)
    total = 0
    for i in range(n_docs):
        total += offsets[i + 1] - offsets[i]  # windows <= tokens <= bytes: an upper bound
    flat = np.empty(total + 1, dtype=np.uint64)
    set_offsets = np.zeros(n_docs + 1, dtype=np.int64)
    flagged = np.zeros(n_docs, dtype=np.bool_)
    sort_scratch = np.empty(longest + 1, dtype=np.uint64)  # windows <= bytes
    bucket_counts = np.empty(2 * longest + 4, dtype=np.int64)
    cursor = 0
    for i in range(n_docs):
        n_tokens = token_hashes(data, offsets[i], offsets[i + 1], normalized[i], tables, scratch)
        if n_tokens < 0:
            flagged[i] = True
            n_tokens = 0
        windows = shingle_hashes(scratch, n_tokens, shingle_size, flat[cursor:])
        cursor += sort_unique(flat, cursor, cursor + windows, sort_scratch, bucket_counts)
        set_offsets[i + 1] = cursor
    return flat[:cursor].copy(), set_offsets, flagged


@njit(inline="always")
def _put_utf8(out, cursor, cp):
    if cp < 0x80:
        out[cursor] = cp
        return cursor + 1
    if cp < 0x800:
        out[cursor] = 0xC0 | (cp >> 6)
        out[cursor + 1] = 0x80 | (cp & 0x3F)
        return cursor + 2
    if cp < 0x10000:
        out[cursor] = 0xE0 | (cp >> 12)
        out[cursor + 1] = 0x80 | ((cp >> 6) & 0x3F)
        out[cursor + 2] = 0x80 | (cp & 0x3F)
        return cursor + 3
    out[cursor] = 0xF0 | (cp >> 18)
    out[cursor + 1] = 0x80 | ((cp >> 12) & 0x3F)
    out[cursor + 2] = 0x80 | ((cp >> 6) & 0x3F)
    out[cursor + 3] = 0x80 | (cp & 0x3F)
    return cursor + 4


@njit(nogil=True, cache=True)
def normalize_batch(data, offsets, kind, map_offsets, map_codepoints, separator, growth, casing):
    """normalize_text for each UTF-8 document via the core.unicode_tables tables.

    Returns (bytes, int64 offsets, flagged): a flagged document holds a character that is
    not context-free; its output is empty and the caller normalizes it with normalize_text.
    """
    n_docs = offsets.shape[0] - 1
    # growth bounds output bytes per input byte (core.unicode_tables), so out never grows
    out = np.empty(growth * (offsets[n_docs] - offsets[0]) + 16, dtype=np.uint8)
    out_offsets = np.zeros(n_docs + 1, dtype=np.int64)
    flagged = np.zeros(n_docs, dtype=np.bool_)
    cursor = 0
    for i in range(n_docs):
        doc_start = cursor
        pending = False
        prev_cased = False  # is the last character that is not case-ignorable cased?
        pos = offsets[i]
        end = offsets[i + 1]
        while pos < end:
            cp, width = _decode(data, pos)
            k = kind[cp]
            if k == 5:  # capital sigma: final form by its neighbours (str.lower's rule)
                final = prev_cased
                if final:
                    ahead = pos + width
                    while ahead < end:
                        cp2, width2 = _decode(data, ahead)
                        if not casing[cp2] & 1:
                            final = not (casing[cp2] & 2)
                            break
                        ahead += width2
                cursor = _space_if_pending(out, cursor, doc_start, pending)
                pending = False
                cursor = _put_utf8(out, cursor, 0x3C2 if final else 0x3C3)
                prev_cased = True
                pos += width
                continue
            if not casing[cp] & 1:
                prev_cased = (casing[cp] & 4) != 0
            if k == 1:  # identity word character
                cursor = _space_if_pending(out, cursor, doc_start, pending)
                pending = False
                for j in range(width):
                    out[cursor + j] = data[pos + j]
                cursor += width
            elif k == 0:
                pending = True
            elif k == 2:
                for m in range(map_offsets[cp], map_offsets[cp + 1]):
                    mapped = np.int64(map_codepoints[m])
                    if separator[mapped]:
                        pending = True
                        continue
                    cursor = _space_if_pending(out, cursor, doc_start, pending)
                    pending = False
                    cursor = _put_utf8(out, cursor, mapped)
            elif k == 4:
                flagged[i] = True
                cursor = doc_start
                break
            pos += width
        out_offsets[i + 1] = cursor
    return out[:cursor].copy(), out_offsets, flagged


@njit(inline="always")
def _space_if_pending(out, cursor, doc_start, pending):
    """Write the one space a run of separators leaves between words (none at a document's start)."""
    if pending and cursor > doc_start:
        out[cursor] = 32
        return cursor + 1
    return cursor


@njit(inline="always")
def _decode_word(x):
    """(codepoint, byte count) of the UTF-8 character starting x's lowest byte (not ASCII). Two-
    byte characters (Latin, Greek, Cyrillic...) first: a branch that is mostly predicted costs
    less here than decoding every width and selecting (measured: 25 % of the tokenizer on c100k-na)."""
    b0 = np.int64(x & _U64(0xFF))
    b1 = np.int64((x >> _U64(8)) & _U64(0x3F))
    if b0 < 0xE0:
        return ((b0 & 0x1F) << 6) | b1, 2
    b2 = np.int64((x >> _U64(16)) & _U64(0x3F))
    if b0 < 0xF0:
        return ((b0 & 0x0F) << 12) | (b1 << 6) | b2, 3
    b3 = np.int64((x >> _U64(24)) & _U64(0x3F))
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


@njit(nogil=True, cache=True)
def jaccard_blocks(flat_a, starts_a, ends_a, flat_b, starts_b, ends_b, left, right, out):
    """out[i] = exact Jaccard of sorted unique sets flat_a[starts_a[left[i]]:ends_a[left[i]]] and
    flat_b[starts_b[right[i]]:ends_b[right[i]]]; 0.0 when both are empty."""
    for i in range(left.shape[0]):
        a0, a1 = starts_a[left[i]], ends_a[left[i]]
        b0, b1 = starts_b[right[i]], ends_b[right[i]]
        union = (a1 - a0) + (b1 - b0)
        if union == 0:
            out[i] = 0.0
            continue
        common = 0
        while a0 < a1 and b0 < b1:
            x = flat_a[a0]
            y = flat_b[b0]
            if x == y:
                common += 1
                a0 += 1
                b0 += 1
            elif x < y:
                a0 += 1
            else:
                b0 += 1
        out[i] = common / (union - common)
