"""Summarise a campaign directory: each implementation's path mix (which path its calls ran, legitimate
fallbacks with their reasons), cases per (implementation, topology, W, property), failures, the worst
error against its budget, skipped checks with reasons, failures with their REPRO lines and whether
they reproduced.

Writes ``summary.json`` and ``summary.md`` next to the case records and returns the summary dict
(``verdict`` is PASS only when pytest passed, no recorded case failed and every implementation in the
records had at least one case checked and passed; schema in docs/REPORT.md).
"""

from __future__ import annotations

import glob
import json
import os
import platform
import re
import sys
from collections import Counter, defaultdict

from .expected_checks import expected_checks
from .phases import PHASES, harness_seconds
from .status import Reproducibility, Status


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


def junit_failures(out_dir: str) -> list[dict]:
    """Tests pytest reported failed or in error, from junit.xml: ``{test, kind, message}`` (the message's
    first line). A test that fails before any case runs (an implementation the host cannot run, a
    collection error) has no case record, so this is where the report learns why."""
    import xml.etree.ElementTree as ET

    path = os.path.join(out_dir, "junit.xml")
    if not os.path.exists(path):
        return []
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError:
        return [{"test": "junit.xml", "kind": "error", "message": "junit.xml unreadable"}]
    out = []
    for case in root.iter("testcase"):
        for kind in ("failure", "error"):
            for el in case.findall(kind):
                text = (el.get("message") or el.text or "").strip()
                first = text.splitlines()[0] if text else ""
                out.append({"test": case.get("name", "?"), "kind": kind, "message": first})
    return out


def path_mix(cases: list[dict]) -> list[dict]:
    """Per implementation: which path its calls ran (``path_taken`` checks, every rank's every call),
    legitimate fallbacks by reason, and calls whose path was not the one the contract says serves them; and which
    paths the calls of cases under an engine's tensor defaults (``Case.defaults``) ran: a path none of them reached
    was never built or run there (the 30th session's unfused staging bug hid on such a path)."""
    by: dict[str, dict] = {}
    for row in cases:
        mix = by.setdefault(row["impl"], {"calls": 0, "paths": Counter(), "fallbacks": Counter(), "unexpected": 0,
                                          "cases_without_path": 0, "engine_defaults": Counter()})
        calls = [c for per_rank in row.get("paths", {}).values() for c in per_rank]
        if not calls and Status(row["status"]) == Status.PASSED:
            mix["cases_without_path"] += 1
        engine = (row.get("case") or {}).get("defaults") == "engine"
        for c in calls:
            mix["calls"] += 1
            mix["paths"][str(c.get("path"))] += 1
            if engine:
                mix["engine_defaults"][str(c.get("path"))] += 1
            if c.get("path") != c.get("expected"):
                mix["unexpected"] += 1
            elif c.get("reason"):
                mix["fallbacks"][f"{c.get('path')}: {_generic(c['reason'])}"] += 1
    return [{"impl": impl, "calls": m["calls"], "paths": dict(m["paths"].most_common()),
             "fallbacks": [{"reason": r, "count": n} for r, n in m["fallbacks"].most_common()],
             "unexpected": m["unexpected"], "cases_without_path": m["cases_without_path"],
             "engine_defaults": dict(m["engine_defaults"].most_common())}
            for impl, m in sorted(by.items())]


def render_path_mix(m: dict) -> str:
    """``fused: 100% fused path`` / ``fused: 87% fused path, 13% unfused (legitimate fallback: ...)``."""
    if not m["calls"]:
        return f"{m['impl']}: no call recorded its path"
    fallback_paths = {r["reason"].split(":", 1)[0] for r in m["fallbacks"]}
    parts = []
    for path, n in m["paths"].items():
        pct = f"{100.0 * n / m['calls']:.0f}%"
        if path in fallback_paths:
            why = "; ".join(f"{r['count']} x {r['reason'].split(': ', 1)[1]}" for r in m["fallbacks"]
                            if r["reason"].startswith(f"{path}: "))
            parts.append(f"{pct} {path} (legitimate fallback: {why})")
        else:
            parts.append(f"{pct} {path} path")
    text = f"{m['impl']}: " + ", ".join(parts) + f" ({m['calls']} calls)"
    if m["unexpected"]:
        text += f"; {m['unexpected']} call(s) ran a path the contract says does not serve them (path_taken failed)"
    if m["cases_without_path"]:
        text += f"; {m['cases_without_path']} passed case(s) recorded no path"
    engine = m.get("engine_defaults") or {}
    if engine:
        text += "; in cases under an engine's tensor defaults: " + ", ".join(f"{n} {p}" for p, n in engine.items())
        never = [p for p in m["paths"] if p not in engine]
        if never:
            text += f" (never the {', '.join(never)} path there)"
    return text


def confirmed_failures(cases: list[dict]) -> list[dict]:
    """Failing cases, one per (test, case): the last record wins, so a failure that was re-run on a fresh
    pool shows its label (reproducible / flaky) and the REPRO line that reproduced it."""
    last: dict[tuple, dict] = {}
    for row in cases:
        if not Status(row["status"]).ok:
            last[(row["test"], json.dumps(row["case"], sort_keys=True), row["impl"], row["topology"],
                  row["world_size"])] = row
    return [{"status": r["status"], "reproducibility": r.get("reproducibility"), "rerun_status": r.get("rerun_status"),
             "test": r["test"], "case": r["case"], "repro": r["repro"], "note": r["note"], "why": failure_reason(r),
             "seconds": r.get("seconds")}
            for r in last.values()]


_DIED = re.compile(r"rank (\d+) died mid-case")
_NOISE = re.compile(r"^\s*$|warn|^\s*(File |Traceback)|^frame #\d+: ", re.IGNORECASE)
#: The advice torch appends to every CUDA error (``c10/cuda/CUDAException``): it would push the error itself out
#: of the last lines (seen on an H200: "rank 6 said: [rank6]: CUDA kernel errors might be asynchronously
#: reported ... | For debugging consider passing CUDA_LAUNCH_BLOCKING=1 | Compile with `TORCH_USE_CUDA_DSA` ...").
_CUDA_ADVICE = re.compile(r"CUDA kernel errors might be asynchronously reported|consider passing CUDA_LAUNCH_BLOCKING"
                          r"|Compile with `TORCH_USE_CUDA_DSA`|^\s*Search for `cuda\w+' in https://docs\.nvidia\.com")
#: Where a rank's error ends and its call trail begins (fuzz/families/calls.py: ``CaseCalls.trail_text``).
_TRAIL = "calls this rank began in the case"
_RANK_PREFIX = re.compile(r"^\[rank\d+\]:\s?")


def last_words(log: str, lines: int = 3) -> str:
    """The last lines a dead rank wrote (its log tail, blank and warning lines left out): where a C++ abort
    (``terminate called after throwing ...``, a CUDA error) says why the process died; torch's advice after a CUDA
    error left out too."""
    bare = (_RANK_PREFIX.sub("", ln) for ln in log.splitlines())  # torchrun's "[rank6]: " on each line
    kept = [ln.strip() for ln in bare if not _NOISE.search(ln) and not _CUDA_ADVICE.search(ln)]
    return " | ".join(kept[-lines:])


def failure_reason(row: dict, limit: int = 400) -> str:
    """What failed, in one line: the first failed check's name and detail (rank), else the case's note
    (a hang, a death, a harness error)."""
    for c in row.get("checks", []):
        if c.get("passed") is False and not c.get("skipped"):
            rank = f" (rank {c['rank']})" if c.get("rank") is not None else ""
            text = f"{c.get('name')}{rank}: {c.get('detail') or ''}"
            break
    else:
        text = (row.get("note") or "").strip()
        where = {r: stuck_at(t) for r, t in (row.get("stacks") or {}).items()}
        if where:
            ordered = sorted(where.items(), key=lambda kv: int(kv[0]))
            text += "; stuck at: " + ", ".join(f"rank {r} {w}" for r, w in ordered)
        for r in _DIED.findall(text):
            last = last_words((row.get("logs") or {}).get(r, ""))
            if last:
                text = f"rank {r} said: {last}; " + text
        raised = raised_by_ranks(row.get("errors") or {})
        if raised:
            text = f"{raised}; " + text
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def raised_by_ranks(errors: dict) -> str:
    """What the ranks' errors (rank -> the text a rank sent: traceback, then its call trail) raised, in one line:
    each distinct exception line with the ranks that raised it (``ranks [0, 1, 2] raised: torch.AcceleratorError:
    CUDA error: unspecified launch failure``), torch's CUDA advice and the trails left out."""
    by_line: dict[str, list[int]] = {}
    for r, text in sorted(errors.items(), key=lambda kv: int(kv[0])):
        line = last_words((text or "").split(_TRAIL, 1)[0], lines=1)
        if line:
            by_line.setdefault(line, []).append(int(r))
    return "; ".join(f"rank{'s' if len(rs) > 1 else ''} {rs if len(rs) > 1 else rs[0]} raised: {line}"
                     for line, rs in by_line.items())


_FRAME = re.compile(r'File "([^"]+)", line (\d+) in (\S+)')


def stuck_at(stacks: str) -> str:
    """The innermost Python frame of the rank's main thread (the thread whose stack reaches ``<module>``; else
    the first one faulthandler printed), as ``func (file:line)``; ``?`` when the rank wrote no stack."""
    blocks: list[list[re.Match]] = []
    for ln in stacks.splitlines():
        if ln.startswith(("Thread ", "Current thread ")):
            blocks.append([])
        m = _FRAME.search(ln)
        if m and blocks:
            blocks[-1].append(m)
    blocks = [b for b in blocks if b]
    if not blocks:
        return "?"
    main = next((b for b in blocks if any(m.group(3) in ("<module>", "_run_module_as_main") for m in b)), blocks[0])
    m = main[0]
    return f"{m.group(3)} ({os.path.basename(m.group(1))}:{m.group(2)})"


def load_case_files(out_dir: str) -> list[list[dict]]:
    """The case records of each ``cases-<worker>.jsonl``, in the order the worker wrote them."""
    out = []
    for path in sorted(glob.glob(os.path.join(out_dir, "cases-*.jsonl"))):
        with open(path) as f:
            out.append([json.loads(line) for line in f if line.strip()])
    return out


#: What ``failures.jsonl`` keeps of the case recorded before a failure (see :func:`failure_records`).
PREVIOUS_KEYS = ("test", "case", "status", "seconds", "repro")


def failure_records(case_files: list[list[dict]]) -> list[dict]:
    """Every case record that did not pass, whole (rank logs, stacks, errors), each with ``previous_case``: the
    case recorded before it on the same worker for the same (implementation, topology, W) -- the pool's previous
    case unless the pool was restarted in between -- or None. A fault that work of one case leaves behind can
    surface in the next one (the 12th session's H200 run: a rank died between two cases); the report keeps both
    in a file small enough to keep as a CI artifact where the whole ``cases-*.jsonl`` is not."""
    out = []
    for rows in case_files:
        before: dict[tuple, dict] = {}
        for row in rows:
            key = (row.get("impl"), row.get("topology"), row.get("world_size"))
            if not Status(row["status"]).ok:
                prev = before.get(key)
                out.append({**row, "previous_case": None if prev is None else {k: prev.get(k) for k in PREVIOUS_KEYS}})
            before[key] = row
    return out


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
    case_files = load_case_files(out_dir)
    cases = [row for rows in case_files for row in rows]
    table: dict[tuple, dict] = defaultdict(lambda: {"cases": 0, "failures": 0, "worst_over_budget": 0.0})
    skipped: dict[str, int] = defaultdict(int)
    for row in cases:
        if row.get("reproducibility") == Reproducibility.FLAKY:
            continue  # a copy of the failure recorded when it happened (the re-run passed): counted once
        key_base = (row["impl"], row["topology"], row["world_size"])
        seen, failed = set(), set()  # a property counts a case once, made or failed on however many ranks and calls
        for c in row["checks"]:
            if c.get("skipped"):
                skipped[f"{c['name']}: {_generic(c['detail'])}"] += 1
                continue
            cell = table[key_base + (c["name"],)]
            if c["name"] not in seen:
                cell["cases"] += 1
                seen.add(c["name"])
            if not c["passed"] and c["name"] not in failed:
                cell["failures"] += 1
                failed.add(c["name"])
            ratio = c.get("extra", {}).get("max_error_over_budget")
            if isinstance(ratio, (int, float)):
                cell["worst_over_budget"] = max(cell["worst_over_budget"], ratio)
        status = Status(row["status"])
        if status in (Status.HANG, Status.DIED, Status.ERROR):
            cell = table[key_base + (str(status),)]
            cell["cases"] += 1
            cell["failures"] += 1
    for reason, count in junit_skips(out_dir).items():
        skipped[reason] += count
    failures = confirmed_failures(cases)
    n_failed = len(failures)
    paths = path_mix(cases)
    passed_by_impl = Counter(row["impl"] for row in cases if Status(row["status"]) == Status.PASSED)
    unchecked = sorted({row["impl"] for row in cases} - set(passed_by_impl))
    failing_tests = {row["test"].split("::")[-1] for row in cases if not Status(row["status"]).ok}
    test_failures = [f for f in junit_failures(out_dir) if f["test"] not in failing_tests]
    env = environment()
    env["optimize_driver"] = sorted({row.get("driver_optimize") for row in cases}) or [sys.flags.optimize]
    env["optimize_ranks"] = sorted({v for row in cases for v in row.get("rank_optimize", {}).values()})
    mps = {v for row in cases for v in row.get("rank_mps", {}).values() if v is not None}  # GPU ranks only
    if mps:
        env["mps_ranks"] = sorted(mps)
    verdict = "PASS" if (pytest_rc == 0 and n_failed == 0 and cases and not interrupted and not unchecked
                         and not test_failures) else "FAIL"
    rows = [
        {"impl": k[0], "topology": k[1], "world_size": k[2], "property": k[3], **v}
        for k, v in sorted(table.items(), key=lambda kv: tuple(str(x) for x in kv[0]))
    ]
    summary = {
        "schema": "gemm-rs-gate-summary/2",
        "timing": timing(cases),
        "verdict": verdict,
        "profile": profile,
        "pytest_exit_code": pytest_rc,
        "interrupted": interrupted,
        "seconds": round(seconds, 1),
        "cases": len(cases),
        "failed_cases": n_failed,
        "environment": env,
        "paths": paths,
        "unchecked_implementations": unchecked,
        "properties": rows,
        "unmade": unmade_checks(cases),
        "skipped": [{"reason": k, "count": v} for k, v in sorted(skipped.items())],
        "failures": failures,
        "test_failures": test_failures,
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
    with open(os.path.join(out_dir, "failures.jsonl"), "w") as f:
        f.writelines(json.dumps(row) + "\n" for row in failure_records(case_files))
    return summary


def unmade_checks(cases: list[dict]) -> list[dict]:
    """Per (implementation, topology) of the run: the checks of :func:`fuzz.expected_checks.expected_checks` that no
    case made (a check that never ran passes nothing), each ``skipped`` -- every case that came to it skipped it, the
    reasons in the skipped list -- or ``not reached`` -- no case even came to it (a family the run did not draw or
    select, a world size too small for it, or a harness that stopped making it). Information, not the verdict: which
    checks a run reaches depends on what it draws and selects."""
    made: dict[tuple, set] = defaultdict(set)
    skipped: dict[tuple, set] = defaultdict(set)
    for row in cases:
        if row.get("reproducibility") == Reproducibility.FLAKY:
            continue
        key = (row["impl"], row["topology"])
        for c in row.get("checks", []):
            (skipped if c.get("skipped") else made)[key].add(c["name"])
    out = []
    for key in sorted({(r["impl"], r["topology"]) for r in cases}):  # (a flaky copy's pair has its failing row too)
        missing = sorted(expected_checks(key[1]) - made[key])
        if missing:
            out.append({"impl": key[0], "topology": key[1],
                        "skipped": [n for n in missing if n in skipped[key]],
                        "not_reached": [n for n in missing if n not in skipped[key]]})
    return out


def timing(cases: list[dict]) -> list[dict]:
    """Time per case per (impl, topology, W): the cost a campaign pays, and where a slow path hides."""
    by: dict[tuple, list[float]] = defaultdict(list)
    spent: dict[tuple, dict[str, float]] = defaultdict(lambda: dict.fromkeys(PHASES + ("harness",), 0.0))
    for row in cases:
        if isinstance(row.get("seconds"), (int, float)) and row.get("reproducibility") != Reproducibility.FLAKY:
            key = (row["impl"], row["topology"], row["world_size"])
            by[key].append(float(row["seconds"]))
            ph = row.get("phases") or {}
            for name in PHASES:
                spent[key][name] += float(ph.get(name, 0.0))
            spent[key]["harness"] += harness_seconds(float(row["seconds"]), ph)
    out = []
    for key, secs in sorted(by.items(), key=lambda kv: tuple(str(x) for x in kv[0])):
        impl, topo, w = key
        secs.sort()
        out.append({"impl": impl, "topology": topo, "world_size": w, "cases": len(secs),
                    "median_s": round(secs[len(secs) // 2], 3), "p95_s": round(secs[min(len(secs) - 1,
                    int(0.95 * len(secs)))], 3), "max_s": round(secs[-1], 3), "total_s": round(sum(secs), 1),
                    "phases_s": {k: round(v, 1) for k, v in spent[key].items()}})
    return out


def render_phases(phases_s: dict[str, float]) -> str:
    """``construct 41%, calls 22%, ...``: the share of each phase in a row's case time, largest first."""
    total = sum(phases_s.values())
    if total <= 0:
        return "-"
    parts = sorted(phases_s.items(), key=lambda kv: -kv[1])
    return ", ".join(f"{k} {100 * v / total:.0f}%" for k, v in parts if v / total >= 0.005)


#: The summary's line where ranks of the run were MPS clients (``environment.mps_ranks``; fuzz.pool.mps_note).
MPS_WARNING = ("**Ranks ran as MPS clients** (`mps_ranks`): their kernels shared SMs instead of time-slicing the GPU, "
               "and a fault in any client ends every client of the MPS server -- a failure below may be another "
               "case's; re-run it with no MPS daemon serving the GPU before blaming the implementation.")


def render_markdown(s: dict) -> str:
    env = s["environment"]
    lines = [
        f"# GEMM-RS gate: {s['verdict']}",
        "",
        f"{s['cases']} cases, {s['failed_cases']} failed, {s['seconds']} s, profile `{s['profile']}`, "
        f"pytest exit {s['pytest_exit_code']}"
        + (f", INTERRUPTED: {s['interrupted']}" if s.get("interrupted") else "") + ". "
        + ", ".join(f"{k} {v}" for k, v in env.items()),
        *(["", MPS_WARNING] if True in env.get("mps_ranks", ()) else []),
        "",
        "Paths:",
        "",
        *[f"- {render_path_mix(m)}" for m in s.get("paths", [])],
        *[f"- {impl}: NOTHING CHECKED (no case passed: every case skipped or failed)"
          for impl in s.get("unchecked_implementations", [])],
        "",
        "| impl | topology | W | property | cases | failures | worst error / budget |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in s["properties"]:
        ratio = f"{r['worst_over_budget']:.3f}" if r["worst_over_budget"] else "-"
        lines.append(f"| {r['impl']} | {r['topology']} | {r['world_size']} | {r['property']} | {r['cases']} | "
                     f"{r['failures']} | {ratio} |")
    if s.get("timing"):
        lines += ["", "| impl | topology | W | cases | median s/case | p95 s/case | max s | total s | where the time "
                  "went (slowest rank; docs/REPORT.md) |",
                  "|---|---|---|---|---|---|---|---|---|"]
        lines += [f"| {t['impl']} | {t['topology']} | {t['world_size']} | {t['cases']} | {t['median_s']} | "
                  f"{t['p95_s']} | {t['max_s']} | {t['total_s']} | {render_phases(t.get('phases_s') or {})} |"
                  for t in s["timing"]]
    if s.get("unmade"):
        lines += ["", "Checks no case made (each passes nothing in this run; `fuzz/expected_checks.py`):", ""]
        for u in s["unmade"]:
            parts = ([f"skipped wherever reached ({', '.join(u['skipped'])})"] if u["skipped"] else []) + \
                ([f"NOT REACHED by any case ({', '.join(u['not_reached'])})"] if u["not_reached"] else [])
            lines.append(f"- {u['impl']} on {u['topology']}: " + "; ".join(parts))
    if s["skipped"]:
        lines += ["", "Skipped (never counted as passed):", ""]
        lines += [f"- {x['count']} x {x['reason']}" for x in s["skipped"]]
    if s.get("test_failures"):
        lines += ["", "Tests that failed without a failing case (the reason is pytest's):", ""]
        lines += [f"- {f['kind']} in {f['test']}: {f['message']}" for f in s["test_failures"][:50]]
    if s["failures"]:
        lines += ["", "Failures (one per case; re-run once on a fresh pool where labelled; whole records, with the "
                      "case each pool ran before, in `failures.jsonl`):", ""]
        for f in s["failures"][:50]:
            label = f" ({f['reproducibility']}, re-run {f['rerun_status']})" if f.get("reproducibility") else ""
            # how long the case ran: a CUDA error after the kernels' spin timeout (kernel/fused/config.py,
            # SPIN_TIMEOUT_S) is a peer that never arrived, one after a second is not
            took = f" after {f['seconds']:.1f} s" if isinstance(f.get("seconds"), (int, float)) else ""
            lines.append(f"- {f['status']}{label}{took} in {f['test']}: `{f['repro']}`")
            if f.get("why"):
                lines.append(f"  - why: {f['why']}")
    if s.get("coverage_plot"):
        lines += ["", f"![coverage]({s['coverage_plot']})"]
    lines.append("")
    lines.append(f"VERDICT: {s['verdict']}")
    return "\n".join(lines) + "\n"
