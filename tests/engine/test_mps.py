"""``ci/gate --mps 1`` (fuzz/mps.py): shares that keep every persistent grid co-resident, the run's own server
started and quit, and the mode refused where it cannot hold (a fake control binary stands in for the GPU host's)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

from fuzz import config, mps
from fuzz.case import PoolSpec
from fuzz.pool import rank_process_env

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("pools", [1, 2, 3, 4])
@pytest.mark.parametrize("world_size", [1, 2, 4, 8, 16])
def test_shares_of_every_client_fit_the_gpu(world_size, pools):
    if world_size * pools > mps.MAX_CLIENTS:
        with pytest.raises(mps.MpsError, match="lower --pools-per-gpu"):
            mps.share_percent(world_size, pools)
        return
    share = mps.share_percent(world_size, pools)
    assert 1 <= share and share * world_size * pools <= 100


def test_share_rejects_nonsense():
    with pytest.raises(ValueError):
        mps.share_percent(0, 4)


def _active(monkeypatch, on: bool):
    for key in (mps.MODE_ENV, mps.PIPE_ENV):
        monkeypatch.delenv(key, raising=False)
    if on:
        monkeypatch.setenv(mps.MODE_ENV, "1")
        monkeypatch.setenv(mps.PIPE_ENV, "/tmp/pipe")


def test_ranks_get_a_share_only_under_the_gates_server(monkeypatch):
    monkeypatch.setenv("GEMM_RS_POOLS_PER_GPU", "4")
    monkeypatch.setattr(config, "_CURRENT", None)  # the settings are read again, with the 4 pools above
    spec = PoolSpec(impl="fused", topology="shared-gpu", world_size=8)
    _active(monkeypatch, False)
    assert mps.SHARE_ENV not in rank_process_env(spec, [0], {}, "h:1")[0]
    _active(monkeypatch, True)
    add = rank_process_env(spec, [0], {}, "h:1")[0]
    assert add[mps.SHARE_ENV] == "3"  # 100 // (4 pools x 8 ranks)
    for topology in ("cpu", "multi-gpu"):
        other = PoolSpec(impl="fused", topology=topology, world_size=2)
        assert mps.SHARE_ENV not in rank_process_env(other, [0, 1], {}, "h:1")[0]


def _fake_control(tmp_path, rc: int = 0):
    """An ``nvidia-cuda-mps-control`` that logs its arguments, its pipe folder and what it read."""
    log = tmp_path / "calls.log"
    binary = tmp_path / "bin" / mps.CONTROL
    binary.parent.mkdir()
    binary.write_text(f"""#!/bin/sh
echo "args=$* pipe=${mps.PIPE_ENV} log=${mps.LOG_ENV} stdin=$( [ "$1" = -d ] || cat )" >> {log}
exit {rc}
""")
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    return binary.parent, log


def test_server_starts_exports_and_quits(tmp_path, monkeypatch):
    bindir, log = _fake_control(tmp_path)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv(mps.PIPE_ENV, raising=False)
    with mps.server(str(tmp_path / "mps-log")) as env:
        assert os.environ[mps.PIPE_ENV] == env[mps.PIPE_ENV] and os.path.isdir(env[mps.PIPE_ENV])
        assert mps.active()
        pipe = env[mps.PIPE_ENV]
        started = log.read_text().splitlines()
        assert started == [f"args=-d pipe={pipe} log={tmp_path / 'mps-log'} stdin="]
    calls = log.read_text().splitlines()
    assert calls[1] == f"args= pipe={pipe} log={tmp_path / 'mps-log'} stdin=quit", calls
    assert mps.PIPE_ENV not in os.environ and not mps.active() and not os.path.exists(pipe)


def test_server_that_does_not_start_is_an_error(tmp_path, monkeypatch):
    bindir, _ = _fake_control(tmp_path, rc=1)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(mps.MpsError, match="exited 1"), mps.server(str(tmp_path / "log")):
        pass
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    with pytest.raises(mps.MpsError, match="no nvidia-cuda-mps-control"), mps.server(str(tmp_path / "log")):
        pass


@pytest.mark.parametrize("args", [["--mps", "1"], ["--mps", "1", "--topology", "shared-gpu,cpu"],
                                  ["--mps", "2", "--topology", "shared-gpu"]])
def test_gate_refuses_mps_where_it_cannot_hold(tmp_path, args):
    out = subprocess.run([sys.executable, "-m", "fuzz.campaign", "--report-dir", str(tmp_path / "r"), *args],
                         cwd=REPO, capture_output=True, text=True, timeout=120,
                         env={k: v for k, v in os.environ.items() if not k.startswith("GEMM_RS_")})
    assert out.returncode == 2, out.stdout + out.stderr
    assert "--mps" in out.stderr


def _h200(share: int) -> int:
    """The SMs an MPS client on an H200 got at a share (one H200, 25th session: 3 % and 6 % -> 8, 12 % -> 14,
    25 % -> 32, 50 % -> 66, 100 % -> 132): whole TPCs rounded down, a floor of 8."""
    return max(8, 2 * (share * 132 // 100 // 2))


def _sms(world_sizes, most, per_share=_h200):
    return {p: per_share(p) for p in mps.candidate_shares(world_sizes, most)}


def test_measured_h200_shares():
    assert [_h200(p) for p in (3, 6, 12, 25, 50, 100)] == [8, 8, 14, 32, 66, 132]


@pytest.mark.parametrize("world_sizes, pools", [([2], 4), ([2, 4], 4), ([2, 4, 8], 2), ([8], 2), ([16], 1),
                                                ([1, 2, 4, 8, 16], 1)])
def test_pools_that_fit_the_h200(world_sizes, pools):
    assert mps.pools_that_fit(world_sizes, 4, _sms(world_sizes, 4)) == pools


def test_shares_summing_to_100_percent_were_not_enough():
    """What the first --mps did (4 pools of W = 8, 3 % each: 96 %) was 256 SMs' worth on the H200's 132."""
    assert 4 * 8 * mps.share_percent(8, 4) <= 100 and 4 * 8 * _h200(mps.share_percent(8, 4)) > 132
    assert mps.pools_that_fit([8], 4, _sms([8], 4)) < 4


@pytest.mark.parametrize("most", [1, 2, 3, 4, 6])
@pytest.mark.parametrize("world_sizes", [[1], [2], [4], [8], [16], [2, 4, 8], [1, 2, 4, 8, 16], [3, 5]])
def test_pools_that_fit_keep_every_mix_of_pools_on_the_gpu(world_sizes, most):
    for per_share in (_h200, lambda p: max(4, p * 132 // 100), lambda p: max(2, p * 80 // 100)):
        sms = _sms(world_sizes, most, per_share)
        try:
            pools = mps.pools_that_fit(world_sizes, most, sms)
        except mps.MpsError:  # then not even one pool of some W fits
            assert any(w * sms[mps.share_percent(w, 1)] > sms[100] for w in world_sizes)
            continue
        assert 1 <= pools <= most
        # any `pools` pools at once, each of any W: every rank's SMs together within the GPU
        assert pools * max(w * sms[mps.share_percent(w, pools)] for w in world_sizes) <= sms[100]
        if pools < most:  # and one more pool would not have fitted
            assert any(w * (pools + 1) > mps.MAX_CLIENTS
                       or (pools + 1) * w * sms[mps.share_percent(w, pools + 1)] > sms[100] for w in world_sizes)


def test_a_pool_that_does_not_fit_at_all_is_an_error():
    sms = _sms([16], 4, lambda p: max(16, p * 132 // 100))
    with pytest.raises(mps.MpsError, match="W = 16"):
        mps.pools_that_fit([16], 4, sms)


def test_client_sms_asks_a_client_at_each_share(monkeypatch):
    monkeypatch.setattr(mps, "PROBE", f"import os; print(max(8, int(os.environ[{mps.SHARE_ENV!r}]) * 132 // 100))")
    assert mps.client_sms({3, 12, 100}, dict(os.environ)) == {3: 8, 12: 15, 100: 132}


def test_client_sms_that_cannot_say_is_an_error(monkeypatch):
    monkeypatch.setattr(mps, "PROBE", "import sys; sys.exit('no CUDA here')")
    with pytest.raises(mps.MpsError, match="could not say its SM count.*no CUDA here"):
        mps.client_sms({50, 100}, dict(os.environ))
    monkeypatch.setattr(mps, "PROBE", "print('twelve')")
    with pytest.raises(mps.MpsError, match="could not say"):
        mps.client_sms({100}, dict(os.environ))


def _gate_cfg(monkeypatch, **settings):
    for name, value in settings.items():
        monkeypatch.setenv(config.BY_NAME[name].env, value)
    monkeypatch.setattr(config, "_CURRENT", None)
    return config.current()


def test_gate_plans_its_pools_from_what_clients_get(monkeypatch, capsys):
    from fuzz import campaign

    monkeypatch.setattr(mps, "client_sms", lambda shares, env: {p: _h200(p) for p in shares})
    cfg = _gate_cfg(monkeypatch, world_sizes="2,4,8")
    assert campaign._mps_pools(cfg, {"GEMM_RS_POOLS_PER_GPU": "4"}) == 2
    assert "2 pool(s) per GPU" in capsys.readouterr().out
    monkeypatch.delenv(config.BY_NAME["world_sizes"].env)
    assert campaign._mps_pools(_gate_cfg(monkeypatch), {"GEMM_RS_POOLS_PER_GPU": "4"}) == 1  # W = 1 .. 16
    cfg = _gate_cfg(monkeypatch, world_sizes="2,4,8", pools_per_gpu="4")  # the user's 4 do not fit: no silent 2
    with pytest.raises(mps.MpsError, match="2 fit"):
        campaign._mps_pools(cfg, {"GEMM_RS_POOLS_PER_GPU": "4"})


def test_requested_only_where_it_holds():
    assert not mps.requested(None, []) and not mps.requested("0", ["shared-gpu"])
    assert mps.requested("1", ["shared-gpu"])
    for value, topologies in (("1", []), ("1", ["multi-gpu"]), ("1", ["shared-gpu", "cpu"]), ("yes", ["shared-gpu"])):
        with pytest.raises(mps.MpsError, match="--mps"):
            mps.requested(value, topologies)


def test_a_case_run_under_mps_replays_under_mps_at_its_share(monkeypatch):
    from fuzz.case import Case, repro_command

    monkeypatch.setenv("GEMM_RS_POOLS_PER_GPU", "3")
    monkeypatch.setattr(config, "_CURRENT", None)
    case = Case(family="compute", seed=7, N=64, K=64, max_M=8)
    spec = PoolSpec(impl="fused", topology="shared-gpu", world_size=4, optimize=1)
    _active(monkeypatch, False)
    assert "--mps" not in repro_command(case, spec)
    _active(monkeypatch, True)
    assert repro_command(case, spec).endswith(" --mps 1 --pools-per-gpu 3")
    assert "--mps" not in repro_command(case, PoolSpec(impl="fused", topology="multi-gpu", world_size=2))


def test_repro_refuses_mps_off_shared_gpu():
    out = subprocess.run([sys.executable, "-m", "fuzz.repro", "--mps", "1", "--topology", "cpu", "--world-sizes", "2",
                          "--case", "{}"], cwd=REPO, capture_output=True, text=True, timeout=120,
                         env={k: v for k, v in os.environ.items() if not k.startswith("GEMM_RS_")})
    assert out.returncode == 2 and "--mps" in out.stderr, out.stdout + out.stderr
