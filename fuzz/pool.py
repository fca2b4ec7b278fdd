"""A long-lived pool of W rank processes started with ``torchrun``, reused across cases: its lifecycle.

The driver (a pytest process, or ``fuzz.repro``) listens on the control address (loopback by default,
:mod:`fuzz.network`); each rank connects, says hello and receives cases as JSON (:mod:`fuzz.channel`).
:meth:`RankPool.run` sends one case to every rank and collects every rank's result; :mod:`fuzz.verdict`
turns them into a status, :mod:`fuzz.render` into text. Ranks send their result as soon as their checks are
done — before any cross-rank collective — so a rank's exception reaches the driver even when it leaves its
peers blocked.

Liveness (CONTRACT.md: nothing hangs):

* deadline passed   -> HANG: every rank's stacks (the stack signal: faulthandler dumps all threads) go into the
  report, the pool is killed;
* a rank dies       -> DIED: its socket closes or torchrun exits; reported with torchrun's account of the
  rank and its exit code and the log tails; the driver never waits on a dead rank;
* a rank raised, or a check of its failed -> the others get :data:`fuzz.verdict.GRACE_S` to report (they may be
  blocked in a collective it left), then every rank's stacks are taken and the pool is killed;
* any case that is not PASSED or SKIPPED kills the pool, so the next case starts on a fresh one (a
  sticky CUDA error or a half-finished collective never leaks into the next example or the shrinking);
* ``close()`` / interpreter exit kill torchrun and the ranks; ranks also die with torchrun
  (PR_SET_PDEATHSIG) and with the driver (a watchdog thread polls its pid).

Signals reach only processes that are provably this pool's (fuzz/node.py): each rank is pinned by a pidfd
opened at hello time, after checking that it descends from its node's torchrun.

Across hosts (``PoolSpec.nnodes`` > 1): one torchrun agent per host, joined by torchrun's c10d rendezvous
(hosted by the driver's host); every other host runs :mod:`fuzz.node_agent`, which dials the control
channel and acts for the driver there — launches that host's torchrun, pins its ranks, collects their
stacks and logs, kills them. Liveness holds across hosts: a rank stuck on another host is a HANG with the
stacks of every rank of every host, a rank dying there a DIED (its channel closes, or that host's torchrun
exits and its agent says so), and a killed pool leaves nothing on any host.
"""

from __future__ import annotations

import atexit
import itertools
import os
import selectors
import socket
import tempfile
import time
import uuid

from . import native_stacks, verdict, warm_agent
from .case import Case, PoolSpec
from .channel import Channel, ChannelClosed
from .config import DRIVER_ENV, DRIVER_PID_ENV, IMPL_ENV, LOGDIR_ENV, NODE_ENV, current
from .network import PoolNetwork
from .node import STACKS_WAIT_S, LocalNode, PoolError, first_failure, killpg_while_alive, torchrun_command
from .node_agent import RemoteNode
from .report import CaseReport
from .status import Status
from .topology import MULTICAST_OFF, rank_env

__all__ = ["RankPool", "PoolError", "first_failure", "killpg_while_alive", "DEFAULT_DEADLINE", "START_TIMEOUT",
           "STACKS_WAIT_S"]

DEFAULT_DEADLINE = current().number("case_deadline")
#: Seconds a pool (all its nodes) gets to start.
START_TIMEOUT = 180.0
#: Threads per rank (torch intra-op): ranks share the host's cores.
RANK_THREADS = "1"
#: Cases of a pool's history a failing report keeps (and a confirmation replays first).
HISTORY_CASES = 32
#: Seconds node agents get to answer the driver (a kill waits for ranks to be gone; a diagnosis for stacks).
AGENT_REPLY_S = 20.0


def rank_process_env(spec: PoolSpec, gpus: list[int] | None, extra_env: dict[str, str],
                     driver: str) -> tuple[dict[str, str], tuple[str, ...]]:
    """What the environment of a pool's ranks (and its torchrun agent) adds to this host's, and what it drops.
    ``extra_env`` may add any variable but none that turns multicast back on (CONTRACT.md: forbidden on these
    hosts): that raises ValueError rather than start ranks that could create a multicast object."""
    on = {k: v for k, v in extra_env.items() if k in MULTICAST_OFF and v != MULTICAST_OFF[k]}
    if on:
        raise ValueError(f"a pool's ranks run with multicast off ({MULTICAST_OFF}); extra_env asks for {on}")
    add = rank_env(spec.topology, gpus)
    add.update(extra_env)
    add.update({DRIVER_ENV: driver, IMPL_ENV: spec.impl, "OMP_NUM_THREADS": RANK_THREADS, "PYTHONUNBUFFERED": "1"})
    if spec.optimize:
        add["PYTHONOPTIMIZE"] = str(spec.optimize)
        return add, ()
    return add, ("PYTHONOPTIMIZE",)


def agent_env(add: dict[str, str], unset: tuple[str, ...]) -> dict[str, str]:
    """This host's environment less ``unset``, plus ``add``, with the repository first on ``PYTHONPATH``: a local
    torchrun agent's."""
    env = {k: v for k, v in os.environ.items() if k not in unset}
    env.update(add)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_REPO, env.get("PYTHONPATH", "")) if p)
    return env


def warm_agents_wanted() -> bool:
    """Pools start their agents from spares (``GEMM_RS_WARM_AGENTS``, default on: fuzz/warm_agent.py)."""
    return current().warm_agents != "0"


def prepare_agent(optimize: int) -> None:
    """Start a spare torchrun agent now for the first pool this process will start with ranks at ``optimize``
    (fuzz/warm_agent.py): it imports torch while this process does other things (an xdist worker collecting)."""
    if not warm_agents_wanted():
        return
    spec = PoolSpec(impl="unfused", topology="cpu", world_size=1, optimize=optimize)
    warm_agent.spawn(agent_env(*rank_process_env(spec, None, {}, "")), _REPO)


class RankPool:
    def __init__(self, spec: PoolSpec, *, gpus: list[int] | None = None, logdir: str | None = None,
                 extra_env: dict[str, str] | None = None, network: PoolNetwork | None = None):
        self.spec = spec
        self.gpus = gpus
        self.extra_env = dict(extra_env or {})
        self.network = network or PoolNetwork.from_config()
        self.logdir = logdir or tempfile.mkdtemp(prefix=f"gemm-rs-pool-W{spec.world_size}-")
        self.native_stacks = native_stacks.wanted(current().native_stacks, spec.topology)
        self.local = LocalNode(0, self.logdir, sanitizer=bool(spec.sanitizer), native_stacks=self.native_stacks,
                               warm=spec.nnodes == 1 and warm_agents_wanted())
        self.agents: list[RemoteNode] = []  # the other hosts' node agents (nnodes - 1 of them)
        self.chans: dict[int, Channel] = {}
        self.hello: dict[int, dict] = {}
        self.starts = 0
        self.startups: list[str] = []  # where each start's time went (startup_line)
        self.cases_since_start = 0
        self.history: list[Case] = []  # the cases run since the pool started (the last HISTORY_CASES)
        self._server: socket.socket | None = None  # kept while the pool lives when it spans nodes
        self._ids = itertools.count()
        atexit.register(self.close)

    # lifecycle ------------------------------------------------------------------------------
    @property
    def proc(self):
        """This host's torchrun (a Popen), while running."""
        return self.local.proc

    @property
    def last_pids(self) -> dict[int, int]:
        out = dict(self.local.last_pids)
        for a in self.agents:
            out.update(a.last_pids)
        return out

    @property
    def nodes(self) -> list:
        return [self.local, *self.agents]

    @property
    def alive(self) -> bool:
        return (len(self.chans) == self.spec.world_size and not any(n.exited() for n in self.nodes))

    def rank_pids(self) -> dict[int, int]:
        """Every rank's pid (on its own host)."""
        out = self.local.rank_pids()
        for a in self.agents:
            out.update(a.pids)
        return out

    def node_of(self, rank: int) -> int:
        return int(self.hello.get(rank, {}).get("node", 0))

    def start(self) -> None:
        if self.alive:
            return
        self.kill()
        nnodes, world = self.spec.nnodes, self.spec.world_size
        if nnodes < 1 or world % nnodes:
            raise PoolError(f"W={world} does not split evenly over {nnodes} nodes (torchrun starts the same "
                            f"number of ranks on every node)")
        deadline = time.monotonic() + START_TIMEOUT
        launched = time.time()
        server = self._server or self.network.listen(nnodes, world + nnodes)
        if nnodes > 1:
            self._server = server
        port = server.getsockname()[1]
        driver = f"{self.network.dial_host()}:{port}"
        pending: list[Channel] = []
        try:
            if nnodes > 1:
                self._await_agents(server, deadline, driver)
            add, unset = self._rank_env(driver)
            nproc, rdzv, run_id = world // nnodes, None, None
            if nnodes > 1:
                rdzv, run_id = self.network.rendezvous(), f"gemm-rs-{os.getpid()}-{uuid.uuid4().hex[:8]}"
            env = agent_env(add, unset)
            env.update({LOGDIR_ENV: self.logdir, DRIVER_PID_ENV: str(os.getpid()), NODE_ENV: "0"})
            cmd = torchrun_command(sanitizer=self.spec.sanitizer, logdir=self.logdir, nproc=nproc, nnodes=nnodes,
                                   rdzv_endpoint=rdzv, run_id=run_id, hosts_rdzv=True)
            self.local.launch(cmd, env, _REPO)
            remote_env = dict(add, **rank_env(self.spec.topology, None))  # other hosts: their own GPUs
            for i, agent in enumerate(self.agents, 1):
                agent.launch(i, {"env": remote_env, "unset": list(unset), "nproc": nproc, "nnodes": nnodes,
                                 "rdzv_endpoint": rdzv, "run_id": run_id, "sanitizer": self.spec.sanitizer,
                                 "native_stacks": self.native_stacks})
            server.settimeout(1.0)
            hellos: dict[int, tuple[Channel, dict]] = {}
            while len(hellos) < world:
                if time.monotonic() > deadline:
                    raise PoolError(f"pool did not start within {START_TIMEOUT:.0f}s\n{self._tails()}")
                gone = [n for n in self.nodes if n.exited()]
                if gone:
                    raise PoolError(f"{self._exited(gone)} while starting\n{self._tails()}")
                try:
                    conn, _ = server.accept()
                except TimeoutError:
                    continue
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                ch = Channel(conn)
                pending.append(ch)
                hello = ch.recv(timeout=max(1.0, deadline - time.monotonic()))
                if hello.get("type") != "hello":  # e.g. one node agent too many
                    pending.remove(ch)
                    ch.close()
                    continue
                hellos[hello["rank"]] = (ch, hello)
            for r, (ch, hello) in sorted(hellos.items()):
                self.chans[r], self.hello[r] = ch, hello
            by_node: dict[int, dict[int, int]] = {}
            for r, hello in self.hello.items():
                by_node.setdefault(self.node_of(r), {})[r] = hello["pid"]
            self.local.pin(by_node.pop(0, {}))
            for agent in self.agents:
                agent.pin(by_node.pop(agent.index, {}))
            if by_node:
                raise PoolError(f"ranks said hello from unknown nodes {sorted(by_node)}")
        except BaseException:
            for ch in pending:
                ch.close()
            self.chans = {}
            self.kill()
            raise
        finally:
            if nnodes == 1:
                server.close()
        self.starts += 1
        self.cases_since_start = 0
        self.history = []
        self.startups.append(startup_line(self.spec.world_size, launched, time.time(), self.hello))
        with open(os.path.join(self.logdir, "startup.txt"), "w") as f:  # the log folder holds the latest start
            f.write(self.startups[-1] + "\n")

    def _await_agents(self, server: socket.socket, deadline: float, driver: str) -> None:
        """Until nnodes - 1 node agents are connected (those that went away are dropped)."""
        for a in [a for a in self.agents if a.exited() and a.gone]:
            self.agents.remove(a)
        server.settimeout(1.0)
        while len(self.agents) < self.spec.nnodes - 1:
            if time.monotonic() > deadline:
                raise PoolError(f"{len(self.agents)} of {self.spec.nnodes - 1} node agent(s) dialled in within "
                                f"{START_TIMEOUT:.0f}s; on every other host run: python -m fuzz.node_agent "
                                f"--driver {driver}")
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            ch = Channel(conn)
            try:
                hello = ch.recv(timeout=10)
            except (OSError, ValueError):
                ch.close()
                continue
            if hello.get("type") != "node-hello":
                ch.close()
                continue
            self.agents.append(RemoteNode(ch, hello))

    def _rank_env(self, driver: str) -> tuple[dict[str, str], tuple[str, ...]]:
        """What every rank's environment adds to its host's, and what it drops."""
        return rank_process_env(self.spec, self.gpus, self.extra_env, driver)

    def close(self, grace_s: float = 10.0) -> None:
        """Stop politely (ranks exit their loop, ``grace_s`` to do it), then make sure nothing is left on
        any node; node agents are let go (they dial again for the next pool)."""
        if self.proc is not None and self.proc.poll() is None:
            for ch in self.chans.values():
                try:
                    ch.send({"type": "stop"})
                except OSError:
                    pass
            self.local.wait(grace_s)
        self.kill()
        for a in self.agents:
            a.close()
        self.agents = []
        if self._server is not None:
            self._server.close()
            self._server = None

    def kill(self) -> None:
        """Every rank of every node killed and gone (fuzz/node.py: LocalNode.kill, here and in each node
        agent). Nothing in a pool is worth a graceful exit, except under a sanitizer."""
        for ch in self.chans.values():
            ch.close()
        self.chans = {}
        asked = [(a, a.send({"type": "kill"})) for a in self.agents if a.gone is None]
        self.local.kill()
        for a, rid in asked:
            answer = a.reply(rid, AGENT_REPLY_S)
            if answer is None:  # an agent that does not answer kills its node when we hang up on it
                a.close()
            else:
                a.last_pids = {int(r): p for r, p in answer.get("pids", {}).items()} or a.last_pids
            a.pids = {}
        self.agents = [a for a in self.agents if a.gone is None]
        self.hello = {}

    # cases ---------------------------------------------------------------------------------
    def run(self, case: Case, deadline: float | None = None, *, fresh: bool = False,
            replay: list[Case] | None = None) -> CaseReport:
        """Run ``case`` on every rank and judge it. ``fresh``: on a pool that has run no case yet (a
        re-run that must not inherit anything); ``replay``: on a fresh pool that first runs these cases (the
        history of the pool a failure happened on, :attr:`CaseReport.history`). A failing report carries the
        pool's own history (the last :data:`HISTORY_CASES` cases since it started)."""
        deadline = DEFAULT_DEADLINE if deadline is None else deadline
        if (fresh or replay) and self.cases_since_start:
            self.kill()
        if replay:
            for i, earlier in enumerate(replay, 1):
                before = self.run(earlier, deadline)
                if not before.status.ok:
                    before.note = (f"replaying the failing pool's history: earlier case {i} of {len(replay)} did "
                                   f"not pass\n{before.note}")
                    return before
        if not self.alive:
            self.start()
        history = list(self.history)
        self.cases_since_start += 1
        case_id = next(self._ids)
        t0 = time.perf_counter()
        self.local.mark()
        for a in self.agents:
            a.send({"type": "mark"})
        results, liveness, note, dead = self._exchange(case, case_id, deadline)
        status, why = verdict.judge(results, self.spec.world_size, liveness)
        report = CaseReport(case=case, spec=self.spec, status=status, ranks=results,
                            note="\n".join(p for p in (note, why) if p))
        report.seconds = time.perf_counter() - t0
        self.history = (self.history + [case])[-HISTORY_CASES:]
        if not status.ok:
            report.history = history
            report.note = "\n".join(p for p in (report.note, mps_note(self.hello)) if p)
            stacks = liveness is not None or set(results) != set(self.hello)  # where is everyone who did not answer
            notes = dead if liveness == Status.DIED else set()
            report_stacks, report.logs, exit_notes = self._diagnose(stacks, notes)
            if stacks:
                report.stacks = report_stacks
            if exit_notes:
                report.note += "\n" + exit_notes
            self.kill()
        return report

    def _exchange(self, case: Case, case_id: int, deadline: float
                  ) -> tuple[dict[int, dict], Status | None, str, set[int]]:
        """Send the case, collect results: (rank -> result, HANG / DIED / None, what happened, the nodes
        where a rank died)."""
        results: dict[int, dict] = {}
        sel = selectors.DefaultSelector()
        try:
            for r, ch in self.chans.items():
                ch.send({"type": "case", "id": case_id, "case": case.to_json()})
                sel.register(ch.sock, selectors.EVENT_READ, r)
            waiting = set(self.chans)
            end = time.monotonic() + deadline
            grace: list = []  # [end of the grace period, the rank, why] once a rank's result made it a failure

            def take() -> None:
                for r in sorted(waiting):
                    msg = self._result(r, case_id)
                    if msg is not None:
                        results[r] = msg
                        waiting.discard(r)
                        why = None if grace else verdict.settles_failure(msg)
                        if why:
                            grace.extend((time.monotonic() + verdict.GRACE_S, r, why))

            while True:
                take()
                if not waiting:
                    return results, None, "", set()
                now = time.monotonic()
                if grace and now >= grace[0]:
                    return results, None, (
                        f"rank(s) {sorted(waiting)} gave no result within {verdict.GRACE_S:g}s after rank {grace[1]} "
                        f"{grace[2]} (blocked in a collective with it?); stacks of every rank follow, the pool was "
                        f"killed"
                    ), set()
                if now >= end:
                    return results, Status.HANG, (
                        f"no result from rank(s) {sorted(waiting)} within the {deadline:.0f}s case deadline; "
                        f"stacks of every rank follow, the pool was killed"), set()
                closed = []
                for key, _ in sel.select(timeout=min(0.2, min(end, grace[0] if grace else end) - now)):
                    try:
                        self.chans[key.data].fill()
                    except ChannelClosed:
                        closed.append(key.data)
                        sel.unregister(key.fileobj)  # at EOF for good: never select it again
                take()  # a result sent just before its channel closed still counts
                dead = sorted(set(closed) & waiting)
                if dead:
                    return results, Status.DIED, f"rank(s) {dead} closed their channel mid-case (died)", \
                        {self.node_of(r) for r in dead}
                gone = [i for i, n in enumerate(self.nodes) if n.exited()]
                if gone and waiting:
                    return results, Status.DIED, (f"{self._exited([self.nodes[i] for i in gone])} mid-case; no "
                                                  f"result from rank(s) {sorted(waiting)}"), set(gone)
        except OSError as exc:
            return results, Status.DIED, f"channel error: {exc}", {0}
        finally:
            sel.close()

    def _result(self, r: int, case_id: int) -> dict | None:
        """The result of case ``case_id`` from rank ``r`` if a whole line of it has arrived."""
        ch = self.chans[r]
        while ch.has_line():
            msg = ch.recv(timeout=1)
            if msg.get("type") == "result" and msg.get("id") == case_id:
                return msg
        return None

    # diagnostics ------------------------------------------------------------------------------
    def _diagnose(self, stacks: bool, exit_notes: set[int]) -> tuple[dict[int, str], dict[int, str], str]:
        """Every node's part at once: (rank -> stacks, rank -> log tail, torchrun's account of a death on
        the nodes ``exit_notes``). Node agents are asked first and answer while this host collects its own."""
        if self.spec.nnodes == 1:
            exit_notes = exit_notes and {0}
        asked = [(a, a.send({"type": "diagnose", "stacks": stacks, "exit_note": a.index in exit_notes}))
                 for a in self.agents if a.gone is None]
        out_stacks = self.local.read_stacks(self.local.ask_stacks()) if stacks else {}
        logs = self.local.logs()
        notes = [self.local.exit_note()] if 0 in exit_notes else []
        wait = AGENT_REPLY_S + (native_stacks.NATIVE_WAIT_S if stacks and self.native_stacks else 0.0)
        for a, rid in asked:
            answer = a.reply(rid, wait)
            if answer is None:
                missing = f"(no answer from {a}: {a.gone or 'timed out'})"
                out_stacks.update({r: missing for r in a.pids} if stacks else {})
                continue
            out_stacks.update({int(r): t for r, t in answer.get("stacks", {}).items()})
            logs.update({int(r): t for r, t in answer.get("logs", {}).items()})
            if answer.get("exit_note"):
                notes.append(answer["exit_note"])
        for a in self.agents:
            if a.gone and a.index in exit_notes:
                notes.append(a.gone)
        return dict(sorted(out_stacks.items())), dict(sorted(logs.items())), "\n".join(notes)

    def _exited(self, nodes: list) -> str:
        return "; ".join("torchrun exited" if n is self.local else n.what_happened() for n in nodes)

    def _tails(self) -> str:
        parts = [self.local.tails()]
        for a in self.agents:
            answer = a.request({"type": "tails"}, AGENT_REPLY_S) if a.gone is None else None
            parts.append(answer["text"] if answer else f"(no log tails from {a}: {a.gone or 'no answer'})")
        return "\n".join(parts)


_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


#: The start-up stages a rank stamps (fuzz/rank_worker.py), in order.
STARTUP_STAGES = ("main", "torch", "impl", "device", "group")


def mps_note(hellos: dict[int, dict]) -> str:
    """What a failing case's report says when ranks were MPS clients (their hello's ``mps``,
    :func:`kernel.checks.mps_client`), else nothing: under MPS the ranks' kernels share SMs instead of
    time-slicing the GPU, a fault or a trap in any client ends every client of the server (a correct case beside
    it dies), and heavy sharing was seen to make torch's own ``mm`` -- the oracle -- write zeros (one H200,
    docs/evidence/2026-12-04-mps-gate/). The failure stands (the gate cannot tell whose it is); this says to
    re-run it without MPS before it is blamed on the implementation."""
    clients = sorted(r for r, hello in hellos.items() if hello.get("mps"))
    if not clients:
        return ""
    return (f"ranks {clients} ran as MPS clients: a fault in any client of the MPS server ends every client, and "
            f"clients share SMs -- re-run the REPRO with no MPS control daemon serving the GPU before "
            f"blaming the implementation")


def startup_line(world_size: int, launched: float, done: float, hellos: dict[int, dict]) -> str:
    """Where a pool's start went, one line (:attr:`RankPool.startups`, the latest in the log folder's
    ``startup.txt``): the seconds from the launch to the slowest rank's arrival at each stage (``main``: the rank's
    interpreter reached its code; ``torch`` imported; the implementation loaded; the ``device`` set; the process
    ``group`` joined), and to the pool's being ready."""
    parts = []
    for stage in STARTUP_STAGES:
        times = [h.get("stamps", {}).get(stage) for h in hellos.values()]
        times = [t for t in times if t is not None]
        if times:
            parts.append(f"{stage} {max(times) - launched:.2f}")
    return f"W={world_size} started in {done - launched:.2f} s: " + ", ".join(parts) + f" (launched at {launched:.1f})"
