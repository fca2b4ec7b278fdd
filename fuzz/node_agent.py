"""A rank pool across hosts: the node agent that acts for the driver on every host but the driver's.

    python -m fuzz.node_agent --driver HOST:PORT [--idle-exit 600]

A pool of ``--nnodes N`` runs one torchrun agent per host (``--nnodes N --rdzv-backend c10d``, the
rendezvous hosted by the driver's host). The driver's host starts its own; on each other host a node agent
dials the driver's control channel (``--control-address``), waits for orders and:

* ``launch``   starts that host's torchrun with the driver's rank environment (and its own log folder);
* ``pin``      pins the ranks that said hello from this host (pidfds, descends-from-torchrun check, as the
               driver does for its own: fuzz/node.py), so that a kill can never reach a reused pid;
* ``mark``     notes where a case's logs and stacks start;
* ``diagnose`` the stack signal to its living ranks, then returns their stacks, log tails and, after a death,
               torchrun's account of it (the driver cannot signal or read another host's processes);
* ``kill``     kills its ranks and torchrun and answers when they are gone;
* ``tails``    log tails, when a start failed.

It tells the driver unprompted when its torchrun exits (a rank died: the case becomes DIED at once). When
the driver's connection closes (the pool was closed, or the driver died), it kills everything it started
and dials again for the next pool; after ``--idle-exit`` seconds without a driver it exits. Its ranks exit
when it does (they watch its pid). The channel trusts whoever listens at ``--driver``: run pools on a
private network.

Requests carry an ``id`` that the reply repeats; :class:`RemoteNode` is the driver's side.
"""

from __future__ import annotations

import argparse
import itertools
import os
import select
import signal
import socket
import sys
import tempfile
import time

from .channel import Channel, ChannelClosed, connect
from .config import DRIVER_PID_ENV, LOGDIR_ENV, NODE_ENV
from .node import LocalNode, PoolError, torchrun_command

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: Seconds between attempts to reach the driver.
DIAL_EVERY_S = 0.5


# --- the driver's side ----------------------------------------------------------------------------------


class RemoteNode:
    """The driver's handle on one node agent (one other host of the pool)."""

    def __init__(self, chan: Channel, hello: dict):
        self.chan, self.host, self.pid = chan, hello.get("host", "?"), hello.get("pid")
        self.index = 0
        self.exit_code: int | None = None
        self.gone: str | None = None  # why the agent is unreachable
        self.pids: dict[int, int] = {}
        self.last_pids: dict[int, int] = {}
        self._replies: dict[int, dict] = {}
        self._ids = itertools.count(1)

    def __repr__(self) -> str:
        return f"node {self.index} ({self.host}, agent pid {self.pid})"

    def _pump(self, timeout: float = 0.0) -> None:
        if self.gone:
            return
        try:
            if select.select([self.chan.sock], [], [], timeout)[0]:
                self.chan.fill()
            while self.chan.has_line():
                msg = self.chan.recv(timeout=1)
                if msg.get("type") == "exited":
                    self.exit_code = msg.get("code")
                elif "id" in msg:
                    self._replies[msg["id"]] = msg
        except (OSError, ValueError) as exc:  # ChannelClosed is an OSError
            self.gone = f"the node agent of {self} went away ({exc})"

    def exited(self) -> bool:
        """Its torchrun exited, or the agent is unreachable."""
        self._pump()
        return self.gone is not None or self.exit_code is not None

    def what_happened(self) -> str:
        return self.gone or f"torchrun on {self} exited with {self.exit_code}"

    def send(self, msg: dict) -> int:
        msg["id"] = next(self._ids)
        if self.gone is None:
            try:
                self.chan.send(msg)
            except OSError as exc:
                self.gone = f"the node agent of {self} went away ({exc})"
        return msg["id"]

    def reply(self, rid: int, timeout: float) -> dict | None:
        end = time.monotonic() + timeout
        while rid not in self._replies and self.gone is None and time.monotonic() < end:
            self._pump(min(0.2, max(0.0, end - time.monotonic())))
        return self._replies.pop(rid, None)

    def request(self, msg: dict, timeout: float) -> dict | None:
        return self.reply(self.send(msg), timeout)

    def launch(self, index: int, order: dict) -> None:
        self.index, self.exit_code, self.pids = index, None, {}
        self.send({"type": "launch", "node": index, **order})

    def pin(self, pids: dict[int, int], timeout: float = 30.0) -> None:
        answer = self.request({"type": "pin", "pids": pids}, timeout)
        if answer is None or answer.get("error"):
            raise PoolError(f"{self} could not pin ranks {sorted(pids)}: "
                            f"{answer.get('error') if answer else self.gone or 'no answer'}")
        self.pids = dict(pids)

    def close(self) -> None:
        self.gone = self.gone or "closed by the driver"
        self.chan.close()


# --- the agent's side -----------------------------------------------------------------------------------


class NodeAgent:
    """Serves one driver connection at a time; see the module docstring."""

    def __init__(self, driver: str):
        self.driver = driver
        self.logdir = tempfile.mkdtemp(prefix="gemm-rs-node-")
        self.node: LocalNode | None = None
        self.killed = True  # nothing running that could exit unannounced

    def serve(self, chan: Channel) -> None:
        chan.send({"type": "node-hello", "host": socket.gethostname(), "pid": os.getpid()})
        try:
            while True:
                if not chan.has_line() and select.select([chan.sock], [], [], 0.2)[0]:
                    chan.fill()
                while chan.has_line():
                    self.handle(chan, chan.recv(timeout=1))
                if self.node is not None and not self.killed and self.node.exited():
                    self.killed = True  # announced once
                    chan.send({"type": "exited", "code": self.node.proc.returncode if self.node.proc else None})
        except (ChannelClosed, OSError):
            pass
        finally:
            self.stop()
            chan.close()

    def handle(self, chan: Channel, msg: dict) -> None:
        kind, node = msg.get("type"), self.node
        if kind == "launch":
            self.launch(msg)
        elif kind == "pin":
            try:
                if node is None:
                    raise PoolError("nothing launched")
                node.pin({int(r): p for r, p in msg["pids"].items()})
                chan.send({"id": msg["id"], "error": None})
            except PoolError as exc:
                chan.send({"id": msg["id"], "error": str(exc)})
        elif kind == "mark" and node is not None:
            node.mark()
        elif kind == "diagnose":
            asked = node.ask_stacks() if node is not None and msg.get("stacks") else []
            chan.send({"id": msg["id"],
                       "stacks": node.read_stacks(asked) if node is not None and msg.get("stacks") else {},
                       "logs": node.logs() if node is not None else {},
                       "exit_note": node.exit_note() if node is not None and msg.get("exit_note") else ""})
        elif kind == "tails":
            chan.send({"id": msg["id"], "text": node.tails() if node is not None else "(nothing launched)"})
        elif kind == "kill":
            self.stop()
            chan.send({"id": msg["id"], "pids": node.last_pids if node is not None else {}})

    def launch(self, msg: dict) -> None:
        self.stop()
        self.node = LocalNode(msg["node"], self.logdir, sanitizer=bool(msg.get("sanitizer")),
                              native_stacks=bool(msg.get("native_stacks")))
        env = dict(os.environ)
        env.update(msg["env"])
        for name in msg.get("unset", ()):
            env.pop(name, None)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (REPO, env.get("PYTHONPATH", "")) if p)
        env.update({LOGDIR_ENV: self.logdir, DRIVER_PID_ENV: str(os.getpid()), NODE_ENV: str(msg["node"])})
        cmd = torchrun_command(sanitizer=msg.get("sanitizer"), logdir=self.logdir, nproc=msg["nproc"],
                               nnodes=msg["nnodes"], rdzv_endpoint=msg["rdzv_endpoint"], run_id=msg["run_id"],
                               hosts_rdzv=False)
        self.node.launch(cmd, env, REPO)
        self.killed = False

    def stop(self) -> None:
        if self.node is not None:
            self.node.kill()
        self.killed = True

    def run(self, idle_exit: float) -> int:
        """Dial the driver, serve it, dial again; exit after ``idle_exit`` seconds without one."""
        idle_since = time.monotonic()
        while time.monotonic() - idle_since < idle_exit:
            try:
                chan = connect(self.driver, timeout=5)
            except OSError:
                time.sleep(DIAL_EVERY_S)
                continue
            chan.sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            self.serve(chan)
            idle_since = time.monotonic()
        return 0


def _stop(signum, frame):
    raise SystemExit(128 + signum)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fuzz.node_agent", description=__doc__.splitlines()[0])
    ap.add_argument("--driver", required=True, help="HOST:PORT of the driver's control channel (its --control-address)")
    ap.add_argument("--idle-exit", type=float, default=600.0, help="exit after this many seconds without a driver")
    args = ap.parse_args(argv)
    agent = NodeAgent(args.driver)
    signal.signal(signal.SIGTERM, _stop)
    try:
        return agent.run(args.idle_exit)
    finally:
        agent.stop()  # SIGTERM, Ctrl-C, exit: nothing of ours outlives us


if __name__ == "__main__":
    sys.exit(main())
