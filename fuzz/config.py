"""Every user setting of the suite, declared once: its flag, its environment variable, its default, what it
does. Flags first; the environment (one prefix, ``GEMM_RS_``, for CI) when a flag is not given; then the
default. Read once per process (:func:`current`); a command-line tool installs its flags (:func:`install`),
which also exports them, so the processes it starts (pytest sessions, ranks) read the same values.

    python -m fuzz.config            # the table below, as README's "Configuration" section shows it

The same flag spells the same thing in every tool (``ci/gate``, ``pytest fuzz/``, ``fuzz.repro``,
``fuzz.differential``, ``mutants.meta``, ``fuzz.sanitize``): :data:`COMMON` names the flags each takes; old spellings
(``--impls``, ``--world-size``, ``--out``, ``--only``) still work and are hidden from ``--help``.

Variables that start with ``_GEMM_RS_`` are not settings: they carry plumbing from a driver to the processes
it starts (the control address, a rank's log folder, a kill session's test order) and change with every
start. Variables ``ci/setup.sh`` exports (``GEMM_RS_PY``, ``GEMM_RS_ROOT``) are results of the set-up, not
settings either.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from dataclasses import dataclass

ENV_PREFIX = "GEMM_RS_"
#: Driver -> child plumbing (never a setting): control address, log folder, node index, ...
PRIVATE_PREFIX = "_GEMM_RS_"
#: Exported by ci/setup.sh for the caller's shell: results of the set-up, not settings.
SETUP_EXPORTS = ("GEMM_RS_PY", "GEMM_RS_ROOT")


@dataclass(frozen=True)
class Setting:
    name: str                      # attribute of a Config; the flag is --name-with-dashes
    default: str | None
    doc: str
    values: str = ""               # what a value looks like (the table's "values" column)
    flag: bool = True              # False: environment only (read where no Python CLI runs first)
    aliases: tuple[str, ...] = ()  # deprecated flag spellings, still accepted, hidden from --help
    env_aliases: tuple[str, ...] = ()

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.upper()

    @property
    def option(self) -> str | None:
        return "--" + self.name.replace("_", "-") if self.flag else None


SETTINGS: tuple[Setting, ...] = (
    Setting("impl", None, "implementations to gate: registered names or module:Class", "comma list",
            aliases=("--impls", "--only")),
    Setting("world_sizes", None, "world sizes W (default: 1,2,3,4,8 on cpu; 1,2,4,8,16 on a GPU; where its "
            "memory does not hold 16 ranks (an 80 GB card) each W = 16 test is a skip that says so in the summary; "
            "multiples of --nnodes across nodes)", "comma list", aliases=("--world-size",)),
    Setting("topology", None, "where ranks run: cpu, shared-gpu, multi-gpu (default: all the host supports)",
            "comma list", env_aliases=("GEMM_RS_TOPOLOGIES",)),
    Setting("profile", "ci", "how hard to look: smoke (4 examples per test), ci (derandomized), nightly "
            "(random, many examples, the example database)", "smoke|ci|nightly"),
    Setting("report_dir", None, "where reports go (ci/gate: reports/<UTC stamp>; pytest: case records only "
            "when set)", "folder", aliases=("--out",)),
    Setting("examples", None, "examples per gate test, overriding the profile's", "integer"),
    Setting("hypothesis_db", None, "Hypothesis example database (default <repo>/.hypothesis/examples); "
            "none: off", "folder|none"),
    Setting("case_deadline", "120", "seconds a case may take before it is a HANG with every rank's stacks",
            "seconds"),
    Setting("jobs", "auto", "parallel pytest workers (pytest-xdist -n)", "integer|auto"),
    Setting("pools_per_gpu", None, "rank pools time-slicing one GPU at once (default: a quarter of the cores, "
            "1 to 4)", "integer"),
    Setting("nnodes", "1", "hosts (torchrun agents) a rank pool spans; the others run fuzz.node_agent",
            "integer"),
    Setting("control_address", "127.0.0.1", "where the driver's control channel listens; ranks and node "
            "agents connect to it (a wildcard host: they dial this host's name). Across hosts: a routable "
            "address and a port (default port 29510 when --nnodes > 1)", "host[:port]"),
    Setting("rdzv_endpoint", None, "torchrun's c10d rendezvous across nodes, hosted by the driver's node "
            "(default: the control host, a free port)", "host:port"),
    Setting("gpu_lock_dir", None, "folder of the GPU lease lock files (default: one per host in the temp "
            "dir)", "folder", flag=False),
    Setting("kernel_cache_dir", None, "host-wide cache of compiled kernels (the gate's GPU rank pools: "
            "~/.cache/gemm-rs/kernels by default; a library process: off unless set); none: off", "folder",
            flag=False),
    Setting("native_stacks", "auto", "a HANG's report also has every stuck rank's native (C/C++) stacks, by gdb, "
            "py-spy or /proc (fuzz/native_stacks.py); auto: on GPU topologies", "auto|on|off", flag=False),
    Setting("byte_boundaries", "0", "run the GPU byte-boundary family (workspace and output crossing 2^31 and "
            "2^32 bytes) outside the nightly profile", "0|1", flag=False),
    Setting("profile_ranks", None, "a folder: rank 0 of every pool writes cProfile statistics of its cases there "
            "(first case alone, then all the others; `python -m pstats`): where a case's time goes", "folder",
            flag=False),
    Setting("warm_agents", "1", "a pool's torchrun agent is a spare started ahead, with torch imported "
            "(fuzz/warm_agent.py: 1-2.5 s less per GPU pool start); 0: a new process each time", "0|1", flag=False),
    Setting("system_python", "0", "ci/setup.sh uses the python3 on PATH instead of a .venv (GPU hosts without "
            "network)", "0|1", flag=False),
)
BY_NAME = {s.name: s for s in SETTINGS}

#: The flags each command-line tool takes (every tool spells them the same way).
COMMON = {
    "ci/gate": ("impl", "world_sizes", "topology", "profile", "report_dir", "examples", "hypothesis_db",
                "case_deadline", "jobs", "pools_per_gpu", "nnodes", "control_address", "rdzv_endpoint"),
    "pytest fuzz/": ("impl", "world_sizes", "topology", "nnodes", "control_address", "rdzv_endpoint"),
    "fuzz.repro": ("impl", "world_sizes", "topology", "case_deadline", "nnodes", "control_address",
                   "rdzv_endpoint"),
    "fuzz.differential": ("impl", "world_sizes", "topology", "profile", "case_deadline", "nnodes",
                          "control_address", "rdzv_endpoint"),
    "mutants.meta": ("impl", "world_sizes", "profile", "report_dir", "jobs", "case_deadline"),
    "fuzz.sanitize": ("impl", "world_sizes", "topology", "case_deadline"),
}
#: The flags every tool takes.
EVERYWHERE = ("impl", "world_sizes")
#: The private plumbing variables (see the module docstring): what a rank or a node agent is told.
DRIVER_ENV = "_GEMM_RS_DRIVER"          # host:port of the driver's control channel
DRIVER_PID_ENV = "_GEMM_RS_DRIVER_PID"  # ranks exit when this process (driver or node agent) is gone
LOGDIR_ENV = "_GEMM_RS_LOGDIR"          # a rank's log and stack files
IMPL_ENV = "_GEMM_RS_IMPL"              # the implementation a rank loads
TOPOLOGY_ENV = "_GEMM_RS_TOPOLOGY"      # the topology a rank runs on
NODE_ENV = "_GEMM_RS_NODE"              # the node (torchrun agent) a rank belongs to
KILL_ORDER_ENV = "_GEMM_RS_KILL_ORDER"  # mutants.meta -> mutants.stop_at_first_failure

#: The signal that asks a rank for its stacks (faulthandler, fuzz/rank_worker.py): a real-time signal, since
#: libraries a rank loads may take SIGUSR1 for themselves (in fused-kernel ranks on an H200 SIGUSR1 stopped
#: reaching faulthandler once the CuTe DSL runtime had launched a kernel; unfused ranks still answered).
STACK_SIGNAL = signal.SIGRTMIN + 4

#: Default port of the control channel when a pool spans nodes (node agents must know where to dial).
MULTI_NODE_CONTROL_PORT = 29510


class Config:
    """The resolved settings: attribute per setting (a string or None) and where each came from."""

    def __init__(self, values: dict[str, str | None], sources: dict[str, str]):
        self._values, self.sources = values, sources

    def __getattr__(self, name: str):
        try:
            return self.__dict__["_values"][name]
        except KeyError:
            raise AttributeError(name) from None

    def csv(self, name: str) -> list[str] | None:
        value = self._values[name]
        return [v.strip() for v in value.split(",") if v.strip()] if value else None

    def integer(self, name: str) -> int | None:
        value = self._values[name]
        if value in (None, ""):
            return None
        try:
            return int(value)
        except ValueError:
            raise ValueError(f"{BY_NAME[name].option or BY_NAME[name].env} must be an integer, not {value!r}") \
                from None

    def number(self, name: str) -> float:
        try:
            return float(self._values[name])
        except (TypeError, ValueError):
            raise ValueError(f"{BY_NAME[name].option} must be a number, not {self._values[name]!r}") from None

    def exports(self) -> dict[str, str]:
        """The environment that gives a child process these same settings (values that are not defaults)."""
        return {BY_NAME[n].env: v for n, v in self._values.items() if v is not None and self.sources[n] != "default"}


def resolve(flags: dict[str, str | None] | None = None, environ=None) -> Config:
    """Flags over environment over defaults. ``flags``: setting name -> the flag's value (None: not given)."""
    environ = os.environ if environ is None else environ
    flags = flags or {}
    values, sources = {}, {}
    for s in SETTINGS:
        env = next((e for e in (s.env, *s.env_aliases) if environ.get(e) not in (None, "")), None)
        if flags.get(s.name) is not None:
            values[s.name], sources[s.name] = str(flags[s.name]), "flag"
        elif env is not None:
            values[s.name], sources[s.name] = environ[env], "env"
        else:
            values[s.name], sources[s.name] = s.default, "default"
    return Config(values, sources)


_CURRENT: Config | None = None


def current() -> Config:
    """This process's settings, read once."""
    global _CURRENT
    if _CURRENT is None:
        _CURRENT = resolve()
    return _CURRENT


def install(flags: dict[str, str | None] | argparse.Namespace) -> Config:
    """A tool's parsed flags become this process's settings, exported so that its children read them too."""
    global _CURRENT
    if isinstance(flags, argparse.Namespace):
        flags = {s.name: getattr(flags, s.name, None) for s in SETTINGS}
    _CURRENT = resolve(flags)
    os.environ.update(_CURRENT.exports())
    return _CURRENT


def add_flags(add, names, *, helps: dict[str, str] | None = None, hidden=None) -> None:
    """Declare ``names``' flags through ``add`` (argparse's ``add_argument`` or a pytest group's
    ``addoption``), default None (so :func:`resolve` can tell a given flag from the environment), with the
    setting's doc as help. Deprecated aliases go through ``hidden`` (argparse: a suppressed twin)."""
    helps = helps or {}
    for name in names:
        s = BY_NAME[name]
        default = f" (default: {s.default})" if s.default is not None else ""
        add(s.option, dest=name, default=None, metavar=s.values.split()[0].upper() if s.values else None,
            help=f"{helps.get(name, s.doc)}{default}; env {s.env}")
        if hidden is not None:
            for alias in s.aliases:
                hidden(alias, dest=name, default=None, help=argparse.SUPPRESS)


def add_to_parser(parser: argparse.ArgumentParser, tool: str, helps: dict[str, str] | None = None) -> None:
    """The common flags of ``tool`` (:data:`COMMON`) on an argparse parser, old spellings accepted."""
    add_flags(parser.add_argument, COMMON[tool], helps=helps, hidden=parser.add_argument)


def markdown_table() -> str:
    """README's "Configuration" table."""
    rows = ["| flag | environment | default | values | what |", "|---|---|---|---|---|"]
    for s in SETTINGS:
        flag = f"`{s.option}`" if s.flag else "(env only)"
        env = f"`{s.env}`" + "".join(f" (old: `{e}`)" for e in s.env_aliases)
        if s.aliases:
            flag += " (old: " + ", ".join(f"`{a}`" for a in s.aliases) + ")"
        rows.append(f"| {flag} | {env} | {s.default if s.default is not None else '-'} | {s.values} | {s.doc} |")
    return "\n".join(rows)


if __name__ == "__main__":
    sys.stdout.write(markdown_table() + "\n")
