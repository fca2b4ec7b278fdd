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
    (out_dir / "gpu-check-x.out").write_text("".join(f"== {k}: rc={v}\n" for k, v in rcs.items()))


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
    assert res.returncode == 1 and res.stdout.strip().endswith("gpu_kernel_check: FAIL"), res.stdout
    assert "VERDICT: FAIL" in res.stdout and "fuzz.repro" in res.stdout  # the gate's summary is shown


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
    for step in ("cacheprobe", "kernel", "protocols", "bench", "pushsanitize", "pushmutants"):
        assert f"    {step})" in gpu_check, step
        assert step in script, step
