"""What a client may hold of the HTTP server: a bounded number of open connections, and a deadline for
each request header (and TLS handshake). uvicorn keeps a connection that never sends a request open
forever, so 300 half-open ones used to exhaust the file descriptors and block every scrape.

Past the bound, the oldest connection that has not sent a request yet is closed for the new one (a
scraper sends its request at once, so it is never the oldest waiting), then the oldest idle kept-alive
one; when every connection is busy serving, the new one is refused. The protocol factory here also
wraps connections in TLS with the context current at accept time, so a reloaded certificate is used
from the next connection on without restarting the listener."""

from __future__ import annotations

import asyncio
import logging
import resource
import socket
import ssl
from asyncio import sslproto
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from uvicorn.config import Config
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState

from exporter.metrics import Family, labels
from exporter.thresholds import HTTP_HEADER_TIMEOUT, HTTP_KEEPALIVE, HTTP_MAX_CONNECTIONS

log = logging.getLogger(__name__)

FD_RESERVE = 64  # descriptors kept for the process itself: NVML, /proc reads, the kubelet socket, logs
# Connections accepted per turn of the event loop. asyncio accepts a whole batch before any of them reaches
# the guard, and a closed one frees its descriptor a few turns later: the bound leaves room for four.
ACCEPT_BATCH = 16
IN_FLIGHT = 4 * ACCEPT_BATCH
# a closing TLS connection waits this long for the client's close_notify: an idle scraper never sends it
TLS_SHUTDOWN_S = 2.0
MAX_HEADER_BYTES = 16 * 1024  # a scrape's request is a few hundred bytes; h11 alone bounds only partial ones
TOO_LARGE = b"HTTP/1.1 431 Request Header Fields Too Large\r\nconnection: close\r\ncontent-length: 0\r\n\r\n"


@dataclass
class GuardStats:
    admitted: int = 0
    evicted: int = 0  # closed for a newer connection
    timed_out: int = 0  # no complete request header in time
    refused: int = 0  # every open connection was busy
    too_large: int = 0  # a request header over MAX_HEADER_BYTES


@dataclass(eq=False)
class Tracked:
    """One accepted connection, as the guard sees it: waiting (no request yet), busy or idle."""

    transport: asyncio.BaseTransport | None = None
    state: str = "waiting"
    timer: asyncio.TimerHandle | None = None
    served: int = 0


@dataclass
class ConnectionGuard:
    max_connections: int
    header_timeout_s: float = HTTP_HEADER_TIMEOUT.value
    keepalive_s: float = HTTP_KEEPALIVE.value
    stats: GuardStats = field(default_factory=GuardStats)
    _open: dict[Tracked, None] = field(default_factory=dict)  # insertion order: oldest first

    @property
    def open(self) -> int:
        return len(self._open)

    def admit(self, tracked: Tracked, transport: asyncio.BaseTransport) -> bool:
        """A new connection: make room if needed; False when it is refused (and closed)."""
        tracked.transport = transport
        while len(self._open) >= self.max_connections:
            victim = self._oldest("waiting") or self._oldest("idle")
            if victim is None:
                self.stats.refused += 1
                log.warning("refusing a connection: all %d are serving requests", self.max_connections)
                transport.abort()
                return False
            self.stats.evicted += 1
            log.warning("closing the oldest connection without a request: %d are open", len(self._open))
            self._close(victim)
        self._open[tracked] = None
        self.stats.admitted += 1
        self._arm(tracked, self.header_timeout_s)
        return True

    def busy(self, tracked: Tracked) -> None:
        tracked.state = "busy"
        self._disarm(tracked)

    def idle(self, tracked: Tracked) -> None:
        """A response was sent: the connection may wait for the next request, within limits."""
        tracked.state, tracked.served = "idle", tracked.served + 1
        self._arm(tracked, self.keepalive_s + self.header_timeout_s)

    def forget(self, tracked: Tracked) -> None:
        self._disarm(tracked)
        self._open.pop(tracked, None)

    def _oldest(self, state: str) -> Tracked | None:
        return next((t for t in self._open if t.state == state), None)

    def _arm(self, tracked: Tracked, seconds: float) -> None:
        self._disarm(tracked)
        tracked.timer = asyncio.get_running_loop().call_later(seconds, self._expire, tracked)

    @staticmethod
    def _disarm(tracked: Tracked) -> None:
        if tracked.timer is not None:
            tracked.timer.cancel()
            tracked.timer = None

    def _expire(self, tracked: Tracked) -> None:
        tracked.timer = None
        if tracked in self._open and tracked.state != "busy":
            self.stats.timed_out += 1
            log.info("closing a connection that sent no complete request in %.0f s", self.header_timeout_s)
            self._close(tracked)

    def _close(self, tracked: Tracked) -> None:
        self.forget(tracked)
        if tracked.transport is not None and not tracked.transport.is_closing():
            tracked.transport.abort()  # a reset frees the descriptor now, without a lingering close


def connection_bound(limit: float = HTTP_MAX_CONNECTIONS.value) -> int:
    """The table's bound, lowered to fit the open-file limit this process was given."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return int(limit)
    return max(1, min(int(limit), soft - FD_RESERVE - IN_FLIGHT))


class GuardedListener(socket.socket):
    """The listening socket, accepting at most ACCEPT_BATCH connections per turn of the event loop:
    asyncio's accept loop takes as many as the listen backlog at once, each a descriptor, before the
    guard can close any. The rest wait in the kernel's queue, costing nothing, until the next turn."""

    def __init__(self, sock: socket.socket) -> None:
        super().__init__(sock.family, sock.type, sock.proto, fileno=sock.detach())
        self._taken = 0

    def accept(self) -> tuple[socket.socket, Any]:
        if self._taken >= ACCEPT_BATCH:
            raise BlockingIOError  # asyncio stops this turn's accepts and tries again on the next
        if self._taken == 0:
            asyncio.get_running_loop().call_soon(self._next_turn)
        self._taken += 1
        return super().accept()

    def _next_turn(self) -> None:
        self._taken = 0


class GuardedH11(H11Protocol):
    """uvicorn's HTTP/1.1 protocol, reporting its connection's state to the guard."""

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
        *,
        guard: ConnectionGuard,
        tracked: Tracked,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.guard, self.tracked = guard, tracked
        self.header_bytes = 0  # received since the last request began: its header, before it is parsed

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        if self.tracked.transport is None and not self.guard.admit(self.tracked, transport):
            return
        super().connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self.tracked.state != "busy":
            self.header_bytes += len(data)
            if self.header_bytes > MAX_HEADER_BYTES:
                self.guard.stats.too_large += 1
                self.transport.write(TOO_LARGE)
                self.transport.close()
                return
        before = self.cycle
        super().data_received(data)
        if self.cycle is not before:  # a complete request header was parsed
            self.header_bytes = 0
            self.guard.busy(self.tracked)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and self.tracked.state == "busy":
            self.guard.idle(self.tracked)

    def connection_lost(self, exc: Exception | None) -> None:
        self.guard.forget(self.tracked)
        if self.transport is not None:
            super().connection_lost(exc)


class GuardedTLS(sslproto.SSLProtocol):
    """TLS in front of GuardedH11: admitted at accept, so a handshake that never ends is bounded too."""

    def __init__(self, *args: Any, guard: ConnectionGuard, tracked: Tracked, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.guard, self.tracked = guard, tracked

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self.guard.admit(self.tracked, transport):
            super().connection_made(transport)  # type: ignore[arg-type]

    def connection_lost(self, exc: Exception | None) -> None:
        self.guard.forget(self.tracked)
        super().connection_lost(exc)


def protocol_factory(
    guard: ConnectionGuard, tls: Callable[[], ssl.SSLContext | None]
) -> Callable[..., asyncio.BaseProtocol]:
    """What uvicorn's ``Config(http=...)`` calls for each accepted connection."""

    def make(
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> asyncio.BaseProtocol:
        tracked = Tracked()
        http = GuardedH11(config, server_state, app_state, _loop, guard=guard, tracked=tracked)
        context = tls()
        if context is None:
            return http
        return GuardedTLS(
            _loop or asyncio.get_running_loop(),
            http,
            context,
            None,
            server_side=True,
            ssl_handshake_timeout=guard.header_timeout_s,
            ssl_shutdown_timeout=TLS_SHUTDOWN_S,
            guard=guard,
            tracked=tracked,
        )

    return make


def http_families(
    guard: ConnectionGuard,
    auth_failures: Callable[[], int],
    reloads: Callable[[], tuple[int, int]],
    web_config: bool = True,
) -> list[Family]:
    """The server's own metrics: what the guard closed, failed logins, web config re-reads."""
    open_now = Family("gpu_exporter_http_connections_open", "gauge", "Open HTTP connections.")
    open_now.add("", guard.open)
    closed = Family(
        "gpu_exporter_http_connections_closed", "counter", "Connections the server closed to protect itself."
    )
    stats = guard.stats
    for reason, count in (
        ("evicted", stats.evicted),
        ("header_timeout", stats.timed_out),
        ("header_too_large", stats.too_large),
        ("refused", stats.refused),
    ):
        closed.add(labels(reason=reason), count)
    if not web_config:  # no credentials to refuse and no file to re-read: no series (the series budget)
        return [open_now, closed]
    denied = Family("gpu_exporter_http_auth_failures", "counter", "Requests refused for bad credentials.")
    denied.add("", auth_failures())
    done, failed = reloads()
    reread = Family("gpu_exporter_web_config_reloads", "counter", "Re-reads of --web.config.file (SIGHUP).")
    reread.add(labels(result="success"), done)
    reread.add(labels(result="failure"), failed)
    return [open_now, closed, denied, reread]
