"""Vector intrinsics for the kernels: the only module that writes LLVM IR (llvmlite).

The hot loops are written for AVX2-class x86 without AVX-512: unaligned 8-byte loads, 64-byte
compare masks (the tokenizer's block classification) and the MinHash vector step. The block
classification falls back to plain numba (SWAR on 8-byte words) where a load would run past the
data buffer. Words are read little-endian, as core.hashing defines them, so the kernels refuse a
big-endian machine.
"""

from __future__ import annotations

import sys

from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from .mix import U64

if sys.byteorder != "little":  # load_u64 reads token bytes as little-endian words
    raise ImportError("webdedup_assets.core.kernel needs a little-endian machine")

_LOW = U64(0x0101010101010101)
_HIGH = U64(0x8080808080808080)


@intrinsic
def load_u64(typingctx, data, pos):
    """data[pos:pos+8] as one unaligned 64-bit load (the caller keeps pos+8 <= len(data))."""

    def codegen(context, builder, signature, args):
        array = context.make_array(signature.args[0])(context, builder, args[0])
        pointer = builder.bitcast(builder.gep(array.data, [args[1]]), ir.IntType(64).as_pointer())
        return builder.load(pointer, align=1)

    return types.uint64(data, pos), codegen


@njit(inline="always")
def load8(data, pos, end):
    """The bytes data[pos:pos+8] as a little-endian word; bytes at or past end read as 0 (a separator)."""
    if pos + 8 <= end:
        return load_u64(data, pos)
    if pos >= end:
        return U64(0)
    if pos + 8 <= data.shape[0]:
        return load_u64(data, pos) & ((U64(1) << U64(8 * (end - pos))) - U64(1))
    word = U64(0)
    for k in range(end - pos):
        word |= U64(data[pos + k]) << U64(8 * k)
    return word


@njit(inline="always")
def _alnum_mask(x):
    """Bit 7 of each byte of x set where that byte is an ASCII letter or digit (SWAR: no carry
    crosses a byte because the high bits are cleared first)."""
    x7 = x & ~_HIGH
    low = x7 | (_LOW * U64(0x20))
    digit = (x7 + _LOW * U64(0x80 - 0x30)) & ~(x7 + _LOW * U64(0x7F - 0x39))
    alpha = (low + _LOW * U64(0x80 - 0x61)) & ~(low + _LOW * U64(0x7F - 0x7A))
    return (digit | alpha) & ~x & _HIGH


@njit(inline="always")
def _movemask(flags):
    """Bit 7 of each byte of flags -> bits 0-7 (byte i -> bit i): one multiply gathers them."""
    return ((flags >> U64(7)) * U64(0x0102040810204080)) >> U64(56)


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
def block_masks(data, pos, end):
    """_classify64 of data[pos:pos+64] with the bytes at or past end cleared."""
    if pos + 64 <= data.shape[0]:
        words, other, leads = _classify64(data, pos)
    else:
        words = U64(0)
        other = U64(0)
        leads = U64(0)
        for k in range(8):
            x = load8(data, pos + 8 * k, end)
            words |= _movemask(_alnum_mask(x)) << U64(8 * k)
            other |= _movemask(x & _HIGH) << U64(8 * k)
            leads |= _movemask(x & (x << U64(1)) & _HIGH) << U64(8 * k)
    if end - pos < 64:
        valid = (U64(1) << U64(end - pos)) - U64(1)
        words &= valid
        other &= valid
        leads &= valid
    return words, other, leads


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


minhash_32 = _minhash_blocks(4)  # 32 permutations per pass over the shingles (minhash.minhash_row)
minhash_8 = _minhash_blocks(1)
