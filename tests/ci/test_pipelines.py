"""The pipeline definitions users copy reference commands that exist, keep multicast off, and time out."""

from __future__ import annotations

import os
import re
import shlex

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PIPELINES = ["ci/pipelines/github-actions.yml", "ci/pipelines/buildkite.yml"]


def _commands(text: str) -> list[str]:
    cmds = []
    for line in text.splitlines():
        m = re.match(r"\s*(?:-\s*)?(run|command):\s*(.+)$", line)
        if m:
            cmds.append(m.group(2).strip().strip('"'))
    return cmds


@pytest.mark.parametrize("path", PIPELINES)
def test_pipeline_commands_exist(path):
    text = open(os.path.join(REPO, path)).read()
    cmds = _commands(text)
    assert cmds, f"{path} has no commands"
    for cmd in cmds:
        for part in re.split(r"&&|;", cmd):
            words = [w for w in shlex.split(part.replace("${{", "").replace("}}", "")) if "=" not in w]
            if not words:
                continue
            exe = words[0]
            assert exe.startswith("./"), f"{path}: {cmd!r} should call a script of this repo"
            target = os.path.join(REPO, exe[2:])
            assert os.path.isfile(target) and os.access(target, os.X_OK), f"{path}: {exe} is not an executable file"


@pytest.mark.parametrize("path", PIPELINES)
def test_pipeline_keeps_multicast_off_and_has_timeouts(path):
    text = open(os.path.join(REPO, path)).read()
    for var in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS"):
        assert var in text, f"{path} does not set {var}"
    assert re.search(r"timeout(-minutes|_in_minutes)", text), f"{path} has no job timeout"
    assert "PYTHONOPTIMIZE=1" in open(os.path.join(REPO, "ci/fuzz")).read()
    # the campaign stops itself (report written, verdict FAIL) before the CI system kills it without one
    assert all("--time-limit" in c for c in _commands(text) if c.startswith("./ci/gate")), path


def test_readme_commands_exist():
    readme = open(os.path.join(REPO, "README.md")).read()
    for exe in ("./ci/gate", "./ci/test"):
        assert exe in readme
        assert os.access(os.path.join(REPO, exe[2:]), os.X_OK)
    ci_run = open(os.path.join(REPO, ".ci/run")).read()
    assert "./ci/test" in ci_run


MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def _text(path: str) -> str:
    with open(os.path.join(REPO, path)) as f:
        return f.read()


@pytest.mark.parametrize("path", PIPELINES)
def test_pipeline_sets_multicast_off_not_only_names_it(path):
    for var, value in MULTICAST_OFF.items():
        values = re.findall(rf"^\s*{var}:\s*\"?([^\"\s#]*)\"?", _text(path), re.M)
        assert values == [value], f"{path}: {var} is set to {values}, not {value!r}"


@pytest.mark.parametrize("path", PIPELINES)
def test_pipeline_command_lines_keep_every_exit_status(path):
    """A step's commands are chained with `&&` only: after `;` or `||` a failed command no longer fails the step."""
    for cmd in _commands(_text(path)):
        assert not re.search(r";|\|\||(?<![&|])&(?!&)|\|(?!\|)", cmd.replace("&&", "")), \
            f"{path}: {cmd!r} can lose a command's exit status"


@pytest.mark.parametrize("path", PIPELINES)
def test_pipeline_runs_the_tests_plain_and_under_O(path):
    """Both passes of the README's test command: as a newcomer runs it and under PYTHONOPTIMIZE=1 (how users run
    the gate)."""
    parts = [p.strip() for cmd in _commands(_text(path)) for p in cmd.split("&&")]
    assert "./ci/test" in parts and "PYTHONOPTIMIZE=1 ./ci/test" in parts, f"{path}: {parts}"


@pytest.mark.parametrize("path", PIPELINES)
def test_pipeline_kill_matrix_steps_are_the_gpu_matrix(path):
    """The pipelines' kill-matrix steps run on GPU agents: `./ci/kill-matrix --gpu` (without it, the CPU matrix)."""
    cmds = [c for c in _commands(_text(path)) if "./ci/kill-matrix" in c]
    assert cmds and all(c.split()[:2] == ["./ci/kill-matrix", "--gpu"] for c in cmds), f"{path}: {cmds}"


def test_github_nightly_profile_reaches_the_fuzz_gate_and_the_campaign():
    """GATE_PROFILE (nightly on the schedule, ci otherwise) is what ci/fuzz and ci/gate run: ci/fuzz takes it as
    HYPOTHESIS_PROFILE (its default is ci), the campaign as --profile."""
    cmds = _commands(_text("ci/pipelines/github-actions.yml"))
    fuzz = [c for c in cmds if "./ci/fuzz" in c]
    gate = [c for c in cmds if "./ci/gate" in c]
    assert fuzz and all(c.startswith('HYPOTHESIS_PROFILE="$GATE_PROFILE" ./ci/fuzz') for c in fuzz), fuzz
    assert gate and all('--profile "$GATE_PROFILE"' in c for c in gate), gate
