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


def test_pools_per_gpu_keep_the_clients_a_server_takes():
    assert mps.pools_per_gpu([2, 4, 8], 4) == 4
    assert mps.pools_per_gpu([1, 2, 4, 8, 16], 4) == 3  # 48 clients at most
    assert mps.pools_per_gpu([16], 2) == 2
    for ws in ([1, 2, 4, 8, 16], [16], [8]):
        mps.share_percent(max(ws), mps.pools_per_gpu(ws, 4))  # never more clients than a server takes


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
