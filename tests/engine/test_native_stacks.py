"""The native stacks of stuck ranks (fuzz/native_stacks.py) without a pool: every thread of every rank asked for, the
dump of all ranks bounded by one timeout together (a debugger that hangs is killed, the rank still named), /proc's
view where the debugger said nothing, and the setting's every spelling."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time

import pytest

from fuzz import native_stacks


def test_the_setting_reads_1_and_0_as_on_and_off_on_every_topology():
    for topology in ("cpu", "shared-gpu", "multi-gpu"):
        assert native_stacks.wanted("1", topology) and native_stacks.wanted(" ON ", topology)
        assert not native_stacks.wanted("0", topology) and not native_stacks.wanted("off", topology)


@pytest.fixture
def sleeper():
    """A process with two threads, both asleep in C (a rank stuck in a collective, its watchdog thread beside it)."""
    child = subprocess.Popen([sys.executable, "-c",
                              "import threading, time\n"
                              "threading.Thread(target=time.sleep, args=(120,), daemon=True).start()\n"
                              "print('ready', flush=True)\n"
                              "time.sleep(120)\n"], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        yield child.pid
    finally:
        child.kill()
        child.wait()


@pytest.mark.skipif(shutil.which("gdb") is None, reason="needs gdb (the first tool fuzz.native_stacks uses)")
def test_gdb_gives_the_frames_of_every_thread_each_under_its_header(sleeper):
    text = native_stacks.dump({3: sleeper}, timeout=30)[3]
    headers = [ln for ln in text.splitlines() if ln.startswith("Thread ")]
    assert len(headers) == 2, text  # both threads, not only the one gdb stopped in
    for block in text.split("\nThread ")[1:]:
        assert any(ln.startswith("#0 ") for ln in block.splitlines()), text
    assert "clock_nanosleep" in text or "nanosleep" in text, text


def test_a_debugger_past_the_timeout_is_killed_and_every_rank_shares_one_timeout(monkeypatch, sleeper):
    monkeypatch.setattr(native_stacks, "_command", lambda pid: ["sleep", "30"])
    t0 = time.monotonic()
    out = native_stacks.dump({r: sleeper for r in range(6)}, timeout=0.5)
    took = time.monotonic() - t0
    assert took < 2.0, took  # not 6 x 0.5 s (one timeout per rank), nor the debugger's 30 s
    assert sorted(out) == [0, 1, 2, 3, 4, 5]
    for text in out.values():
        assert "(sleep did not finish within" in text, text
        # the rank still gets /proc's view of every thread, named for why
        assert f"pid {sleeper}: 2 threads (sleep did not finish: /proc's view)" in text and "wchan" in text, text


def test_a_debugger_that_prints_no_stack_leaves_the_ranks_proc_view(monkeypatch, sleeper):
    monkeypatch.setattr(native_stacks, "_command", lambda pid: ["true"])
    (text,) = native_stacks.dump({1: sleeper}).values()
    assert "(true printed no stack)" in text and f"pid {sleeper}: 2 threads" in text and "wchan" in text, text
    assert "no gdb or py-spy on this host" not in text, text  # the tool was there: /proc's view says why it is used


def test_a_host_with_no_debugger_gives_proc_s_view_and_says_so(monkeypatch, sleeper):
    monkeypatch.setattr(native_stacks, "_command", lambda pid: None)
    (text,) = native_stacks.dump({2: sleeper}).values()
    assert text.startswith(f"pid {sleeper}: 2 threads (no gdb or py-spy on this host: /proc's view)"), text
