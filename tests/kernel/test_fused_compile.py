"""The fused kernels compile for sm_90a without a GPU, once per key, and their PTX uses the Hopper paths
(wgmma, TMA) and the memory-ordering instructions the design records state, never ``multimem``.

What is pinned, per representative build (a module-scoped set; every config the wrapper compiles is in
it: both protocols, W = 2, 4, 8, 16, tile shapes 128x256, 128x224, 64x128; 128x128 as a plain GEMM):
  1. ``.target sm_90a``, wgmma of the config's tile width, TMA loads and stores, no local memory;
  2. no ``multimem`` anywhere;
  3. W > 1: flags waited with ``ld.acquire.sys``, raised with ``st.release.sys``, the CTA count with
     ``atom.acq_rel.gpu``, a pushed/stored partial complete (``cp.async.bulk.wait_group 0``) and fenced
     (``fence.proxy.async.global``) before the signal that follows it;
  4. one compile per key, for every M and every rank; the host-wide cache (export + load) gives another
     process the same kernel without compiling.
"""

import os
import re
import subprocess
import sys

import pytest

from kernel.fused import cutlass_available

# one xdist worker compiles what this module and test_fault_builds.py share: tests/scheduling.py
pytestmark = [
    pytest.mark.kernel,
    pytest.mark.skipif(not cutlass_available(), reason="nvidia-cutlass-dsl is not installed"),
]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MAIN = (7168, 2048)  # (N, K): the anchor shape of the benchmark
RAGGED_N = (1000, 64)  # N not a multiple of the N tile, a single k-tile
SMALL = (512, 256)


def _cfg(**kw):
    from kernel.fused.config import GemmConfig

    return GemmConfig(**kw)


WIDE = {"tile_n": 224}
NARROW = {"tile_n": 128}
SHORT = {"tile_m": 64, "consumer_warpgroups": 1, "tile_n": 128}

#: (protocol, W, config kwargs): W > 1 builds the tests read (besides test_fused_rs / test_fault_builds's).
RS_BUILDS = [("pull", 16, {}), ("pull", 4, WIDE), ("push", 2, WIDE), ("push", 2, SHORT), ("push", 4, NARROW),
             ("push", 8, SHORT), ("push", 16, {})]


@pytest.fixture(scope="module")
def compile_mod():
    from kernel.fused import compile as compile_mod

    return compile_mod


@pytest.fixture(scope="module")
def main_kernel(compile_mod):
    return compile_mod.get_compiled(*MAIN)


@pytest.fixture(scope="module")
def ragged_kernel(compile_mod):
    return compile_mod.get_compiled(*RAGGED_N)


@pytest.fixture(scope="module")
def rs_builds(compile_mod):
    from kernel.fused.config import PUSH_EPI_STAGES

    def cfg(protocol, kw):  # the push protocol's configs have its deep epilogue ring (kernel/fused/tiles.py)
        return _cfg(**kw, **({"epi_stages": PUSH_EPI_STAGES} if protocol == "push" else {}))

    return {(p, W, tuple(sorted(kw.items()))): compile_mod.get_compiled_rs(*SMALL, cfg(p, kw), W, protocol=p)
            for p, W, kw in RS_BUILDS}


def test_ptx_uses_wgmma_and_tma_and_no_multimem(main_kernel):
    ptx = main_kernel.ptx
    assert ".target sm_90a" in ptx
    assert "wgmma.mma_async" in ptx
    assert "cp.async.bulk.tensor" in ptx  # TMA loads and stores
    assert "cp.async.bulk.tensor.2d.global.shared::cta" in ptx  # the TMA store epilogue
    assert "mbarrier" in ptx
    assert "setmaxnreg" in ptx
    assert "multimem" not in ptx


def test_ptx_has_no_local_memory(main_kernel):
    assert ".local" not in main_kernel.ptx


def test_ragged_n_compiles(ragged_kernel):
    assert "wgmma.mma_async" in ragged_kernel.ptx
    assert "multimem" not in ragged_kernel.ptx


def test_compile_once_reuse_for_every_m(compile_mod, main_kernel):
    before = compile_mod.compile_stats()
    again = [compile_mod.get_compiled(*MAIN) for _M in (1, 7, 129, 8192)]
    after = compile_mod.compile_stats()
    assert all(k is main_kernel for k in again)
    assert after["misses"] == before["misses"]
    assert after["hits"] == before["hits"] + 4


def test_one_compile_serves_every_shape(compile_mod):
    """N and K are run-time arguments: another shape of the same tile config and W is served by the compile
    already made (no new miss), bound to its own (N, K); unsupported shapes are refused before any compile."""
    first = compile_mod.get_compiled_rs(*SMALL, _cfg(), 2)
    misses = compile_mod.compile_stats()["misses"]
    other = compile_mod.get_compiled_rs(7168, 2048, _cfg(), 2)
    assert other.fn is first.fn and (other.N, other.K) == (7168, 2048) and (first.N, first.K) == SMALL
    assert compile_mod.get_compiled_rs(7168, 2048, _cfg(), 2) is other
    assert compile_mod.compile_stats()["misses"] == misses
    assert not any(f.name in ("N", "K") for f in compile_mod.RsCompileKey.__dataclass_fields__.values())
    with pytest.raises(ValueError, match="multiple of 64"):
        compile_mod.get_compiled_rs(512, 100, _cfg(), 2)
    with pytest.raises(ValueError, match="multiple of 8"):
        compile_mod.get_compiled(1001, 256, _cfg())


def test_one_compile_serves_every_rank(compile_mod):
    first = compile_mod.get_compiled_rs(*SMALL, _cfg(), 4, 0)
    assert all(compile_mod.get_compiled_rs(*SMALL, _cfg(), 4, r) is first for r in (1, 2, 3))
    assert not any("rank" in f.name for f in compile_mod.RsCompileKey.__dataclass_fields__.values())


def test_compile_stats_record_seconds(compile_mod, main_kernel):
    stats = compile_mod.compile_stats()["configs"]
    key = (main_kernel.key.config, main_kernel.key.arch)
    assert stats[key]["seconds"] > 0
    assert stats[key]["ab_stage"] >= 3


def test_unsupported_shapes_are_rejected_before_compiling():
    from kernel.fused.gemm import HopperGemmBF16

    with pytest.raises(ValueError, match="multiple of 64"):
        HopperGemmBF16(1024, 100)
    with pytest.raises(ValueError, match="multiple of 8"):
        HopperGemmBF16(1001, 128)
    with pytest.raises(ValueError):
        HopperGemmBF16(1024, 128, _cfg(ab_stages=9))
    with pytest.raises(ValueError, match="tile_n must be one of"):
        HopperGemmBF16(1024, 128, _cfg(tile_n=96))
    with pytest.raises(ValueError, match="consumer_warpgroups"):
        HopperGemmBF16(1024, 128, _cfg(tile_m=64))


def test_rs_kernels_reject_bad_world_sizes():
    from kernel.fused.gemm_rs import HopperGemmRsBF16
    from kernel.fused.gemm_rs_push import HopperGemmRsPushBF16

    for cls in (HopperGemmRsBF16, HopperGemmRsPushBF16):
        with pytest.raises(ValueError, match="world_size"):
            cls(*SMALL, _cfg(), 1)
        with pytest.raises(ValueError, match="world_size"):
            cls(*SMALL, _cfg(), 17)
        with pytest.raises(ValueError, match="rank 4 outside"):
            cls(*SMALL, _cfg(), 4, 4)


def test_compiles_in_a_fresh_process_with_arch_env():
    code = (
        "import os; os.environ['CUTE_DSL_ARCH'] = 'sm_90a'\n"
        "import cutlass\n"
        "from kernel.fused.compile import get_compiled\n"
        "k = get_compiled(256, 128)\n"
        "print('wgmma' in k.ptx, 'multimem' in k.ptx)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "GEMM_RS_KERNEL_CACHE_DIR"}  # a real compile
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.split() == ["True", "False"]


def test_small_m_config_compiles(compile_mod):
    k = compile_mod.get_compiled(*MAIN, _cfg(**SHORT))
    assert "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16" in k.ptx
    assert "multimem" not in k.ptx
    assert ".local" not in k.ptx
    assert k.ab_stage >= 5


@pytest.mark.parametrize("kw,wgmma_n", [(WIDE, 224), (SHORT, 128)])
def test_push_tile_configs_compile_as_plain_gemm(compile_mod, kw, wgmma_n):
    k = compile_mod.get_compiled(*SMALL, _cfg(**kw))
    assert f"wgmma.mma_async.sync.aligned.m64n{wgmma_n}k16.f32.bf16.bf16" in k.ptx
    assert "multimem" not in k.ptx and ".local" not in k.ptx


def _after(ptx: str, first: str, then: str) -> bool:
    """``then`` occurs after some occurrence of ``first`` (regexes)."""
    m = re.search(first, ptx)
    return bool(m) and re.search(then, ptx[m.end():]) is not None


def test_every_rs_build_has_the_memory_ordering_of_its_design_record(rs_builds):
    for key, build in rs_builds.items():
        protocol, W, kw = key
        ptx = build.ptx
        assert ".target sm_90a" in ptx and "multimem" not in ptx and ".local" not in ptx, key
        n = dict(kw).get("tile_n", 256)
        assert f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.bf16.bf16" in ptx, key
        for instr in ("ld.acquire.sys.global.u32", "st.release.sys.global.u32", "atom.acq_rel.gpu.global.add.u32",
                      "ld.relaxed.gpu.global.u32", "st.relaxed.gpu.global.u32", "nanosleep.u32", "trap;",
                      "fence.proxy.async.global", "fence.proxy.async.shared::cta"):
            assert instr in ptx, (key, instr)
        # a partial is complete in memory and fenced before the flag that announces it
        assert _after(ptx, r"cp\.async\.bulk\.wait_group\s+0;",
                      r"fence\.proxy\.async\.global[\s\S]*?st\.release\.sys\.global\.u32"), key
        if protocol == "push":
            assert "ld.global.cg.b32" in ptx and "cvt.rn.bf16x2.f32" in ptx, key  # inbox loads, own partials
            assert "ld.global.v4.b32" not in ptx, key  # no pull-style peer loads
        else:
            assert ptx.count("ld.global.v4.b32") == W, key


def test_push_stores_go_through_one_descriptor_per_owner_plus_out(rs_builds):
    """Per epilogue sub-tile, W push stores (one per owner's descriptor, a run-time select) and the store
    into ``out``: (W + 1) TMA store sites per sub-tile."""
    build = rs_builds[("push", 4, tuple(sorted(NARROW.items())))]
    sub_tiles = 128 // 32
    assert build.ptx.count("cp.async.bulk.tensor.2d.global.shared::cta") == (4 + 1) * sub_tiles


def test_host_wide_cache_serves_another_process(tmp_path, monkeypatch, compile_mod):
    """A kernel compiled here and exported is loaded by a fresh process (origin "disk", same PTX)."""
    monkeypatch.setenv(compile_mod.KERNEL_CACHE_ENV, str(tmp_path))
    key = compile_mod.CompileKey(_cfg(tile_n=64))
    compiled = compile_mod._from_disk_or_compile(key, compile_mod._compile_gemm)
    assert compiled.origin == "compiled"
    entry = tmp_path / compile_mod.key_digest(key)
    assert (entry / "kernel.o").is_file() and (entry / "kernel.ptx").read_text() == compiled.ptx
    code = (
        "import hashlib, os\n"
        "os.environ.setdefault('CUTE_DSL_ARCH', 'sm_90a')\n"
        "from kernel.fused.compile import get_compiled\n"
        "from kernel.fused.config import GemmConfig\n"
        "k = get_compiled(512, 256, GemmConfig(tile_n=64))\n"
        "print(k.origin, hashlib.sha256(k.ptx.encode()).hexdigest(), callable(k.fn))\n"
    )
    env = dict(os.environ, **{compile_mod.KERNEL_CACHE_ENV: str(tmp_path)})
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    import hashlib

    assert res.stdout.split() == ["disk", hashlib.sha256(compiled.ptx.encode()).hexdigest(), "True"]


def test_cache_digest_covers_key_and_source(compile_mod):
    a = compile_mod.key_digest(compile_mod.CompileKey(_cfg()))
    assert a == compile_mod.key_digest(compile_mod.CompileKey(_cfg()))
    assert a != compile_mod.key_digest(compile_mod.CompileKey(_cfg(tile_n=128)))
    rs = compile_mod.RsCompileKey(_cfg(), 2)
    assert compile_mod.key_digest(rs) != compile_mod.key_digest(compile_mod.RsCompileKey(_cfg(), 2, protocol="push"))
    assert compile_mod.key_digest(rs) != compile_mod.key_digest(
        compile_mod.RsCompileKey(_cfg(), 2, faults=frozenset({"dropped_peer"})))
    assert set(compile_mod._KERNEL_SOURCES) >= {"gemm.py", "gemm_rs.py", "gemm_rs_push.py", "rs_protocol.py",
                                                 "ptx.py", "config.py"}


def test_cache_digest_tells_every_set_of_faults_apart(compile_mod):
    """A fault-injected build's disk entry is valid for its whole set of faults: keys of one fault, of another and
    of both have three digests (a digest of part of the set would load one build's kernel for another's key: a
    mutant run with a bug it was not built with, or without the one it was), and the set's order does not matter."""
    from kernel.fused.config import FAULT_PROTOCOL

    pull = [f for f, (protocol, _) in sorted(FAULT_PROTOCOL.items()) if protocol == "pull"][:3]
    sets = [frozenset(pull[:1]), frozenset(pull[1:2]), frozenset(pull[:2]), frozenset(pull)]
    digests = [compile_mod.key_digest(compile_mod.RsCompileKey(_cfg(), 2, faults=fs)) for fs in sets]
    assert len(set(digests)) == len(sets), [(sorted(fs), d) for fs, d in zip(sets, digests)]
    assert digests[3] == compile_mod.key_digest(compile_mod.RsCompileKey(_cfg(), 2, faults=frozenset(reversed(pull))))


def _barrier_counts(ptx: str) -> set:
    """The arrival counts the kernel's ``mbarrier.init`` instructions give (each register traced to its ``mov``)."""
    movs = dict(re.findall(r"mov\.b32\s+(%r\d+), (\d+);", ptx))
    return {int(movs.get(reg, -1)) for reg in re.findall(r"mbarrier\.init\.shared\.b64\s+\[[^\]]+\], (%r\d+);", ptx)}


TMA_LOAD = r"cp\.async\.bulk\.tensor\.2d\.shared::cta\.global\.tile\.mbarrier"
TMA_MULTICAST = (r"cp\.async\.bulk\.tensor\.2d\.shared::cluster\.global\.tile\.mbarrier::complete_tx::bytes"
                 r"\.multicast::cluster")


@pytest.mark.parametrize("protocol,W", [("gemm", 1), ("pull", 2), ("pull", 16)])
@pytest.mark.parametrize("tile_n", [112, 128])
def test_clustered_builds_multicast_b_within_the_cluster_and_release_both_ctas(compile_mod, protocol, W, tile_n):
    """The 64-row tiles in clusters of two (the W = 1 GEMM and pull): as many B loads multicast to the cluster
    (mask 0b11) as A loads into the CTA alone; each stage's empty barrier counts the consumer warps of both CTAs
    (8 = 4 warps x 2: a CTA's producer refills a stage only once its twin released it too), every consumer warp
    releases to both (``mapa`` + remote ``mbarrier.arrive.shared::cluster``); the barriers' initialisation fenced
    cluster-wide; no ``multimem`` (the multicast is the on-chip cluster copy). The unclustered builds have none of
    it: 4 warps, no cluster barrier, no multicast load."""
    kw = {"tile_m": 64, "consumer_warpgroups": 1, "tile_n": tile_n, "epi_tile_n": 16 if tile_n == 112 else 32}

    def ptx_of(cluster_m):
        config = _cfg(**kw, cluster_m=cluster_m)
        if protocol == "gemm":
            return compile_mod.get_compiled(*SMALL, config).ptx
        return compile_mod.get_compiled_rs(*SMALL, config, W, protocol=protocol).ptx

    ptx = ptx_of(2)
    loads, multicasts = len(re.findall(TMA_LOAD, ptx)), len(re.findall(TMA_MULTICAST, ptx))
    assert loads >= 1 and multicasts == loads, (loads, multicasts)
    masks = re.findall(r"mov\.b16\s+(%rs\d+), (\d+);", ptx)
    assert masks and {int(v) for _, v in masks} == {3}
    assert _barrier_counts(ptx) == {1, 8}  # full: the producer's arrive (+ TMA bytes); empty: 4 warps x 2 CTAs
    assert re.search(r"mapa\.shared::cluster", ptx) and re.search(r"mbarrier\.arrive\.shared::cluster\.b64", ptx)
    assert "barrier.cluster.arrive.relaxed" in ptx and "barrier.cluster.wait" in ptx
    assert "multimem" not in ptx and ".local" not in ptx
    plain = ptx_of(1)
    assert _barrier_counts(plain) == {1, 4}
    assert not re.search(TMA_MULTICAST, plain) and "barrier.cluster" not in plain and "mapa" not in plain


def test_clustered_configs_are_validated():
    from kernel.fused.config import GemmConfig

    for bad in (dict(cluster_m=3), dict(cluster_m=2, split_k=True), dict(cluster_m=2, sm_count=131)):
        with pytest.raises(ValueError):
            GemmConfig(**bad).validate()
    assert GemmConfig(tile_m=64, consumer_warpgroups=1, tile_n=128, cluster_m=2).label == "64x128c2"
    from kernel.fused.gemm_rs_push import HopperGemmRsPushBF16

    with pytest.raises(ValueError, match="clustered"):
        HopperGemmRsPushBF16(None, None, GemmConfig(tile_m=64, consumer_warpgroups=1, tile_n=128, cluster_m=2), 2)


def test_race_canary_races(compile_mod):
    """The canary's shared-memory store and another warp's load of the same words have no barrier between them
    (its PTX: one st.shared, one ld.shared, no bar/barrier/fence instruction), so racecheck has a hazard to report,
    in a kernel its name identifies (``fuzz.sanitize.canary_heard`` looks for it)."""
    from fuzz.race_canary import CANARY, compile_canary

    _fn, _seconds, ptx = compile_canary()
    (entry,) = re.findall(r"\.entry\s+(\w+)", ptx)
    assert CANARY in entry
    body = ptx.split(".entry", 1)[1]
    stores = [i for i, line in enumerate(body.splitlines()) if "st.shared" in line]
    loads = [i for i, line in enumerate(body.splitlines()) if "ld.shared" in line]
    assert len(stores) == 1 and len(loads) == 1 and stores[0] < loads[0]
    assert not re.search(r"\b(bar|barrier|fence|membar)\.", body)


def test_launch_arguments_are_kept_by_value_and_the_compile_gets_its_own(compile_mod):
    """A launch's DSL arguments come from by-value caches (building them was 9 / 24 / 48 us of host time per call
    at W = 1 / 2 / 8): the same values give the same objects, other values other objects holding those values,
    and the compile's arguments (``fresh=True``) are never objects a launch is handed -- a traced argument must
    not become a launch's."""
    import cutlass

    peers = [1 << 20, (1 << 20) + 4096]
    flags = [1 << 22, (1 << 22) + 256]
    a = compile_mod._rs_args("pull", 16, 32, 48, peers, flags, 129, 7168, 2048, 2, 65, 1, "s")
    b = compile_mod._rs_args("pull", 16, 32, 48, peers, flags, 129, 7168, 2048, 2, 65, 1, "s")
    assert all(x is y for x, y in zip(a, b, strict=True))
    c = compile_mod._rs_args("pull", 16, 32, 64, peers, flags, 130, 7168, 2048, 2, 65, 1, "s")
    assert c[2] is not a[2] and c[2]._pointer == 64 and a[2]._pointer == 48  # another out: its own pointer
    assert c[4] is not a[4] and c[4].value == 130 and a[4].value == 129  # another M
    assert c[3] is a[3] and c[3]._pointer == peers[1]  # this rank's own partial, the same every call
    # the peer pointers in order, the partials' then the flags' (rank 1's view of a W = 2 group)
    assert [p._pointer for p in a[-4:]] == peers + flags
    push = compile_mod._rs_args("push", 16, 32, 48, peers, flags, 129, 7168, 2048, 2, 65, 1, "s")
    assert [v.value for v in push[3:9]] == [129, 7168, 2048, 65, 2, 1]  # M, N, K, slot rows, slots, rank
    fresh = compile_mod._rs_args("pull", 16, 32, 48, peers, flags, 129, 7168, 2048, 2, 65, 1, "s", fresh=True)
    assert not any(x is y for x, y in zip(fresh, a, strict=True) if not isinstance(x, str))
    g = compile_mod._gemm_args(16, 32, 48, 129, 7168, 2048, "s")
    assert g[0] is a[0] and g[3] is a[4] and g[4].value == 7168
    assert compile_mod._gemm_args(16, 32, 48, 129, 7168, 2048, "s", fresh=True)[0] is not g[0]
    assert isinstance(g[3], cutlass.Int32)


class _Program:
    """A compiled kernel's function with its launch taken out (no GPU here): marshals through the real DSL
    function, records what each launch would run."""

    def __init__(self, fn):
        self.fn, self.marshalled, self.ran = fn, 0, []

    def generate_execution_args(self, *args):
        self.marshalled += 1
        return self.fn.generate_execution_args(*args)

    def run_compiled_program(self, exe_args):
        self.ran.append(exe_args)


def _values(exe_args, widths) -> list[bytes]:
    """The bytes behind each marshalled C pointer: what the launched program reads."""
    import ctypes

    return [ctypes.string_at(p if isinstance(p, int) else p.value, n) for p, n in zip(exe_args, widths, strict=True)]


def test_a_launch_reuses_the_marshalling_of_the_same_argument_objects_and_only_theirs(compile_mod, main_kernel):
    """The DSL's marshalling of a launch's arguments (``generate_execution_args``, ~5 us of the GEMM's host time)
    is kept per argument objects: a repeated launch (the same x, w, out, M and stream) runs the kept C arguments,
    which hold what a fresh marshalling gives; any other value is marshalled anew; streams are one object per
    handle; the oldest entries go first past the cap."""
    program = _Program(main_kernel.fn)
    kernel = compile_mod.CompiledGemm(key=main_kernel.key, fn=program, seconds=0.0, ptx="", ab_stage=4,
                                      N=MAIN[0], K=MAIN[1])
    s1, s2 = compile_mod.launch_stream(4096), compile_mod.launch_stream(8192)
    assert compile_mod.launch_stream(4096) is s1 and s1 is not s2
    widths = (8, 8, 8, 4, 4, 4, 8)  # x, w, out (pointers), M, N, K (Int32), the stream handle
    kernel.launch(1 << 20, 2 << 20, 3 << 20, 129, s1)
    kernel.launch(1 << 20, 2 << 20, 3 << 20, 129, s1)
    assert program.marshalled == 1 and program.ran[0] is program.ran[1]
    for other in ((1 << 20, 2 << 20, 4 << 20, 129, s1), (1 << 20, 2 << 20, 3 << 20, 130, s1),
                  (1 << 20, 2 << 20, 3 << 20, 129, s2)):
        kernel.launch(*other)
    assert program.marshalled == 4 and len({id(e) for e in program.ran}) == 4
    import gc

    gc.collect()  # nothing a kept marshalling points into may have been freed
    fresh = [main_kernel.fn.generate_execution_args(*compile_mod._gemm_args(x, w, y, M, *MAIN, st))[0]
             for x, w, y, M, st in ((1 << 20, 2 << 20, 3 << 20, 129, s1), (1 << 20, 2 << 20, 3 << 20, 130, s1),
                                    (1 << 20, 2 << 20, 3 << 20, 129, s2))]
    assert _values(program.ran[0], widths) == _values(fresh[0], widths)
    assert _values(program.ran[3], widths) == _values(fresh[1], widths)
    assert _values(program.ran[4], widths) == _values(fresh[2], widths)
    assert _values(program.ran[0], widths)[3] == (129).to_bytes(4, "little")
    assert _values(program.ran[4], widths)[6] == (8192).to_bytes(8, "little")
    kernel.bound(*MAIN).launch(1 << 20, 2 << 20, 3 << 20, 129, s1)  # a bound view shares the kept marshalling
    assert program.marshalled == 4


def test_kept_marshallings_are_capped_oldest_first(compile_mod, main_kernel, monkeypatch):
    program = _Program(main_kernel.fn)
    kernel = compile_mod.CompiledGemm(key=main_kernel.key, fn=program, seconds=0.0, ptx="", ab_stage=4,
                                      N=MAIN[0], K=MAIN[1])
    monkeypatch.setattr(compile_mod, "MARSHALLED_CACHE", 2)
    s = compile_mod.launch_stream(4096)
    for M in (1, 2, 1, 3, 1, 2):  # 1 is used again before 2 and 3: 2 is the one dropped when 3 comes
        kernel.launch(1 << 20, 2 << 20, 3 << 20, M, s)
    assert program.marshalled == 4 and len(kernel._marshalled) == 2
