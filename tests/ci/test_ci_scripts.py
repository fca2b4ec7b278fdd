"""The CI scripts' own contracts: ``ci/test`` fails on failing or missing tests, ``.ci/run``'s two passes run each
kill-matrix test once (the matrix at -O1) and together cover the gate's world sizes, ``ci/fuzz`` stops on a stored
failure that still fails, and ``ci/setup.sh`` returns non-zero when it cannot set up. Each runs in seconds: tiny
pytest selections, fake executables on PATH, never the real suite."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
KM = "tests/mutation/test_kill_matrix.py"
KILL_MATRIX_TESTS = ("test_kill_matrix_ci", "test_capacity_assert_killed_at_the_other_optimize_level",
                     "test_an_implementation_the_ranks_cannot_load_is_an_error_not_a_kill")
GATE_WORLD_SIZES = {1, 2, 3, 4, 8}  # fuzz/config.py's CPU default: what `./ci/test` alone runs
KILL_MATRIX_CONTROL_W = 2  # the correct implementation through fuzz/ at W = 2, inside test_kill_matrix_ci


def _clean_env(**more: str) -> dict[str, str]:
    """This process's environment without what a CI pass or an xdist worker set (the nested run must not inherit
    -O, a pass's world sizes or pytest's worker variables)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GEMM_RS_", "PYTEST_", "HYPOTHESIS_")) and k not in ("PYTHONOPTIMIZE",)}
    env.update(more)
    return env


def _fake(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o755)


# --- ci/test (P17) -----------------------------------------------------------------------------------------------

@pytest.fixture
def tiny_tests(tmp_path):
    (tmp_path / "test_tiny.py").write_text("def test_passes():\n    pass\n\n\ndef test_fails():\n    assert False\n")
    return tmp_path / "test_tiny.py"


def _ci_test(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(REPO / "ci/test"), *args], capture_output=True, text=True, timeout=120, cwd="/",
                          env=_clean_env(GEMM_RS_JOBS="0"))


@pytest.mark.parametrize("selection, want_fail", [
    pytest.param(["::test_passes"], False, id="passing"),
    pytest.param(["::test_fails"], True, id="failing"),
    pytest.param(["", "-k", "nomatch"], True, id="none-collected"),
])
def test_ci_test_exit_status_is_pytest_s_and_no_tests_is_a_failure(tiny_tests, selection, want_fail):
    args = [str(tiny_tests) + selection[0], *selection[1:]]
    r = _ci_test(*args)
    out = r.stdout[-3000:] + r.stderr[-3000:]
    if want_fail:
        assert r.returncode != 0, f"ci/test {' '.join(args)} exited 0:\n{out}"
    if "ci/test: ruff found problems" in r.stderr:  # ci/test lints the whole repository first
        pytest.skip(f"the repository does not lint clean now, so ci/test stopped before pytest:\n{r.stdout[-500:]}")
    if not want_fail:
        assert r.returncode == 0, f"ci/test {' '.join(args)} exited {r.returncode}:\n{out}"
    if "-k" in args:  # pytest's 5 (no tests) made a failure
        assert r.returncode == 1 and "collected no tests" in r.stderr, out


# --- .ci/run (P18, P48) ------------------------------------------------------------------------------------------

RECORDER = r"""#!/usr/bin/env bash
# ci/test stand-in: records each pass's environment and arguments (one a line), runs nothing
{ echo "PYTHONOPTIMIZE=${PYTHONOPTIMIZE-}"; echo "GEMM_RS_WORLD_SIZES=${GEMM_RS_WORLD_SIZES-}"
  for a in "$@"; do echo "arg=$a"; done; echo "end"; } >> "$RECORD"
"""


def _passes(tmp_path) -> list[dict]:
    """`.ci/run` run as it is, in a copy of the repository's layout whose ci/test only records how it was called:
    the shell itself expands the variables, continuations and env prefixes."""
    root = tmp_path / "repo"
    (root / ".ci").mkdir(parents=True)
    (root / "ci").mkdir()
    shutil.copy2(REPO / ".ci/run", root / ".ci/run")
    _fake(root / "ci/test", RECORDER)
    record = tmp_path / "passes.jsonl"
    r = subprocess.run(["bash", str(root / ".ci/run")], capture_output=True, text=True, timeout=60, cwd="/",
                       env=_clean_env(RECORD=str(record)))
    assert r.returncode == 0, r.stdout + r.stderr
    passes, cur = [], {"env": {}, "args": []}
    for line in record.read_text().splitlines():
        if line == "end":
            passes.append(cur)
            cur = {"env": {}, "args": []}
        elif line.startswith("arg="):
            cur["args"].append(line[4:])
        else:
            k, v = line.split("=", 1)
            cur["env"][k] = v
    return passes


def _selection(args: list[str]) -> tuple[list[str], list[str]]:
    """(paths, deselected node-id prefixes) of a pytest command line; any other option is refused here, so that a
    new one that changes the selection (-k, -m, --ignore...) makes this test be taught it, not misread it."""
    paths, deselect, it = [], [], iter(args)
    for a in it:
        if a == "--deselect":
            deselect.append(next(it))
        elif a.startswith("--deselect="):
            deselect.append(a.split("=", 1)[1])
        elif a.startswith("-"):
            pytest.fail(f".ci/run passes {a!r} to ci/test: teach tests/ci/test_ci_scripts.py what it selects")
        else:
            paths.append(a)
    return paths or ["tests", "fuzz"], deselect  # pyproject.toml's testpaths


def _norm(p: str) -> str:
    path, sep, rest = p.removeprefix("./").partition("::")
    return os.path.normpath(path).replace(os.sep, "/") + sep + rest


def _under(nodeid: str, p: str) -> bool:
    """Whether pytest's argument ``p`` (a folder, a file or a node id) collects the test ``nodeid``."""
    p = _norm(p)
    if "::" in p:
        return nodeid == p or nodeid.startswith((p + "::", p + "["))
    return nodeid.startswith(p + ("::" if p.endswith(".py") else "/"))


def _selects(args: list[str], nodeid: str) -> bool:
    paths, deselect = _selection(args)
    return any(_under(nodeid, p) for p in paths) and not any(nodeid.startswith(_norm(d)) for d in deselect)


def _runs_gate(args: list[str]) -> bool:
    return any(_norm(p) == "fuzz" or _norm(p).startswith("fuzz/") for p in _selection(args)[0])


def test_ci_run_passes_run_each_kill_matrix_test_once_the_matrix_at_O1_and_cover_the_gate_world_sizes(tmp_path):
    defined = {n.name for n in ast.parse((REPO / KM).read_text()).body if isinstance(n, ast.FunctionDef)}
    assert set(KILL_MATRIX_TESTS) <= defined, f"renamed in {KM}? {set(KILL_MATRIX_TESTS) - defined}"
    passes = _passes(tmp_path)
    assert len(passes) == 2, passes
    where = {}
    for name in KILL_MATRIX_TESTS:
        running = [i for i, p in enumerate(passes) if _selects(p["args"], f"{KM}::{name}")]
        assert len(running) == 1, f"{name} runs in passes {running} of .ci/run, not exactly one: {passes}"
        where[name] = passes[running[0]]

    def level(p):
        return 1 if (p["env"]["PYTHONOPTIMIZE"] or "0") not in ("", "0") else 0

    assert level(where["test_kill_matrix_ci"]) == 1, \
        f"the kill matrix must run under PYTHONOPTIMIZE=1 (how users run the gate): {where['test_kill_matrix_ci']}"
    # the capacity-as-assert mutant at the level the matrix does not run: its test runs "the other level"
    assert level(where["test_capacity_assert_killed_at_the_other_optimize_level"]) == 1, where

    covered = set()
    for p in passes:
        if _runs_gate(p["args"]):
            sizes = p["env"]["GEMM_RS_WORLD_SIZES"]
            covered |= {int(w) for w in sizes.split(",")} if sizes else GATE_WORLD_SIZES
    covered.add(KILL_MATRIX_CONTROL_W)  # test_kill_matrix_ci runs in one pass (above)
    assert covered >= GATE_WORLD_SIZES, f"the passes run the gate at W = {sorted(covered)} only: {passes}"


# --- ci/fuzz (P46) -----------------------------------------------------------------------------------------------

FAKE_PYTHON = r"""#!/usr/bin/env bash
# python3 for GEMM_RS_SYSTEM_PYTHON=1: one stored example; the replay fails with $FAKE_REPLAY_RC, the main run passes
case "$*" in
  *stored_examples*) echo 1 ;;
  "-m pytest"*) echo "pytest profile=$HYPOTHESIS_PROFILE" >> "$FAKE_LOG"
                [ "$HYPOTHESIS_PROFILE" = replay ] && exit "$FAKE_REPLAY_RC"; exit 0 ;;
  *) exit 0 ;;  # setup.sh's probes: the CuTe DSL found, no writable site folder
esac
"""


@pytest.mark.parametrize("replay_rc", [1, 0])
def test_ci_fuzz_stops_on_a_stored_failure_that_still_fails(tmp_path, replay_rc):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    _fake(bindir / "python3", FAKE_PYTHON)
    log = tmp_path / "pytest.log"
    env = _clean_env(PATH=f"{bindir}:/usr/bin:/bin", GEMM_RS_SYSTEM_PYTHON="1", TMPDIR=str(tmp_path),
                     FAKE_LOG=str(log), FAKE_REPLAY_RC=str(replay_rc))
    r = subprocess.run([str(REPO / "ci/fuzz")], capture_output=True, text=True, timeout=60, cwd="/", env=env)
    runs = log.read_text().splitlines() if log.exists() else []
    out = r.stdout + r.stderr + "\n" + "\n".join(runs)
    if replay_rc:
        assert r.returncode != 0, f"a stored example that still fails was swallowed:\n{out}"
        assert runs == ["pytest profile=replay"], out
    else:
        assert r.returncode == 0 and runs == ["pytest profile=replay", "pytest profile=ci"], out


# --- ci/setup.sh (P22) -------------------------------------------------------------------------------------------

def test_setup_returns_non_zero_when_it_cannot_set_up(tmp_path):
    """GEMM_RS_SYSTEM_PYTHON=1 and no python3 on PATH: sourcing ci/setup.sh returns 1 (the callers' `|| exit 1`)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("bash", "dirname", "env"):
        (bindir / tool).symlink_to(shutil.which(tool))
    script = '. "$1/ci/setup.sh"; echo "rc=$?"'
    r = subprocess.run([str(bindir / "bash"), "-c", script, "bash", str(REPO)], capture_output=True, text=True,
                       timeout=30, cwd="/", env={"PATH": str(bindir), "GEMM_RS_SYSTEM_PYTHON": "1",
                                                 "HOME": str(tmp_path)})
    assert "no python3 on PATH" in r.stderr, r.stdout + r.stderr
    assert "rc=1" in r.stdout, r.stdout + r.stderr


# --- every ci/ script as the pipelines call it: its exit status, its command line, -O and multicast off -------------
# (a fake python3 under GEMM_RS_SYSTEM_PYTHON=1 logs how each script called it and exits as told)

MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}

LOGGING_PYTHON = r"""#!/usr/bin/env bash
# python3 for GEMM_RS_SYSTEM_PYTHON=1: setup.sh's probes answered, every other call logged with the environment
# a child sees, then exit $FAKE_RC ($FAKE_RUFF_RC for ruff)
case "$*" in
  *stored_examples*) echo "${FAKE_STORED:-0}"; exit 0 ;;
  *find_spec*|*getsitepackages*|*compileall*) exit 0 ;;
esac
echo "argv=$*|O=${PYTHONOPTIMIZE-}|nvls=${NCCL_NVLS_ENABLE-}|mc=${TORCH_SYMM_MEM_DISABLE_MULTICAST-}|\
nvshmem=${NVSHMEM_DISABLE_NVLS-}|profile=${HYPOTHESIS_PROFILE-}" >> "$FAKE_LOG"
[ -n "${FAKE_OUT:-}" ] && echo "$FAKE_OUT"
case "$*" in
  *"-m ruff"*) exit "${FAKE_RUFF_RC:-0}" ;;
  *) exit "${FAKE_RC:-0}" ;;
esac
"""


def _run_with_fake_python(tmp_path, argv: list[str], **env: str) -> tuple[subprocess.CompletedProcess, list[dict]]:
    """``argv`` (a ci/ script) run with the logging python3; (its result, one dict per python call it made). The
    caller's multicast settings are removed first: the script itself must export them to its children."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    _fake(bindir / "python3", LOGGING_PYTHON)
    log = tmp_path / "python.log"
    log.unlink(missing_ok=True)
    full = {k: v for k, v in _clean_env().items() if k not in MULTICAST_OFF}
    full.update(PATH=f"{bindir}:/usr/bin:/bin", GEMM_RS_SYSTEM_PYTHON="1", TMPDIR=str(tmp_path), FAKE_LOG=str(log),
                **env)
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd="/", env=full)
    lines = log.read_text().splitlines() if log.exists() else []
    return r, [dict(f.split("=", 1) for f in line.split("|")) for line in lines]


def _multicast_off(call: dict) -> bool:
    return (call["nvls"], call["mc"], call["nvshmem"]) == ("0", "1", "1")


@pytest.mark.parametrize("rc", [0, 3])
def test_ci_gate_passes_its_arguments_and_returns_the_campaign_s_status(tmp_path, rc):
    r, calls = _run_with_fake_python(tmp_path, [str(REPO / "ci/gate"), "--profile", "smoke", "--world-sizes", "2"],
                                     FAKE_RC=str(rc))
    out = r.stdout + r.stderr + str(calls)
    assert r.returncode == rc, f"ci/gate exited {r.returncode}, the campaign {rc}:\n{out}"
    assert [c["argv"] for c in calls] == ["-m fuzz.campaign --profile smoke --world-sizes 2"], out
    assert all(_multicast_off(c) for c in calls), f"multicast not off in the campaign's environment: {calls}"


@pytest.mark.parametrize("rc", [0, 1])
def test_ci_fuzz_runs_the_whole_gate_under_O_with_the_user_s_arguments(tmp_path, rc):
    """ci/fuzz is `PYTHONOPTIMIZE=1 pytest -n auto fuzz/` (README): the -O reaches pytest's process (and so its
    workers and ranks), the whole of fuzz/ is collected, the user's arguments follow, pytest's status is ci/fuzz's."""
    r, calls = _run_with_fake_python(tmp_path, [str(REPO / "ci/fuzz"), "--junitxml=j.xml"], FAKE_RC=str(rc))
    out = r.stdout + r.stderr + str(calls)
    assert r.returncode == rc, out
    runs = [c for c in calls if " pytest " in f" {c['argv']} "]
    assert [c["argv"] for c in runs] == ["-m pytest -n auto -p no:cacheprovider fuzz/ --junitxml=j.xml"], out
    assert all(c["O"] == "1" for c in runs), f"pytest did not get PYTHONOPTIMIZE=1: {runs}"
    assert all(_multicast_off(c) for c in calls), f"multicast not off in pytest's environment: {calls}"


@pytest.mark.parametrize("args, want", [
    pytest.param([], "-O -m mutants.meta", id="cpu"),
    pytest.param(["--jobs", "2"], "-O -m mutants.meta --jobs 2", id="cpu-args"),
    pytest.param(["--gpu", "--jobs", "4"], "-O -m mutants.meta --gpu --optimize 1 --jobs 4", id="gpu"),
])
def test_ci_kill_matrix_runs_the_matrix_it_names_under_O(tmp_path, args, want):
    """`ci/kill-matrix --gpu` is the GPU matrix at -O1 (the pipelines' nightly step); without it, the CPU matrix."""
    r, calls = _run_with_fake_python(tmp_path, [str(REPO / "ci/kill-matrix"), *args], FAKE_RC="2")
    out = r.stdout + r.stderr + str(calls)
    assert r.returncode == 2, out
    assert [c["argv"] for c in calls] == [want], out
    assert all(_multicast_off(c) for c in calls), out


def test_ci_test_stops_when_ruff_fails(tmp_path):
    r, calls = _run_with_fake_python(tmp_path, [str(REPO / "ci/test"), "-k", "x"], FAKE_RUFF_RC="1")
    out = r.stdout + r.stderr + str(calls)
    assert r.returncode != 0, f"ci/test passed with ruff failing:\n{out}"
    assert [c["argv"] for c in calls] == ["-m ruff check ."], f"pytest ran after ruff failed: {out}"


def test_ci_run_fails_when_its_first_pass_fails(tmp_path):
    """`.ci/run`'s first pass failing fails CI, whatever the second pass does (`set -e`)."""
    root = tmp_path / "repo"
    (root / ".ci").mkdir(parents=True)
    (root / "ci").mkdir()
    shutil.copy2(REPO / ".ci/run", root / ".ci/run")
    _fake(root / "ci/test", '#!/usr/bin/env bash\n[ -n "${PYTHONOPTIMIZE:-}" ] && exit 0\nexit 1\n')
    r = subprocess.run(["bash", str(root / ".ci/run")], capture_output=True, text=True, timeout=60, cwd="/",
                       env=_clean_env())
    assert r.returncode != 0, r.stdout + r.stderr


# --- ci/gpu-check (its steps' commands faked: what is tested is how a step's status becomes the script's) ---------

def _gpu_check(tmp_path, *steps: str, **env: str) -> tuple[subprocess.CompletedProcess, list[dict]]:
    return _run_with_fake_python(tmp_path, [str(REPO / "ci/gpu-check"), str(tmp_path / "out"), *steps], **env)


@pytest.mark.parametrize("rc", [0, 1, 124])
def test_gpu_check_counts_a_failed_step(tmp_path, rc):
    r, calls = _gpu_check(tmp_path, "kernel", FAKE_RC=str(rc))
    out = r.stdout + r.stderr
    assert f"== kernel: rc={rc}\n" in r.stdout, out
    assert r.returncode == (1 if rc else 0) and f"ci/gpu-check: {1 if rc else 0} step(s) failed" in r.stdout, out
    assert len(calls) == 1 and calls[0]["argv"].startswith("-m pytest tests/kernel"), calls
    assert all(_multicast_off(c) for c in calls), calls


def test_gpu_check_counts_each_failed_step_run_in_the_background(tmp_path):
    r, calls = _gpu_check(tmp_path, "cacheprobe", FAKE_RC="1")
    assert r.returncode == 3 and r.stdout.count(": rc=1\n") == 3, r.stdout + r.stderr
    assert len(calls) == 3 and all(c["O"] == "1" and _multicast_off(c) for c in calls), calls


@pytest.mark.parametrize("last_line, rc, passes", [
    pytest.param("5 passed in 3.0s", 0, True, id="passed"),
    pytest.param("1 failed, 4 passed in 3.0s", 1, False, id="failed"),
    pytest.param("4 passed, 1 skipped in 3.0s", 0, False, id="skipped"),
])
def test_gpu_check_kernelgpu_passes_only_when_every_gpu_test_ran_and_passed(tmp_path, last_line, rc, passes):
    r, _ = _gpu_check(tmp_path, "kernelgpu", FAKE_RC=str(rc), FAKE_OUT=last_line)
    assert (r.returncode == 0) == passes, r.stdout + r.stderr


def test_gpu_check_gate_steps_run_the_campaign_under_O(tmp_path):
    r, calls = _gpu_check(tmp_path, "gate", "pushgate", FAKE_RC="0")
    campaigns = [c for c in calls if "-m fuzz.campaign" in c["argv"]]
    assert r.returncode == 0 and len(campaigns) == 2, r.stdout + r.stderr + str(calls)
    assert all(c["O"] == "1" and _multicast_off(c) for c in campaigns), campaigns


# --- bench/gpu_gate_evidence.sh (its ci/ commands faked) -------------------------------------------------------------

@pytest.mark.parametrize("failing", [None, "ci/gate", "ci/gpu-check", "python"])
def test_gpu_gate_evidence_keeps_multicast_off_in_every_child(tmp_path, failing):
    """Every child keeps multicast off; the script's exit status is 0 only where every step's was (``failing``:
    the step faked to return 1; "python": the GPU mutants and the byte boundaries)."""
    root = tmp_path / "repo"
    for d in ("bench", "ci"):
        (root / d).mkdir(parents=True)
    shutil.copy2(REPO / "bench/gpu_gate_evidence.sh", root / "bench/gpu_gate_evidence.sh")
    shutil.copy2(REPO / "ci/setup.sh", root / "ci/setup.sh")
    record = r"""#!/usr/bin/env bash
echo "$(basename "$0") ${NCCL_NVLS_ENABLE-} ${TORCH_SYMM_MEM_DISABLE_MULTICAST-} ${NVSHMEM_DISABLE_NVLS-}" \
  >> "$SCRIPT_LOG"
"""
    for script in ("ci/gpu-check", "ci/gate"):
        _fake(root / script, record + ("exit 1\n" if script == failing else ""))
    log = tmp_path / "scripts.log"
    argv = ["bash", str(root / "bench/gpu_gate_evidence.sh"), str(tmp_path / "o")]
    before = set(Path("/tmp").glob("gpu_gate_evidence.*"))
    try:
        r, calls = _run_with_fake_python(tmp_path, argv, GATE_EVIDENCE_BUDGET="90", PHASE1_LIMIT="20",
                                         SCRIPT_LOG=str(log), FAKE_RC="1" if failing == "python" else "0")
    finally:  # the script's own log folder (mktemp under /tmp, whatever TMPDIR says)
        for d in set(Path("/tmp").glob("gpu_gate_evidence.*")) - before:
            shutil.rmtree(d, ignore_errors=True)
    scripts = log.read_text().splitlines() if log.exists() else []
    out = r.stdout + r.stderr + str(scripts) + str(calls)
    assert scripts == ["gpu-check 0 1 1"] + ["gate 0 1 1"] * 2, out  # verdicts, then the gate on each topology
    assert len(calls) == 2 and all(_multicast_off(c) for c in calls), out  # the GPU mutants, the byte boundaries
    assert (r.returncode == 0) == (failing is None), out
    assert ("gpu_gate_evidence: FAIL" in r.stdout) == (failing is not None), out


@pytest.mark.parametrize("profile, want", [("", "ci"), ("nightly", "nightly")])
def test_ci_fuzz_runs_the_caller_s_profile_ci_by_default(tmp_path, profile, want):
    """The pipelines' nightly run sets HYPOTHESIS_PROFILE=nightly for ci/fuzz; unset, it is the ci profile."""
    env = {"HYPOTHESIS_PROFILE": profile} if profile else {}
    r, calls = _run_with_fake_python(tmp_path, [str(REPO / "ci/fuzz")], **env)
    runs = [c for c in calls if " pytest " in f" {c['argv']} "]
    assert r.returncode == 0 and [c["profile"] for c in runs] == [want], r.stdout + r.stderr + str(calls)


def test_gpu_check_counts_the_async_tp_campaign_it_could_not_run(tmp_path):
    """The async-TP probe failing: the probe is a failed step and the campaign it kept from running another (the
    unaligned probe is a record, not a gate)."""
    r, calls = _gpu_check(tmp_path, "asynctp", FAKE_RC="1")
    out = r.stdout + r.stderr
    assert "campaign not run" in r.stdout and r.returncode == 2, out
    assert not any("fuzz.campaign" in c["argv"] for c in calls), calls
