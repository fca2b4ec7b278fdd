"""One configuration surface (fuzz/config.py): every GEMM_RS_ variable the code reads is a declared setting,
flags win over the environment, every tool spells the shared flags the same way, and README's table is the
module's (a test fails when they drift)."""

from __future__ import annotations

import argparse
import re
import subprocess
from pathlib import Path

import pytest

from fuzz import config

REPO = Path(__file__).resolve().parents[2]
PUBLIC = re.compile(r"(?<![A-Za-z0-9_])GEMM_RS_[A-Z0-9_]+")
PRIVATE = re.compile(r"(?<![A-Za-z0-9])_GEMM_RS_[A-Z0-9_]+")


def _tracked_text_files() -> list[Path]:
    names = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True,
                           text=True, check=True).stdout.split()
    out = []
    for n in names:
        p = REPO / n
        if p.suffix in (".py", ".sh", ".yml", ".md", ".toml") or p.parent.name == "ci" and p.suffix == "":
            if p.is_file() and "evidence" not in p.parts:
                out.append(p)
    return out


def test_every_gemm_rs_variable_in_the_code_is_a_declared_setting_or_private_plumbing():
    declared = {s.env for s in config.SETTINGS} | {e for s in config.SETTINGS for e in s.env_aliases}
    declared |= set(config.SETUP_EXPORTS)
    private = {v for k, v in vars(config).items() if k.endswith("_ENV") and isinstance(v, str)}
    private.add("_GEMM_RS_TEST_FLAKY_DIR")  # tests/engine: a planted flaky implementation's marker folder
    private |= {"_GEMM_RS_TEST_NEVER_LOADS", "_GEMM_RS_TEST_EXIT_ON_NODE",  # tests/engine/never_loads.py
                "_GEMM_RS_TEST_SPARE_ONLY"}  # tests/engine: a variable only a warm spare was started with
    unknown_public, unknown_private = set(), set()
    for path in _tracked_text_files():
        text = path.read_text(errors="replace")
        unknown_public |= {(m, path.name) for m in PUBLIC.findall(text) if m not in declared}
        unknown_private |= {(m, path.name) for m in PRIVATE.findall(text) if m not in private}
    assert not unknown_public, f"GEMM_RS_ variables that are not settings of fuzz/config.py: {sorted(unknown_public)}"
    assert not unknown_private, f"undeclared private plumbing variables: {sorted(unknown_private)}"
    assert all(p.startswith(config.PRIVATE_PREFIX) for p in private)


def test_a_flag_wins_over_the_environment_which_wins_over_the_default():
    env = {"GEMM_RS_WORLD_SIZES": "2,4", "GEMM_RS_TOPOLOGIES": "cpu", "GEMM_RS_CASE_DEADLINE": "7"}
    cfg = config.resolve({"world_sizes": "8"}, environ=env)
    assert cfg.csv("world_sizes") == ["8"] and cfg.sources["world_sizes"] == "flag"
    assert cfg.topology == "cpu" and cfg.sources["topology"] == "env"  # the old variable still counts
    assert cfg.number("case_deadline") == 7.0
    assert cfg.nnodes == "1" and cfg.sources["nnodes"] == "default"
    assert cfg.exports() == {"GEMM_RS_WORLD_SIZES": "8", "GEMM_RS_TOPOLOGY": "cpu", "GEMM_RS_CASE_DEADLINE": "7"}
    with pytest.raises(ValueError, match="--nnodes must be an integer"):
        config.resolve({"nnodes": "two"}, environ={}).integer("nnodes")


def test_old_flag_spellings_still_work_and_are_hidden_from_help():
    ap = argparse.ArgumentParser()
    config.add_to_parser(ap, "ci/gate")
    args = ap.parse_args(["--impls", "a,b", "--world-size", "2", "--out", "r"])
    assert (args.impl, args.world_sizes, args.report_dir) == ("a,b", "2", "r")
    assert "--impls" not in ap.format_help() and "--world-size " not in ap.format_help()


def _help(main) -> str:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    return out.getvalue()


def test_every_tool_lists_the_same_flag_names(pytestconfig):
    from fuzz import campaign, differential, repro, sanitize
    from mutants import meta

    helps = {"ci/gate": _help(campaign.main), "fuzz.repro": _help(repro.main),
             "fuzz.differential": _help(differential.main), "mutants.meta": _help(meta.main),
             "fuzz.sanitize": _help(sanitize.main)}
    old = [a for s in config.SETTINGS for a in s.aliases]
    for tool, text in helps.items():
        listed = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", text))
        for name in config.COMMON[tool]:
            assert config.BY_NAME[name].option in listed, f"{tool} --help lacks {config.BY_NAME[name].option}"
        assert not listed & set(old), f"{tool} --help shows old spellings {listed & set(old)}"
        assert set(config.EVERYWHERE) <= set(config.COMMON[tool])
    for name in config.COMMON["pytest fuzz/"]:  # pytest's own parser resolves the flag to its setting
        assert pytestconfig.getoption(config.BY_NAME[name].option) == pytestconfig.getoption(name)
    assert set(config.EVERYWHERE) <= set(config.COMMON["pytest fuzz/"])


def test_readme_configuration_table_is_the_modules():
    readme = (REPO / "README.md").read_text()
    m = re.search(r"<!-- configuration table: python -m fuzz.config -->\n(.*?)\n<!-- end -->", readme, re.S)
    assert m, "README.md lacks the configuration table markers"
    assert m.group(1).strip() == config.markdown_table().strip(), \
        "README's Configuration table drifted from fuzz/config.py: paste the output of python -m fuzz.config"


def test_kill_sessions_use_no_example_database(monkeypatch, tmp_path):
    """The kill matrix is independent of what earlier runs stored: every kill session runs without one."""
    from mutants import meta

    seen = {}

    class Stop(Exception):
        pass

    def fake_popen(cmd, env, **kw):
        seen.update(env)
        raise Stop

    monkeypatch.setenv("GEMM_RS_HYPOTHESIS_DB", str(tmp_path))
    monkeypatch.setattr(meta.subprocess, "Popen", fake_popen)
    with pytest.raises(Stop):
        meta.run_session(meta.targets(["unfused"]), 0)
    assert seen["GEMM_RS_HYPOTHESIS_DB"] == "none"
