"""What a client may hold of the HTTP server: a bounded number of open connections, and a deadline for
each request header, request body and TLS handshake. uvicorn keeps a connection that never sends a
request open forever, so 300 half-open ones used to exhaust the file descriptors and block every scrape.

Past the bound, the oldest connection that has not sent a request yet is closed for the new one (a
scraper sends its request at once, so it is never the oldest waiting), then the oldest idle kept-alive
one; when every connection is busy serving, the new one is refused. A request still sending its body
(a progress report; scrapes have none) holds one of a few body slots: past them the oldest such
connection is closed, so stalled bodies never take the slots scrapes need. TLS connections have a
bound of their own, from what each costs in memory (OpenSSL's state and a read buffer), and their
handshakes a pace: a few steps per turn of the event loop, so a flood's key exchanges never hold the
turn in which a scrape is answered.

The protocol factory here also wraps connections in TLS with the context current at accept time, so a
reloaded certificate is used from the next connection on without restarting the listener; a plain HTTP
request sent to the TLS port is answered 400 in plain HTTP, as Go's servers do."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import fcntl
import logging
import resource
import socket
import ssl
import string
import struct
import termios
from asyncio import sslproto
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

import h11
from uvicorn.config import Config
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState

from exporter.policy.thresholds import (
    HTTP_BODY_TIMEOUT,
    HTTP_HEADER_TIMEOUT,
    HTTP_KEEPALIVE,
    HTTP_MAX_BODY_CONNECTIONS,
    HTTP_MAX_CONNECTIONS,
    HTTP_MAX_STALLED_CONNECTIONS,
    HTTP_SEND_TIMEOUT,
    HTTP_TLS_HANDSHAKE_TIMEOUT,
    HTTP_TLS_HANDSHAKES_PER_TURN,
    HTTP_TLS_MAX_CONNECTIONS,
)
from exporter.serve.metrics import Family, labels

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
# What a TLS connection reads at once. asyncio's default is 256 KiB, allocated and zeroed for every
# connection as it opens: 1,100 idle TLS connections took 400 MiB. A TLS record is at most 16 KiB of
# data; a larger one is read in two turns.
TLS_READ_BUFFER = 16 * 1024
_NOT_TLS_MESSAGE = b"Client sent an HTTP request to an HTTPS server.\n"
NOT_TLS = (
    b"HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain; charset=utf-8\r\nconnection: close\r\n"
    + f"content-length: {len(_NOT_TLS_MESSAGE)}\r\n\r\n".encode()
    + _NOT_TLS_MESSAGE
)
# A request body is read whole before the application sees the request, up to this much; past it the
# application reads the rest itself (the progress API refuses a body over 1 KiB, the only one accepted).
BODY_HOLD_BYTES = 64 * 1024
# After a flood, freed connection buffers stay in the C allocator's heap (RSS stayed 40 MiB up after
# 1,100 TLS connections closed): once the open connections fall to a quarter of a peak of at least this
# many, the heap's free memory is returned to the system (glibc's malloc_trim; elsewhere nothing).
TRIM_AFTER = 256
TRIM_AFTER_STALLED = 16  # and once no connection holds an unread answer, after a peak of this many
# A response body is written in pieces of this size, each once the connection's write buffer is under
# asyncio's high-water mark (64 KiB): a client that does not read holds about two pieces of its answer,
# not the whole of a 4 MB exposition (200 such clients took the process from 95 to 579 MiB).
SEND_CHUNK = 64 * 1024
# The kernel's send buffer of an accepted connection. Left to autotune, loopback and fast links grow it to
# 4 MiB, all of it charged to the container's memory: 200 clients not reading a 4 MB exposition held
# 750 MiB of kernel buffers. Asked for 64 KiB, Linux allows 128 KiB: still 128 MB/s at a 1 ms round trip.
SEND_BUFFER = 64 * 1024
# A TLS client's first byte is 22 (a handshake record); an HTTP request's is a method's capital letter.
_HTTP_FIRST_BYTES = frozenset(string.ascii_uppercase.encode())


@dataclass
class GuardStats:
    admitted: int = 0
    evicted: int = 0  # closed for a newer connection
    timed_out: int = 0  # no complete request header in time
    refused: int = 0  # every open connection was busy
    too_large: int = 0  # a request header over MAX_HEADER_BYTES
    body_timeout: int = 0  # a request body not all there in time
    send_timeout: int = 0  # its answer not taken in time


@dataclass(eq=False)
class Tracked:
    """One accepted connection, as the guard sees it: waiting (no request yet), body (its request's
    body still arriving), busy (being served) or idle (kept alive after a response)."""

    transport: asyncio.BaseTransport | None = None
    state: str = "waiting"
    tls: bool = False
    timer: asyncio.TimerHandle | None = None
    served: int = 0
    send_timer: asyncio.TimerHandle | None = None  # armed while its write buffer is above the high water


@dataclass
class ConnectionGuard:
    max_connections: int
    header_timeout_s: float = HTTP_HEADER_TIMEOUT.value
    keepalive_s: float = HTTP_KEEPALIVE.value
    body_timeout_s: float = HTTP_BODY_TIMEOUT.value
    max_bodies: int = int(HTTP_MAX_BODY_CONNECTIONS.value)
    max_tls: int = int(HTTP_TLS_MAX_CONNECTIONS.value)
    send_timeout_s: float = HTTP_SEND_TIMEOUT.value
    max_stalled: int = int(HTTP_MAX_STALLED_CONNECTIONS.value)
    stats: GuardStats = field(default_factory=GuardStats)
    _open: dict[Tracked, None] = field(default_factory=dict)  # insertion order: oldest first
    _bodies: dict[Tracked, None] = field(default_factory=dict)  # those in state "body", oldest first
    _stalled: dict[Tracked, None] = field(default_factory=dict)  # not taking their answer, oldest first
    _tls: int = 0
    _peak: int = 0  # the most connections open at once since memory was last returned
    _stalled_peak: int = 0  # the most stalled at once since then

    @property
    def open(self) -> int:
        return len(self._open)

    def admit(self, tracked: Tracked, transport: asyncio.BaseTransport, tls: bool = False) -> bool:
        """A new connection: make room if needed; False when it is refused (and closed)."""
        tracked.transport, tracked.tls = transport, tls
        _small_send_buffer(transport)
        while len(self._open) >= self.max_connections or (tls and self._tls >= self.max_tls):
            full = len(self._open) >= self.max_connections
            victim = self._oldest("waiting", tls=not full) or self._oldest("idle", tls=not full)
            if victim is None:
                self.stats.refused += 1
                log.warning("refusing a connection: all %d are serving requests", len(self._open))
                transport.abort()
                return False
            self.stats.evicted += 1
            log.warning("closing the oldest connection without a request: %d are open", len(self._open))
            self._close(victim)
        self._open[tracked] = None
        self._tls += tls
        self._peak = max(self._peak, len(self._open))
        self.stats.admitted += 1
        self._arm(tracked, self.header_timeout_s)
        return True

    def receiving(self, tracked: Tracked) -> None:
        """A request header came with a body still to arrive: one of the few body slots, for a while."""
        while len(self._bodies) >= self.max_bodies:
            victim = next(iter(self._bodies))
            self.stats.evicted += 1
            log.warning(
                "closing the oldest connection still sending a request body: %d are", len(self._bodies)
            )
            self._close(victim)
        self._bodies[tracked] = None
        tracked.state = "body"
        self._arm(tracked, self.body_timeout_s)

    def busy(self, tracked: Tracked) -> None:
        self._bodies.pop(tracked, None)
        tracked.state = "busy"
        self._disarm(tracked)

    def idle(self, tracked: Tracked) -> None:
        """A response was sent: the connection may wait for the next request, within limits."""
        self._bodies.pop(tracked, None)
        tracked.state, tracked.served = "idle", tracked.served + 1
        self._arm(tracked, self.keepalive_s + self.header_timeout_s)

    def stalled(self, tracked: Tracked) -> None:
        """The client has not taken what was written to it: its write buffer went over the high-water
        mark, or its answer was done with some still unsent. It has ``send_timeout_s`` to take it; and
        at most ``max_stalled`` connections may hold unsent answers at once: past that the oldest is
        closed (one that took its answer meanwhile is only let go)."""
        if tracked not in self._open or tracked in self._stalled:
            return
        while len(self._stalled) >= self.max_stalled:
            victim = next(iter(self._stalled))
            if victim.transport is not None and unsent(victim.transport) == 0:
                self.flowing(victim)
                continue
            self.stats.evicted += 1
            log.warning("closing the oldest connection not taking its answer: %d are", len(self._stalled))
            self._close(victim)
        self._stalled[tracked] = None
        self._stalled_peak = max(self._stalled_peak, len(self._stalled))
        tracked.send_timer = asyncio.get_running_loop().call_later(
            self.send_timeout_s, self._send_expire, tracked
        )

    def flowing(self, tracked: Tracked) -> None:
        """The client took enough of its answer (the buffer fell under the low-water mark)."""
        self._stalled.pop(tracked, None)
        if tracked.send_timer is not None:
            tracked.send_timer.cancel()
            tracked.send_timer = None
        self._trim_after_stalled()

    def _send_expire(self, tracked: Tracked) -> None:
        tracked.send_timer = None
        if tracked in self._stalled and tracked.transport is not None and unsent(tracked.transport) == 0:
            self.flowing(tracked)  # it took the rest of its answer in time
        elif tracked in self._stalled:
            self.stats.send_timeout += 1
            log.info("closing a connection that did not take its answer in %.0f s", self.send_timeout_s)
            self._close(tracked)

    def _trim_after_stalled(self) -> None:
        """The buffers of a crowd of stalled connections stay in the C heap: returned once they are gone."""
        if not self._stalled and self._stalled_peak >= TRIM_AFTER_STALLED:
            self._stalled_peak = 0
            if MALLOC_TRIM is not None:
                asyncio.get_running_loop().call_soon(MALLOC_TRIM, 0)

    def forget(self, tracked: Tracked) -> None:
        self._disarm(tracked)
        self._bodies.pop(tracked, None)
        if tracked in self._stalled:
            self.flowing(tracked)
        if tracked in self._open:
            del self._open[tracked]
            self._tls -= tracked.tls
            if self._peak >= TRIM_AFTER and len(self._open) <= self._peak // 4:
                self._peak = len(self._open)
                if MALLOC_TRIM is not None:
                    asyncio.get_running_loop().call_soon(MALLOC_TRIM, 0)

    def _oldest(self, state: str, tls: bool = False) -> Tracked | None:
        return next((t for t in self._open if t.state == state and (t.tls or not tls)), None)

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
        if tracked not in self._open or tracked.state == "busy":
            return
        if tracked.state == "body":
            self.stats.body_timeout += 1
            log.info("closing a connection whose request body did not arrive in %.0f s", self.body_timeout_s)
        else:
            self.stats.timed_out += 1
            log.info("closing a connection that sent no complete request in %.0f s", self.header_timeout_s)
        self._close(tracked)

    def _close(self, tracked: Tracked) -> None:
        self.forget(tracked)
        if tracked.transport is not None and not tracked.transport.is_closing():
            tracked.transport.abort()  # a reset frees the descriptor now, without a lingering close


def unsent(transport: asyncio.BaseTransport) -> int:
    """Bytes written to the connection that its client has not taken: asyncio's write buffer and the
    kernel's send queue (sent but not acknowledged, or not sent yet)."""
    try:
        held = transport.get_write_buffer_size()  # type: ignore[attr-defined]
    except (AttributeError, NotImplementedError):  # a transport that buffers nothing
        held = 0
    try:
        sock = transport.get_extra_info("socket")
        queued = struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0"))[0]
    except (AttributeError, OSError, ValueError):  # closed, or no socket this ioctl knows
        queued = 0
    return int(held) + int(queued)


def _small_send_buffer(transport: asyncio.BaseTransport) -> None:
    with contextlib.suppress(AttributeError, OSError):  # no socket of its own (a test's): nothing to bound
        transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim  # type: ignore[no-any-return]
    except (OSError, AttributeError):  # not glibc
        return None


MALLOC_TRIM = _malloc_trim()
Message = MutableMapping[str, Any]
ASGIApp = Callable[
    [Message, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]], Awaitable[None]
]


class WholeBodies:
    """ASGI: a request with a body reaches the application once its body has arrived (or past
    BODY_HOLD_BYTES). A stalled body then costs a waiting coroutine, not a run of the framework, and a
    client that leaves (or is cut at the body deadline) before its body arrives is answered nothing."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(
        self,
        scope: Message,
        receive: Callable[[], Awaitable[Message]],
        send: Callable[[Message], Awaitable[None]],
    ) -> None:
        if scope["type"] != "http" or not any(
            name in (b"content-length", b"transfer-encoding") for name, _ in scope["headers"]
        ):
            await self.app(scope, receive, send)
            return
        held: list[Message] = []
        size = 0
        while size <= BODY_HOLD_BYTES:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            held.append(message)
            size += len(message.get("body", b""))
            if not message.get("more_body", False):
                break
        replay = iter(held)

        async def again() -> Message:
            return next(replay, None) or await receive()

        await self.app(scope, again, send)


class SmallWrites:
    """ASGI: a response body reaches the server in pieces of SEND_CHUNK. uvicorn waits, before writing
    each piece, until the connection's write buffer is under the high-water mark, so what a slow client
    holds is bounded by the piece, not by the answer (the pieces are views of the one rendered body)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(
        self,
        scope: Message,
        receive: Callable[[], Awaitable[Message]],
        send: Callable[[Message], Awaitable[None]],
    ) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def in_pieces(message: Message) -> None:
            body = message.get("body", b"") if message["type"] == "http.response.body" else b""
            if len(body) <= SEND_CHUNK:
                await send(message)
                return
            more, view = message.get("more_body", False), memoryview(body)
            for start in range(0, len(view), SEND_CHUNK):
                last = start + SEND_CHUNK >= len(view)
                piece = view[start : start + SEND_CHUNK]
                await send({"type": "http.response.body", "body": piece, "more_body": more or not last})

        await self.app(scope, receive, in_pieces)


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
        if self.tracked.state in ("waiting", "idle"):
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
            self._follow()
        elif self.tracked.state == "body":
            self._follow()

    def on_response_complete(self) -> None:
        before = self.cycle
        super().on_response_complete()
        if self.transport.is_closing():
            return
        if self.cycle is not before:  # a pipelined request, parsed as the response ended
            self._follow()
        elif self.tracked.state == "busy":
            self.guard.idle(self.tracked)
        if unsent(self.transport) > 0:  # the answer is written, not all taken: it must be, in time
            self.guard.stalled(self.tracked)

    def _follow(self) -> None:
        """Tell the guard where the current request stands: its body arriving, served, or done."""
        if self.cycle is None or self.transport.is_closing():
            return
        if self.conn.their_state is h11.SEND_BODY:
            if self.tracked.state != "body":
                self.guard.receiving(self.tracked)
        elif not self.cycle.response_complete:
            self.guard.busy(self.tracked)
        elif self.tracked.state != "idle":
            self.guard.idle(self.tracked)

    def pause_writing(self) -> None:
        super().pause_writing()
        self.guard.stalled(self.tracked)

    def resume_writing(self) -> None:
        super().resume_writing()
        if self.cycle is not None and not self.cycle.response_complete:
            self.guard.flowing(self.tracked)  # taking its answer: the deadline starts again at the next stall

    def connection_lost(self, exc: Exception | None) -> None:
        self.guard.forget(self.tracked)
        if self.transport is not None:
            super().connection_lost(exc)


class HandshakePacer:
    """At most ``per_turn`` TLS handshake steps per turn of the event loop. A step is the server's work on
    a handshake message that arrived; past the budget the connection's step waits for a later turn, its
    reads paused (the rest of its handshake stays in the kernel). Waiting steps go newest first: under a
    flood the client that just connected (a scraper among a thousand flooding) is answered at once, and
    the oldest waiting run into the handshake deadline, which they would under any order."""

    def __init__(self, per_turn: int) -> None:
        self.per_turn = per_turn
        self.used = 0
        self.deferred = 0  # steps that waited for a later turn, ever
        self._waiting: dict[GuardedTLS, None] = {}  # insertion order: newest last
        self._turn_pending = False

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def take(self) -> bool:
        """Whether a step may run now; False: hand it to ``wait``."""
        if self.used >= self.per_turn or self._waiting:
            return False
        self.used += 1
        self._next_turn_resets()
        return True

    def wait(self, connection: GuardedTLS) -> None:
        self._waiting[connection] = None
        self.deferred += 1
        self._next_turn_resets()

    def forget(self, connection: GuardedTLS) -> None:
        self._waiting.pop(connection, None)

    def _next_turn_resets(self) -> None:
        if not self._turn_pending:
            self._turn_pending = True
            asyncio.get_running_loop().call_soon(self._turn)

    def _turn(self) -> None:
        """First of a turn's callbacks: the waiting steps take the new budget before any new one."""
        self._turn_pending, self.used = False, 0
        while self._waiting and self.used < self.per_turn:
            connection = next(reversed(self._waiting))
            del self._waiting[connection]
            self.used += 1
            connection.step()
        if self.used:
            self._next_turn_resets()


class GuardedTLS(sslproto.SSLProtocol):
    """TLS in front of GuardedH11: admitted at accept, so a handshake that never ends is bounded too, and
    its steps paced."""

    max_size = TLS_READ_BUFFER  # asyncio's read size, and the buffer each connection allocates

    def __init__(
        self, *args: Any, guard: ConnectionGuard, tracked: Tracked, pacer: HandshakePacer, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.guard, self.tracked, self.pacer = guard, tracked, pacer
        self.first = True

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self.guard.admit(self.tracked, transport, tls=True):
            super().connection_made(transport)  # type: ignore[arg-type]

    def buffer_updated(self, nbytes: int) -> None:
        if self.first and nbytes > 0:
            self.first = False
            if self._ssl_buffer[0] in _HTTP_FIRST_BYTES:  # plain HTTP: say so in plain HTTP, and close
                log.info("answering 400 to a plain HTTP request on the TLS port")
                self._transport.write(NOT_TLS)
                self._transport.close()
                return
        if self._state is sslproto.SSLProtocolState.DO_HANDSHAKE and not self.pacer.take():
            self._incoming.write(self._ssl_buffer_view[:nbytes])  # what super() does first
            self._transport.pause_reading()
            self.pacer.wait(self)
            return
        super().buffer_updated(nbytes)

    def step(self) -> None:
        """The handshake step that waited for this turn, on what was read; then read on."""
        if self._transport is None or self._transport.is_closing():
            return
        self._transport.resume_reading()
        if self._state is sslproto.SSLProtocolState.DO_HANDSHAKE:
            self._do_handshake()

    def connection_lost(self, exc: Exception | None) -> None:
        self.guard.forget(self.tracked)
        self.pacer.forget(self)
        super().connection_lost(exc)


def protocol_factory(
    guard: ConnectionGuard, tls: Callable[[], ssl.SSLContext | None]
) -> Callable[..., asyncio.BaseProtocol]:
    """What uvicorn's ``Config(http=...)`` calls for each accepted connection."""
    pacer = HandshakePacer(int(HTTP_TLS_HANDSHAKES_PER_TURN.value))

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
            ssl_handshake_timeout=HTTP_TLS_HANDSHAKE_TIMEOUT.value,
            ssl_shutdown_timeout=TLS_SHUTDOWN_S,
            guard=guard,
            tracked=tracked,
            pacer=pacer,
        )

    return make


def http_families(
    guard: ConnectionGuard,
    auth_failures: Callable[[], int],
    reloads: Callable[[], tuple[int, int]],
    web_config: bool = True,
    push_refused: Callable[[], int] | None = None,
) -> list[Family]:
    """The server's own metrics: what the guard closed, failed logins, web config re-reads, pushes
    refused for a wrong push token (``push_refused``: None without a push token, no series)."""
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
        ("body_timeout", stats.body_timeout),
        ("send_timeout", stats.send_timeout),
        ("refused", stats.refused),
    ):
        closed.add(labels(reason=reason), count)
    own = [open_now, closed]
    if push_refused is not None:
        pushes = Family(
            "gpu_exporter_http_push_refused", "counter", "Pushes to /v1/progress refused: bad push token."
        )
        pushes.add("", push_refused())
        own.append(pushes)
    if not web_config:  # no credentials to refuse and no file to re-read: no series (the series budget)
        return own
    denied = Family("gpu_exporter_http_auth_failures", "counter", "Requests refused for bad credentials.")
    denied.add("", auth_failures())
    done, failed = reloads()
    reread = Family("gpu_exporter_web_config_reloads", "counter", "Re-reads of --web.config.file (SIGHUP).")
    reread.add(labels(result="success"), done)
    reread.add(labels(result="failure"), failed)
    return [*own, denied, reread]
