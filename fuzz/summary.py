"""Summarise a campaign directory: cases per (implementation, topology, W, property), failures, the
worst error against its budget, skipped checks with reasons, failures with their REPRO lines.

Writes ``summary.json`` and ``summary.md`` next to the case records and returns the summary dict
(``verdict`` is PASS only when pytest passed and no recorded case failed).
"""

from __future__ import annotations

import glob
import json
import os
import platform
import sys
from collections import defaultdict


def load_cases(out_dir: str) -> list[dict]:
    rows = []
    for path in sorted(glob.glob(os.path.join(out_dir, "cases-*.jsonl"))):
        with open(path) as f:
            rows += [json.loads(line) for line in f if line.strip()]
    return rows


def environment() -> dict:
    env = {"python": platform.python_version(), "platform": platform.platform()}
    try:
        import torch

        env["torch"] = torch.__version__
        if torch.cuda.is_available():
            env["gpu"] = torch.cuda.get_device_name(0)
            env["gpus"] = torch.cuda.device_count()
            env["cuda"] = torch.version.cuda
    except Exception as exc:  # noqa: BLE001
        env["torch"] = f"unavailable: {exc}"
    try:
        from importlib.metadata import version

        env["nvidia-cutlass-dsl"] = version("nvidia-cutlass-dsl")
    except Exception:  # noqa: BLE001
        env["nvidia-cutlass-dsl"] = "not installed"
    return env


def summarise(out_dir: str, *, pytest_rc: int, seconds: float, profile: str) -> dict:
    cases = load_cases(out_dir)
    table: dict[tuple, dict] = defaultdict(lambda: {"cases": 0, "failures": 0, "worst_over_budget": 0.0})
    skipped: dict[str, int] = defaultdict(int)
    failures = []
    for row in cases:
        key_base = (row["impl"], row["topology"], row["world_size"])
        seen = set()
        for c in row["checks"]:
            if c.get("skipped"):
                skipped[f"{c['name']}: {c['detail']}"] += 1
                continue
            cell = table[key_base + (c["name"],)]
            if c["name"] not in seen:
                cell["cases"] += 1
                seen.add(c["name"])
            if not c["passed"]:
                cell["failures"] += 1
            ratio = c.get("extra", {}).get("max_error_over_budget")
            if isinstance(ratio, (int, float)):
                cell["worst_over_budget"] = max(cell["worst_over_budget"], ratio)
        if row["status"] not in ("passed", "skipped"):
            failures.append({"status": row["status"], "test": row["test"], "case": row["case"], "repro": row["repro"],
                             "note": row["note"]})
        if row["status"] in ("hang", "died", "error"):
            cell = table[key_base + (row["status"],)]
            cell["cases"] += 1
            cell["failures"] += 1
    n_failed = len(failures)
    env = environment()
    env["optimize_driver"] = sorted({row.get("driver_optimize") for row in cases}) or [sys.flags.optimize]
    env["optimize_ranks"] = sorted({v for row in cases for v in row.get("rank_optimize", {}).values()})
    verdict = "PASS" if pytest_rc == 0 and n_failed == 0 and cases else "FAIL"
    rows = [
        {"impl": k[0], "topology": k[1], "world_size": k[2], "property": k[3], **v}
        for k, v in sorted(table.items(), key=lambda kv: tuple(str(x) for x in kv[0]))
    ]
    summary = {
        "schema": "gemm-rs-gate-summary/1",
        "verdict": verdict,
        "profile": profile,
        "pytest_exit_code": pytest_rc,
        "seconds": round(seconds, 1),
        "cases": len(cases),
        "failed_cases": n_failed,
        "environment": env,
        "properties": rows,
        "skipped": [{"reason": k, "count": v} for k, v in sorted(skipped.items())],
        "failures": failures,
    }
    from .plot import plot_coverage

    why_not = plot_coverage(cases, os.path.join(out_dir, "coverage.png"))
    summary["coverage_plot"] = "coverage.png" if why_not is None else None
    if why_not:
        summary["skipped"].append({"reason": f"coverage plot: {why_not}", "count": 1})
    summary["markdown"] = render_markdown(summary)
    with open(os.path.join(out_dir, "summary.json"), "w") as f:
        json.dump({k: v for k, v in summary.items() if k != "markdown"}, f, indent=2, allow_nan=True)
    with open(os.path.join(out_dir, "summary.md"), "w") as f:
        f.write(summary["markdown"])
    return summary


def render_markdown(s: dict) -> str:
    env = s["environment"]
    lines = [
        f"# GEMM-RS gate: {s['verdict']}",
        "",
        f"{s['cases']} cases, {s['failed_cases']} failed, {s['seconds']} s, profile `{s['profile']}`, "
        f"pytest exit {s['pytest_exit_code']}. "
        + ", ".join(f"{k} {v}" for k, v in env.items()),
        "",
        "| impl | topology | W | property | cases | failures | worst error / budget |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in s["properties"]:
        ratio = f"{r['worst_over_budget']:.3f}" if r["worst_over_budget"] else "-"
        lines.append(f"| {r['impl']} | {r['topology']} | {r['world_size']} | {r['property']} | {r['cases']} | "
                     f"{r['failures']} | {ratio} |")
    if s["skipped"]:
        lines += ["", "Skipped (never counted as passed):", ""]
        lines += [f"- {x['count']} x {x['reason']}" for x in s["skipped"]]
    if s["failures"]:
        lines += ["", "Failures:", ""]
        for f in s["failures"][:50]:
            lines.append(f"- {f['status']} in {f['test']}: `{f['repro']}`")
    if s.get("coverage_plot"):
        lines += ["", f"![coverage]({s['coverage_plot']})"]
    lines.append("")
    lines.append(f"VERDICT: {s['verdict']}")
    return "\n".join(lines) + "\n"
