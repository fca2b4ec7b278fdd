"""The few PTX instructions the reduce-scatter epilogue needs, as CuTe DSL ops (inline PTX).

Every flag access names its semantics and scope in the instruction itself, so the PTX the tests read
says what the design record (:mod:`kernel.fused.gemm_rs`) claims:

* ``ld.acquire.sys.global.u32``  -- wait on a flag another process (or GPU) raised;
* ``st.release.sys.global.u32``  -- raise a flag for another process (or GPU), after our stores;
* ``atom.acq_rel.gpu.global.add.u32`` -- count this kernel's finished CTAs (local, one GPU);
* ``ld.relaxed.gpu`` / ``st.relaxed.gpu`` -- the epoch word, read at kernel start, written by the last CTA;
* ``ld.global.v4.b32`` -- a 16-byte peer load of 8 bf16 partials (after an acquire + CTA barrier);
* ``st.global.v4.b32`` -- 8 bf16 results into ``out``;
* ``ld.global.cg.b32`` (predicated) -- two bf16 inbox partials (push protocol);
* ``cvt.rn.bf16x2.f32`` -- two accumulators rounded to their bf16 partials (push protocol);
* ``add.rn.f32`` of bf16 widened by ``shl``/``and`` -- the rank-order sum (push protocol);
* ``st.global.v4.f32`` / ``ld.global.cg.v4.f32`` -- a split-K build's fp32 K parts, stored by the unit that
  computed them and read (L2 only) by the CTA that sums them.

No ``multimem`` instruction anywhere. Addresses are ``Int64`` byte addresses (``ptr.toint()`` + offset).
"""

from __future__ import annotations

import cutlass
from cutlass import Float32, Int32, Int64
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import T, dsl_user_op


def _i64(v, loc, ip):
    return Int64(v).ir_value(loc=loc, ip=ip)


def _i32(v, loc, ip):
    return Int32(v).ir_value(loc=loc, ip=ip)


@dsl_user_op
def ld_acquire_sys_u32(addr, *, loc=None, ip=None) -> Int32:
    return Int32(
        llvm.inline_asm(
            T.i32(), [_i64(addr, loc, ip)], "ld.acquire.sys.global.u32 $0, [$1];", "=r,l",
            has_side_effects=True, asm_dialect=0, loc=loc, ip=ip,
        )
    )


@dsl_user_op
def st_release_sys_u32(addr, value, *, loc=None, ip=None) -> None:
    llvm.inline_asm(
        None, [_i64(addr, loc, ip), _i32(value, loc, ip)], "st.release.sys.global.u32 [$0], $1;", "l,r",
        has_side_effects=True, asm_dialect=0, loc=loc, ip=ip,
    )


@dsl_user_op
def st_relaxed_sys_u32(addr, value, *, loc=None, ip=None) -> None:
    """Fault-injected builds only (``relaxed_signal``): a flag raised *without* release semantics."""
    llvm.inline_asm(
        None, [_i64(addr, loc, ip), _i32(value, loc, ip)], "st.relaxed.sys.global.u32 [$0], $1;", "l,r",
        has_side_effects=True, asm_dialect=0, loc=loc, ip=ip,
    )


@dsl_user_op
def ld_relaxed_gpu_u32(addr, *, loc=None, ip=None) -> Int32:
    return Int32(
        llvm.inline_asm(
            T.i32(), [_i64(addr, loc, ip)], "ld.relaxed.gpu.global.u32 $0, [$1];", "=r,l",
            has_side_effects=True, asm_dialect=0, loc=loc, ip=ip,
        )
    )


@dsl_user_op
def st_relaxed_gpu_u32(addr, value, *, loc=None, ip=None) -> None:
    llvm.inline_asm(
        None, [_i64(addr, loc, ip), _i32(value, loc, ip)], "st.relaxed.gpu.global.u32 [$0], $1;", "l,r",
        has_side_effects=True, asm_dialect=0, loc=loc, ip=ip,
    )


@dsl_user_op
def atom_add_acq_rel_gpu_u32(addr, value, *, loc=None, ip=None) -> Int32:
    return Int32(
        llvm.inline_asm(
            T.i32(), [_i64(addr, loc, ip), _i32(value, loc, ip)],
            "atom.acq_rel.gpu.global.add.u32 $0, [$1], $2;", "=r,l,r",
            has_side_effects=True, asm_dialect=0, loc=loc, ip=ip,
        )
    )


@dsl_user_op
def nanosleep(ns: int, *, loc=None, ip=None) -> None:
    llvm.inline_asm(None, [], f"nanosleep.u32 {int(ns)};", "", has_side_effects=True, asm_dialect=0,
                    loc=loc, ip=ip)


@dsl_user_op
def trap(*, loc=None, ip=None) -> None:
    llvm.inline_asm(None, [], "trap;", "", has_side_effects=True, asm_dialect=0, loc=loc, ip=ip)


@dsl_user_op
def globaltimer_ns(*, loc=None, ip=None) -> Int64:
    return Int64(
        llvm.inline_asm(T.i64(), [], "mov.u64 $0, %globaltimer;", "=l", has_side_effects=True,
                        asm_dialect=0, loc=loc, ip=ip)
    )


@dsl_user_op
def ld_bf16x8_as_f32(addr, *, loc=None, ip=None) -> list:
    """16 bytes at ``addr`` (8 bf16) -> 8 Float32, bit-exact widening (NaN payloads kept)."""
    res = llvm.inline_asm(
        llvm.StructType.get_literal([T.f32()] * 8),
        [_i64(addr, loc, ip)],
        "{\n\t.reg .b32 a, b, c, d;\n\t"
        "ld.global.v4.b32 {a, b, c, d}, [$8];\n\t"
        "shl.b32 $0, a, 16;\n\tand.b32 $1, a, 0xffff0000;\n\t"
        "shl.b32 $2, b, 16;\n\tand.b32 $3, b, 0xffff0000;\n\t"
        "shl.b32 $4, c, 16;\n\tand.b32 $5, c, 0xffff0000;\n\t"
        "shl.b32 $6, d, 16;\n\tand.b32 $7, d, 0xffff0000;\n\t}",
        "=f,=f,=f,=f,=f,=f,=f,=f,l",
        has_side_effects=True, asm_dialect=0, loc=loc, ip=ip,
    )
    return [Float32(llvm.extractvalue(T.f32(), res, [i], loc=loc, ip=ip)) for i in range(8)]


@dsl_user_op
def st_f32x8_as_bf16(addr, vals, *, loc=None, ip=None) -> None:
    """8 Float32 -> 8 bf16 (round to nearest even) -> one 16-byte store at ``addr``."""
    operands = [_i64(addr, loc, ip)] + [Float32(v).ir_value(loc=loc, ip=ip) for v in vals]
    llvm.inline_asm(
        None,
        operands,
        "{\n\t.reg .b32 a, b, c, d;\n\t"
        "cvt.rn.bf16x2.f32 a, $2, $1;\n\tcvt.rn.bf16x2.f32 b, $4, $3;\n\t"
        "cvt.rn.bf16x2.f32 c, $6, $5;\n\tcvt.rn.bf16x2.f32 d, $8, $7;\n\t"
        "st.global.v4.b32 [$0], {a, b, c, d};\n\t}",
        "l,f,f,f,f,f,f,f,f",
        has_side_effects=True, asm_dialect=0, loc=loc, ip=ip,
    )


@dsl_user_op
def ld_b32_if(addr, pred, *, loc=None, ip=None) -> Int32:
    """If ``pred`` (i32, nonzero): the 4 bytes at ``addr`` (two bf16, an inbox partial pair); else 0 (no load).
    ``.cg``: cached in L2 only -- a partial is read once, and an L1 line holding columns of another (not yet
    signalled) tile of the same call can never serve it."""
    return Int32(
        llvm.inline_asm(
            T.i32(),
            [_i64(addr, loc, ip), _i32(pred, loc, ip)],
            "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, $2, 0;\n\tmov.b32 $0, 0;\n\t@p ld.global.cg.b32 $0, [$1];\n\t}",
            "=r,l,r",
            has_side_effects=True, asm_dialect=0, loc=loc, ip=ip,
        )
    )


@dsl_user_op
def pack_bf16x2(lo, hi, *, loc=None, ip=None) -> Int32:
    """Two f32 rounded to bf16 (round to nearest even, as the partial a rank sends), ``lo`` in the low half."""
    return Int32(
        llvm.inline_asm(
            T.i32(),
            [Float32(lo).ir_value(loc=loc, ip=ip), Float32(hi).ir_value(loc=loc, ip=ip)],
            "cvt.rn.bf16x2.f32 $0, $2, $1;",
            "=r,f,f",
            has_side_effects=False, asm_dialect=0, loc=loc, ip=ip,
        )
    )


@dsl_user_op
def add_bf16x2(acc_lo, acc_hi, pair, *, loc=None, ip=None) -> tuple:
    """``(acc_lo + lo(pair), acc_hi + hi(pair))`` in f32: the two bf16 of ``pair`` widened bit-exactly."""
    res = llvm.inline_asm(
        llvm.StructType.get_literal([T.f32(), T.f32()]),
        [Float32(acc_lo).ir_value(loc=loc, ip=ip), Float32(acc_hi).ir_value(loc=loc, ip=ip), _i32(pair, loc, ip)],
        "{\n\t.reg .f32 a, b;\n\tshl.b32 a, $4, 16;\n\tand.b32 b, $4, 0xffff0000;\n\t"
        "add.rn.f32 $0, $2, a;\n\tadd.rn.f32 $1, $3, b;\n\t}",
        "=f,=f,f,f,r",
        has_side_effects=False, asm_dialect=0, loc=loc, ip=ip,
    )
    return (Float32(llvm.extractvalue(T.f32(), res, [0], loc=loc, ip=ip)),
            Float32(llvm.extractvalue(T.f32(), res, [1], loc=loc, ip=ip)))


@dsl_user_op
def st_f32x4(addr, vals, *, loc=None, ip=None) -> None:
    """4 Float32 -> one 16-byte store at ``addr`` (a split-K part, bit-exact)."""
    operands = [_i64(addr, loc, ip)] + [Float32(v).ir_value(loc=loc, ip=ip) for v in vals]
    llvm.inline_asm(None, operands, "st.global.v4.f32 [$0], {$1, $2, $3, $4};", "l,f,f,f,f",
                    has_side_effects=True, asm_dialect=0, loc=loc, ip=ip)


@dsl_user_op
def ld_f32x4_cg(addr, *, loc=None, ip=None) -> list:
    """The 4 Float32 at ``addr`` (16 bytes), cached in L2 only: a part another CTA stored in this call, read after
    an acquire of its ready word; an L1 line of an earlier call can never serve it."""
    res = llvm.inline_asm(
        llvm.StructType.get_literal([T.f32()] * 4), [_i64(addr, loc, ip)],
        "ld.global.cg.v4.f32 {$0, $1, $2, $3}, [$4];", "=f,=f,=f,=f,l",
        has_side_effects=True, asm_dialect=0, loc=loc, ip=ip,
    )
    return [Float32(llvm.extractvalue(T.f32(), res, [i], loc=loc, ip=ip)) for i in range(4)]


@dsl_user_op
def round_to_bf16(v, *, loc=None, ip=None) -> Float32:
    """``v`` rounded to bf16 (nearest even) and widened back: the ``bf16_parts`` fault build only."""
    return Float32(
        llvm.inline_asm(
            T.f32(), [Float32(v).ir_value(loc=loc, ip=ip)],
            "{\n\t.reg .b16 h;\n\tcvt.rn.bf16.f32 h, $1;\n\tcvt.f32.bf16 $0, h;\n\t}", "=f,f",
            has_side_effects=False, asm_dialect=0, loc=loc, ip=ip,
        )
    )


__all__ = [
    "atom_add_acq_rel_gpu_u32",
    "globaltimer_ns",
    "ld_acquire_sys_u32",
    "add_bf16x2",
    "ld_b32_if",
    "ld_bf16x8_as_f32",
    "ld_f32x4_cg",
    "ld_relaxed_gpu_u32",
    "nanosleep",
    "pack_bf16x2",
    "round_to_bf16",
    "st_f32x4",
    "st_f32x8_as_bf16",
    "st_relaxed_gpu_u32",
    "st_relaxed_sys_u32",
    "st_release_sys_u32",
    "trap",
]

_ = cutlass  # imported for its side effect of initialising the DSL before the dialect modules
