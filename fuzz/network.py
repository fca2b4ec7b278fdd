"""Where a pool's driver listens and where its nodes meet: the control channel's address (settings
``--control-address``, ``--rdzv-endpoint``; :mod:`fuzz.config`).

The control channel (:mod:`fuzz.channel`) binds to ``control_address`` (loopback by default; a pool of one
node picks a free port unless one is given). Ranks and node agents dial the same host, or this host's name
when the address is a wildcard (``0.0.0.0``, ``::``). A pool across nodes listens on a known port (given,
else :data:`fuzz.config.MULTI_NODE_CONTROL_PORT`) for the whole of its life, so that node agents started
before or after it find it; torchrun's c10d rendezvous is hosted by the driver's node at ``rdzv_endpoint``
(default: the control host and a free port, picked at every start).
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

from .config import MULTI_NODE_CONTROL_PORT, current

WILDCARDS = ("", "0.0.0.0", "::", "*")


def split_address(address: str) -> tuple[str, int | None]:
    """``host[:port]`` (``[v6]:port`` too) -> (host, port or None)."""
    address = address.strip()
    if address.startswith("["):
        host, _, rest = address[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") else None
    if address.count(":") == 1:
        host, port = address.split(":")
        return host, int(port)
    return address, None


@dataclass(frozen=True)
class PoolNetwork:
    control_address: str = "127.0.0.1"
    rdzv_endpoint: str | None = None

    @classmethod
    def from_config(cls) -> PoolNetwork:
        cfg = current()
        return cls(cfg.control_address or "127.0.0.1", cfg.rdzv_endpoint)

    def bind_address(self, nnodes: int) -> tuple[str, int]:
        host, port = split_address(self.control_address)
        if port is None:
            port = MULTI_NODE_CONTROL_PORT if nnodes > 1 else 0
        return ("0.0.0.0" if host in WILDCARDS else host), port

    def dial_host(self) -> str:
        """The host ranks and node agents connect to."""
        host, _ = split_address(self.control_address)
        return socket.gethostname() if host in WILDCARDS else host

    def listen(self, nnodes: int, backlog: int) -> socket.socket:
        host, port = self.bind_address(nnodes)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        server = socket.socket(family, socket.SOCK_STREAM)
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            server.bind((host, port))
        except OSError as exc:
            server.close()
            raise OSError(f"the control channel cannot listen on {host}:{port} (--control-address): {exc}") from exc
        server.listen(backlog)
        return server

    def rendezvous(self) -> str:
        """torchrun's ``--rdzv-endpoint`` for a pool across nodes."""
        if self.rdzv_endpoint:
            return self.rdzv_endpoint
        return f"{_bracket(self.dial_host())}:{free_port()}"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host
