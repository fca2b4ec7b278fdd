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
import re
import sys
from collections import defaultdict


def _generic(reason: str) -> str:
    """A skip reason without its example's numbers (``M=4097`` -> ``M=<m>``), so one waiver is one line."""
    return re.sub(r"\bM=\d+", "M=<m>", reason)


def junit_skips(out_dir: str) -> dict[str, int]:
    """Whole tests pytest skipped (no case ran, so no case record says so), from junit.xml:
    ``"test <name>: <reason>" -> count`` over the parametrisations."""
    import xml.etree.ElementTree as ET

    path = os.path.join(out_dir, "junit.xml")
    out: dict[str, int] = defaultdict(int)
    if not os.path.exists(path):
        return out
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError:
        out["junit.xml unreadable: skipped tests unknown"] += 1
        return out
    for case in root.iter("testcase"):
        for sk in case.findall("skipped"):
            name = case.get("name", "?").split("[")[0]
            out[f"test {name}: {_generic(sk.get('message', '').strip())}"] += 1
    return out


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


def summarise(out_dir: str, *, pytest_rc: int, seconds: float, profile: str, interrupted: str | None = None) -> dict:
    cases = load_cases(out_dir)
    table: dict[tuple, dict] = defaultdict(lambda: {"cases": 0, "failures": 0, "worst_over_budget": 0.0})
    skipped: dict[str, int] = defaultdict(int)
    failures = []
    for row in cases:
        key_base = (row["impl"], row["topology"], row["world_size"])
        seen = set()
        for c in row["checks"]:
            if c.get("skipped"):
                skipped[f"{c['name']}: {_generic(c['detail'])}"] += 1
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
    for reason, count in junit_skips(out_dir).items():
        skipped[reason] += count
    n_failed = len(failures)
    env = environment()
    env["optimize_driver"] = sorted({row.get("driver_optimize") for row in cases}) or [sys.flags.optimize]
    env["optimize_ranks"] = sorted({v for row in cases for v in row.get("rank_optimize", {}).values()})
    verdict = "PASS" if pytest_rc == 0 and n_failed == 0 and cases and not interrupted else "FAIL"
    rows = [
        {"impl": k[0], "topology": k[1], "world_size": k[2], "property": k[3], **v}
        for k, v in sorted(table.items(), key=lambda kv: tuple(str(x) for x in kv[0]))
    ]
    summary = {
        "schema": "gemm-rs-gate-summary/1",
        "timing": timing(cases),
        "verdict": verdict,
        "profile": profile,
        "pytest_exit_code": pytest_rc,
        "interrupted": interrupted,
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


def timing(cases: list[dict]) -> list[dict]:
    """Time per case per (impl, topology, W): the cost a campaign pays, and where a slow path hides."""
    by: dict[tuple, list[float]] = defaultdict(list)
    for row in cases:
        if isinstance(row.get("seconds"), (int, float)):
            by[(row["impl"], row["topology"], row["world_size"])].append(float(row["seconds"]))
    out = []
    for (impl, topo, w), secs in sorted(by.items(), key=lambda kv: tuple(str(x) for x in kv[0])):
        secs.sort()
        out.append({"impl": impl, "topology": topo, "world_size": w, "cases": len(secs),
                    "median_s": round(secs[len(secs) // 2], 3), "p95_s": round(secs[min(len(secs) - 1,
                    int(0.95 * len(secs)))], 3), "max_s": round(secs[-1], 3), "total_s": round(sum(secs), 1)})
    return out


def render_markdown(s: dict) -> str:
    env = s["environment"]
    lines = [
        f"# GEMM-RS gate: {s['verdict']}",
        "",
        f"{s['cases']} cases, {s['failed_cases']} failed, {s['seconds']} s, profile `{s['profile']}`, "
        f"pytest exit {s['pytest_exit_code']}"
        + (f", INTERRUPTED: {s['interrupted']}" if s.get("interrupted") else "") + ". "
        + ", ".join(f"{k} {v}" for k, v in env.items()),
        "",
        "| impl | topology | W | property | cases | failures | worst error / budget |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in s["properties"]:
        ratio = f"{r['worst_over_budget']:.3f}" if r["worst_over_budget"] else "-"
        lines.append(f"| {r['impl']} | {r['topology']} | {r['world_size']} | {r['property']} | {r['cases']} | "
                     f"{r['failures']} | {ratio} |")
    if s.get("timing"):
        lines += ["", "| impl | topology | W | cases | median s/case | p95 s/case | max s | total s |",
                  "|---|---|---|---|---|---|---|---|"]
        lines += [f"| {t['impl']} | {t['topology']} | {t['world_size']} | {t['cases']} | {t['median_s']} | "
                  f"{t['p95_s']} | {t['max_s']} | {t['total_s']} |" for t in s["timing"]]
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
