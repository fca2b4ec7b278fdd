"""Whether processes outlived what should have ended them: a pid that is gone (or a zombie, which holds nothing), and
a driver script killed with SIGKILL -- no atexit, no close, no ``stop`` -- after which its ranks and torchrun must
end by themselves (they watch the driver's pid)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] == "Z"  # a zombie holds nothing
    except OSError:
        return True


def wait_gone(pids: list[int], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not all(gone(p) for p in pids):
        time.sleep(0.5)
    return all(gone(p) for p in pids)


def kill_the_driver(script: str) -> list[int]:
    """Run ``script`` (it prints ``{"ranks": [...], "launcher": pid}`` once its pool is where the test wants it, then
    sleeps), SIGKILL it, and return the ranks' and the launcher's pids still alive 30 s later (the ranks, SIGKILLed
    whatever happened, so nothing of the test stays)."""
    driver = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": REPO})
    pids: dict = {}
    try:
        pids = json.loads(driver.stdout.readline())
        if any(gone(p) for p in pids["ranks"]):
            raise RuntimeError(f"a rank was gone before the driver was killed: {pids}")
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait(timeout=10)
        everything = pids["ranks"] + [pids["launcher"]]
        wait_gone(everything, 30)
        return [p for p in everything if not gone(p)]
    finally:
        if driver.poll() is None:
            driver.kill()
        for pid in pids.get("ranks", []):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
