"""The driver <-> rank channel: newline-delimited JSON over a TCP socket (loopback
unless ``--control-address`` says otherwise). Plain data only
(no pickle): a rank can never execute what the driver sends, and a log of the channel is readable."""

from __future__ import annotations

import json
import socket


class ChannelClosed(ConnectionError):
    """The peer closed the socket (a rank died or the driver went away)."""


class Channel:
    def __init__(self, sock: socket.socket):
        self.sock = sock
        self._buf = b""

    def send(self, obj: dict) -> None:
        self.sock.sendall(json.dumps(obj, allow_nan=True).encode() + b"\n")

    def recv(self, timeout: float | None = None) -> dict:
        self.sock.settimeout(timeout)
        while b"\n" not in self._buf:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ChannelClosed("peer closed the channel")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return json.loads(line)

    def has_line(self) -> bool:
        return b"\n" in self._buf

    def fill(self) -> None:
        """Read what is available now (the socket is readable); raise ChannelClosed on EOF."""
        self.sock.settimeout(0)
        try:
            chunk = self.sock.recv(1 << 20)
        except BlockingIOError:
            return
        if not chunk:
            raise ChannelClosed("peer closed the channel")
        self._buf += chunk

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def connect(addr: str, timeout: float = 60) -> Channel:
    host, port = addr.rsplit(":", 1)
    s = socket.create_connection((host.strip("[]"), int(port)), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return Channel(s)
