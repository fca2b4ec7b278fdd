"""Multi-process plumbing for the foundation tests: run one function on W gloo ranks, collect every
rank's verdict, fail with all ranks' messages.

Not a test module, so no ``assert`` here (``python -O`` would remove it): every check raises.

Model (pytorch ``common_distributed.py``, jax ``test_multiprocess.py``):

* the parent hosts the rendezvous ``TCPStore`` on port 0 (the OS picks a free port, no race with
  other pytest workers), then starts W subprocesses ``python _dist.py ...``, one log file each;
* rank r loads the worker function by *file path* (no module-name clash with other test folders),
  joins the gloo group, calls ``fn(rank, world_size, **params)`` and writes its verdict as JSON:
  ``fn`` returns a list of failure messages (empty: pass); an exception is a failure with its traceback;
* the parent waits up to ``timeout`` seconds for all; a rank still running is asked for its stack
  (``SIGUSR1`` -> faulthandler into its log), then SIGTERM, then SIGKILL. Any failed, crashed or hung
  rank raises :class:`RankFailure` whose message holds every rank's verdict and log tail.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
FAILED_PEER_GRACE_S = 15.0


class RankFailure(AssertionError):
    """One or more ranks failed, crashed or hung. The message has every rank's report."""


def run_ranks(
    worker: str | os.PathLike,
    func: str,
    world_size: int,
    params: dict | None = None,
    *,
    timeout: float = 120.0,
    grace: float = FAILED_PEER_GRACE_S,
) -> list[dict]:
    """Run ``func`` from file ``worker`` on ``world_size`` gloo ranks; return the per-rank verdicts
    (``{"rank", "ok", "failures", "info"}``) or raise :class:`RankFailure`. Once a rank has failed, the
    others get ``grace`` more seconds before they count as hung."""
    import torch.distributed as dist

    params = params or {}
    store = dist.TCPStore("127.0.0.1", 0, world_size=None, is_master=True, wait_for_workers=False)
    with tempfile.TemporaryDirectory(prefix="foundation_ranks_") as tmp:
        tmp = Path(tmp)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        env.setdefault("OMP_NUM_THREADS", "1")
        procs, logs = [], []
        for rank in range(world_size):
            log = open(tmp / f"rank{rank}.log", "w+b")  # noqa: SIM115 — closed below
            logs.append(log)
            cmd = [
                sys.executable,
                __file__,
                str(worker),
                func,
                str(rank),
                str(world_size),
                str(store.port),
                json.dumps(params),
                str(tmp / f"rank{rank}.json"),
                str(timeout),
            ]
            procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO_ROOT))
        deadline = time.monotonic() + timeout
        while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
            if any(p.poll() not in (None, 0) for p in procs):
                # a rank failed: its peers may wait in a collective it never joins; give them a grace period
                deadline = min(deadline, time.monotonic() + grace)
            time.sleep(0.05)
        hung = [rank for rank, p in enumerate(procs) if p.poll() is None]
        for rank in hung:  # stacks first, then stop them
            _signal(procs[rank], signal.SIGUSR1)
        if hung:
            time.sleep(1.0)
        for rank in hung:
            _signal(procs[rank], signal.SIGTERM)
        for rank in hung:
            try:
                procs[rank].wait(timeout=5)
            except subprocess.TimeoutExpired:
                procs[rank].kill()
                procs[rank].wait()
        verdicts, report, failed = [], [], False
        for rank, (p, log) in enumerate(zip(procs, logs)):
            log.seek(0)
            text = log.read().decode(errors="replace")
            log.close()
            path = tmp / f"rank{rank}.json"
            verdict = json.loads(path.read_text()) if path.exists() else None
            if rank in hung:
                state = "HUNG: still running at the deadline (killed; stacks in its log tail)"
            elif verdict is None:
                state = f"CRASHED (exit code {p.returncode}, no verdict)"
            elif not verdict["ok"]:
                state = "FAILED"
            elif p.returncode != 0:
                state = f"exit code {p.returncode} after a passing verdict"
            else:
                state = "ok"
            if state != "ok":
                failed = True
                lines = [f"--- rank {rank}/{world_size}: {state}"]
                if verdict is not None:
                    lines += verdict["failures"]
                tail = text[-3000:].strip()
                if tail:
                    lines.append(f"log tail:\n{tail}")
                report.append("\n".join(lines))
            else:
                report.append(f"--- rank {rank}/{world_size}: ok")
            verdicts.append(verdict)
        del store
    if failed:
        raise RankFailure(f"{func} on W={world_size} {params}:\n" + "\n".join(report))
    return verdicts


def _signal(p: subprocess.Popen, sig) -> None:
    if p.poll() is None:
        try:
            p.send_signal(sig)
        except ProcessLookupError:
            pass


def _rank_main(argv: list[str]) -> int:
    worker, func, rank, world_size, port, params, result_path, timeout = argv
    rank, world_size, port, timeout = int(rank), int(world_size), int(port), float(timeout)
    import faulthandler
    import importlib.util
    import traceback
    from datetime import timedelta

    faulthandler.enable()
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    verdict = {"rank": rank, "ok": False, "failures": [], "info": None}
    try:
        import torch
        import torch.distributed as dist

        torch.set_num_threads(1)
        spec = importlib.util.spec_from_file_location(f"_rank_worker_{Path(worker).stem}", worker)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        fn = getattr(module, func)
        store = dist.TCPStore(
            "127.0.0.1", port, world_size=None, is_master=False, timeout=timedelta(seconds=timeout)
        )
        dist.init_process_group(
            "gloo", store=store, rank=rank, world_size=world_size, timeout=timedelta(seconds=timeout)
        )
        try:
            out = fn(rank, world_size, **json.loads(params))
        finally:
            dist.destroy_process_group()
        if isinstance(out, tuple):
            failures, info = out
        else:
            failures, info = out, None
        verdict.update(ok=not failures, failures=[str(f) for f in failures], info=info)
    except Exception:  # noqa: BLE001 — reported to the parent as this rank's failure
        verdict["failures"] = [f"exception on rank {rank}:\n{traceback.format_exc()}"]
    Path(result_path).write_text(json.dumps(verdict))
    return 0 if verdict["ok"] else 1


if __name__ == "__main__":
    sys.exit(_rank_main(sys.argv[1:]))
