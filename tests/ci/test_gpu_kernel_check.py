"""bench/gpu_kernel_check.sh, the one command the lead runs on the GPU for issue 16: its verdict line is PASS
only when steps ran and every one of them returned 0 (checked on CPU with made-up step logs), and the
ci/gpu-check steps it runs exist."""

from __future__ import annotations

import os
import subprocess

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "bench", "gpu_kernel_check.sh")


def _summary(out_dir) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", SCRIPT, str(out_dir), "summary"], cwd=REPO, capture_output=True, text=True,
                          timeout=60)


def _steps(out_dir, rcs: dict[str, int]) -> None:
    (out_dir / "gpu-check-x.out").write_text("".join(f"== {k}: took 12 s\n== {k}: rc={v}\n" for k, v in rcs.items()))


def test_pass_only_when_every_step_returned_zero(tmp_path):
    _steps(tmp_path, {"cacheprobe-fused": 0, "kernel": 0, "gate-FusedGemmRsPush": 0})
    res = _summary(tmp_path)
    assert res.returncode == 0 and res.stdout.strip().endswith("gpu_kernel_check: PASS (3 steps)"), res.stdout


def test_one_failed_step_fails_the_run(tmp_path):
    _steps(tmp_path, {"kernel": 0, "gate-FusedGemmRsPush": 1})
    (tmp_path / "gate-FusedGemmRsPush.log").write_text("12 cases, 1 failed, 30 s, profile `smoke`\n"
                                                        "- failed in test_x: `python -m fuzz.repro ...`\n"
                                                        "VERDICT: FAIL\n")
    res = _summary(tmp_path)
    assert res.returncode == 1 and res.stdout.strip().endswith("gpu_kernel_check: FAIL (1 of 2 steps did not pass)")
    assert "VERDICT: FAIL" in res.stdout and "fuzz.repro" in res.stdout  # the gate's summary is shown
    row = next(x for x in res.stdout.splitlines() if x.strip().startswith("gate-FusedGemmRsPush"))
    assert "FAIL rc=1" in row and "12 cases, 1 failed" in row and " 12 " in row  # status, detail, seconds


def test_a_step_cut_off_by_its_time_limit_is_a_timeout_not_a_pass(tmp_path):
    _steps(tmp_path, {"cacheprobe-fused": 0, "push-racecheck": 124})
    res = _summary(tmp_path)
    assert res.returncode == 1, res.stdout
    row = next(x for x in res.stdout.splitlines() if x.strip().startswith("push-racecheck"))
    assert "TIMEOUT" in row and "PASS" not in row


def test_no_step_is_not_a_pass(tmp_path):
    res = _summary(tmp_path)
    assert res.returncode == 1 and "FAIL (no step ran)" in res.stdout


def test_scripts_parse_and_the_steps_exist():
    for path in (SCRIPT, os.path.join(REPO, "ci", "gpu-check")):
        assert subprocess.run(["bash", "-n", path], capture_output=True).returncode == 0, path
    with open(os.path.join(REPO, "ci", "gpu-check")) as f:
        gpu_check = f.read()
    with open(SCRIPT) as f:
        script = f.read()
    for step in ("cacheprobe", "kernelgpu", "pushsanitize", "pushmutants", "benchrs"):
        assert f"    {step})" in gpu_check, step
        assert f" {step}" in script, step
    assert "    pushgate | pushmulti | autogate | multigate)" in gpu_check
    assert "run autogate autogate &" in script and "run multigate multigate &" in script
    # every GPU process the device check starts has multicast off
    assert "export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1" in script


def test_the_bench_tables_and_a_failed_check_are_shown(tmp_path):
    _steps(tmp_path, {"bench": 1})
    (tmp_path / "bench.log").write_text(
        "[rank 1] N=7168 K=2048 M=256 auto_s: 3 elements differ\n"
        "NVIDIA H200, W=2 multi-gpu (one GPU per rank, NCCL), N=7168, K/rank=2048\n"
        "     M |  check |   pull us\n   128 |     ok |      30.7\n   256 |   FAIL |       n/a\n")
    res = _summary(tmp_path)
    assert "[rank 1] N=7168 K=2048 M=256 auto_s" in res.stdout and "   128 |     ok |      30.7" in res.stdout
    row = next(x for x in res.stdout.splitlines() if x.strip().startswith("bench "))
    assert "1 M with a failed check; 1 ok" in row


def test_summary_shows_the_push_gates_and_packs_the_logs(tmp_path):
    _steps(tmp_path, {"gate-push-shared": 0, "gate-push-multi": 0})
    (tmp_path / "gate-push-shared.log").write_text(
        "80 cases, 0 failed, 150 s, profile `smoke`\n"
        "| kernel.fused:FusedGemmRsPush | shared-gpu | 16 | 20 | 1.2 | 3.0 | 4.0 | 30.0 |\nVERDICT: PASS\n")
    res = _summary(tmp_path)
    assert res.returncode == 0, res.stdout
    assert "| kernel.fused:FusedGemmRsPush | shared-gpu | 16 | 20 |" in res.stdout  # the per-W cost line
    assert (tmp_path / "logs.tar.gz").stat().st_size > 0
    listing = subprocess.run(["tar", "-tzf", str(tmp_path / "logs.tar.gz")], capture_output=True, text=True).stdout
    assert "gate-push-shared.log" in listing and "gpu-check-x.out" in listing


def test_a_gate_cut_off_with_no_failure_says_so_and_is_not_a_pass(tmp_path):
    _steps(tmp_path, {"gate-auto-shared": 1})
    log = tmp_path / "gate-auto-shared.log"
    log.write_text("[gate] time limit of 140s reached: pytest was interrupted\n40 cases, 0 failed, 150 s\n")
    res = _summary(tmp_path)
    row = next(x for x in res.stdout.splitlines() if x.strip().startswith("gate-auto-shared"))
    assert "CUT OFF" in row and res.returncode == 1
    log.write_text("[gate] time limit of 140s reached: pytest was interrupted\n40 cases, 2 failed, 150 s\n")
    row = next(x for x in _summary(tmp_path).stdout.splitlines() if x.strip().startswith("gate-auto-shared"))
    assert "FAIL rc=1" in row  # a failure before the limit is a failure
