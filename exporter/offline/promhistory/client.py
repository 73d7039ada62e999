"""The Prometheus HTTP API (Prometheus and VictoriaMetrics answer it alike): series discovery, range
queries and raw samples cut into bounded chunks (VictoriaMetrics' /api/v1/export where the server has
it), with the authentication other Prometheus clients take (basic auth, a bearer token, a CA file), and
every failure as one line (``PromError``).

The server, or a proxy or query frontend in front of it, is not the user's: a request has one
deadline for its whole answer (headers and body, however slowly they come), a redirect is refused
(credentials never go on to another origin), an answer is bounded in size and read element by
element (no whole-document parse), an answer of the wrong shape is one line, and a busy answer
(429, 502, 503, 504) is asked again a bounded number of times after a pause (the server's
Retry-After, where it sends one)."""

from __future__ import annotations

import base64
import bisect
import contextlib
import email.utils
import http.client
import itertools
import json
import math
import os
import re
import socket
import ssl
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field

from exporter.offline.files import read_small

# Prometheus refuses a range query of more than 11,000 points per series; a chunk stays under it
MAX_POINTS_PER_SERIES = 10_000
# a chunk the server refuses as too large is halved down to this many points before giving up
MIN_POINTS_PER_SERIES = 100
# seconds one request may take: a week's chunk of one node answers in well under a second
DEFAULT_TIMEOUT_S = 60.0
# an answer larger than this is not one node's chunk (the server ignored the bounds): a chunk is 10,000
# steps of one series name for a node's GPUs, about 30 bytes a sample, so 2.4 MB for 8 GPUs and 17 MB
# for 56 MIG instances. Its message says "exceeds", so the chunk is asked again in halves.
MAX_BODY_BYTES = 64 * 1024 * 1024
# ...and an answer of raw samples at most this: the samples a server sends are its own to choose (one 4 ms
# apart is 250 a second), so raw samples are asked for a time short enough that one answer holds at most
# about 75,000 (about 28 bytes each) and is placed on the step's clock before the next is asked. Bounding
# the answer and splitting the range is simpler than a streaming parser, and it bounds the parse too: an
# answer's transient is about 15 times its body, 30 MB, whatever the server's spacing (a day of samples
# 4 ms apart peaked at 64 MiB against 34 MiB at 15 s; 96 MiB at 4 MiB answers, 2.4 GB kept whole). At
# 15 s a chunk of 10,000 steps is 280 KB a GPU: 7 GPUs fit in one answer, 8 take two.
RAW_BODY_BYTES = 2 * 1024 * 1024  # measured by bench/prometheus_dense.py
# ...which holds this many samples at 40 bytes each (a long value's text): what a chunk is sized to
RAW_SAMPLES_PER_ANSWER = RAW_BODY_BYTES // 40
# ...and the series index of the whole range (discovery, every GPU of the fleet: about 400 bytes a
# series, 100,000 GPUs in 40 MB), read element by element so its memory is the body's twice at most
MAX_INDEX_BYTES = 256 * 1024 * 1024
# an answer this small is parsed whole (faster; at most 40 times it, 160 MB): a larger one element by element
WHOLE_PARSE_BYTES = 4 * 1024 * 1024
# a busy answer (a query frontend's 429, a load balancer's 502-504) is asked again this many times...
RETRIES = 4
# ...after this many seconds, doubled each time, or the server's Retry-After up to RETRY_WAIT_MAX_S
RETRY_FIRST_WAIT_S = 1.0
RETRY_WAIT_MAX_S = 30.0
_BUSY = frozenset({429, 502, 503, 504})
# a password or token file holds one short line; a CA file a few certificates (a system bundle of about
# 150 is 220 KB): more is another file, refused before it is read whole
MAX_SECRET_BYTES = 64 * 1024
MAX_CA_BYTES = 4 * 1024 * 1024
_READ_BYTES = 1 << 20
_DEC = json.JSONDecoder()
_WS = re.compile(r"[ \t\n\r]*")
_USERINFO = re.compile(r"//[^/@?#]*@")  # a URL's user:password@, never shown
# what an answer of the wrong shape raises while it is read: one line, never a traceback
_SHAPE_ERRORS = (
    TypeError,
    ValueError,
    AttributeError,
    KeyError,
    IndexError,
    OverflowError,
    RecursionError,
    UnicodeError,
)
# a chunk of raw samples the server refuses as too large is halved down to this many seconds
MIN_SPAN_S = 3600
_TOO_LARGE = ("too many", "exceed", "maxsamples", "max_samples", "limit")


class PromError(Exception):
    """The server could not be read: the message is one line naming the URL and why."""


class _Cut(Exception):
    """A request cut where the run's budget ended (``_request`` says it, with the request counted)."""


class BudgetSpent(PromError):
    """The run's time budget (--max-duration) is spent: the whole run ends, not only the node."""


@dataclass(frozen=True)
class Budget:
    """The run's time budget: ``ends_at`` is wall-clock time (a worker process shares it), ``seconds``
    what was given, for the message."""

    ends_at: float
    seconds: float

    @classmethod
    def of(cls, seconds: float) -> Budget:
        return cls(time.time() + seconds, seconds)

    def left(self) -> float:
        return self.ends_at - time.time()

    def spent(self, url: str, why: str) -> BudgetSpent:
        return BudgetSpent(
            f"{url}: gave up, the run's budget of {self.seconds:g} s (--max-duration) is spent: {why}; "
            "pass a larger --max-duration, a shorter range (--from/--to) or fewer nodes (--selector)"
        )


@dataclass(frozen=True)
class Auth:
    user: str = ""
    password: str = ""
    token: str = ""
    ca_file: str = ""

    @classmethod
    def from_files(
        cls, user: str | None, password_file: str | None, token_file: str | None, ca_file: str | None
    ) -> Auth:
        """Secrets come from files (as Prometheus' own ``password_file``/``bearer_token_file``), never
        from the command line where any user's ``ps`` sees them."""
        return cls(
            user=user or "",
            password=_read_secret(password_file, "--prometheus-password-file") if password_file else "",
            token=_read_secret(token_file, "--prometheus-bearer-token-file") if token_file else "",
            ca_file=ca_file or "",
        )

    def headers(self) -> dict[str, str]:
        if self.token:
            return {"Authorization": f"Bearer {self.token}"}
        if self.user:
            pair = base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
            return {"Authorization": f"Basic {pair}"}
        return {}


def _read_secret(path: str, flag: str) -> str:
    try:
        return read_small(path, MAX_SECRET_BYTES).decode("utf-8").strip()
    except OSError as exc:
        raise PromError(f"{flag}: cannot read {path} ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise PromError(f"{flag}: {path} is not UTF-8 text") from None


def _ca_context(path: str) -> ssl.SSLContext:
    """A TLS context trusting the CAs of ``path`` (PEM, or one DER certificate), read here as any input:
    a FIFO, a device or a file past MAX_CA_BYTES is one line, never a wait inside OpenSSL."""
    flag = "--prometheus-ca-file"
    try:
        data = read_small(path, MAX_CA_BYTES)
    except OSError as exc:
        raise PromError(f"{flag}: cannot read {path} ({exc.strerror or exc})") from None
    try:
        pem: str | bytes = data.decode("ascii")
    except UnicodeDecodeError:
        pem = data  # DER
    try:
        return ssl.create_default_context(cadata=pem)
    except (ssl.SSLError, ValueError) as exc:
        raise PromError(f"{flag}: cannot load {path} ({exc})") from None


@dataclass
class Series:
    labels: dict[str, str]
    times: list[float] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    slot: int = -(2**62)  # the step of the latest point held (counted from the query's start)


@dataclass
class Raw:
    """A series' raw samples, as scraped: times in milliseconds (exact, for placing them on a step)."""

    labels: dict[str, str]
    times_ms: list[int] = field(default_factory=list)
    values: list[float] = field(default_factory=list)

    def extend(self, times_ms: list[int], values: list[float]) -> None:
        """Samples of a later chunk: those at or before the latest already held are the chunks' overlap."""
        if self.times_ms and times_ms and times_ms[0] <= self.times_ms[-1]:
            keep = bisect.bisect_right(times_ms, self.times_ms[-1])
            times_ms, values = times_ms[keep:], values[keep:]
        self.times_ms += times_ms
        self.values += values


@dataclass
class Counts:
    queries: int = 0
    samples: int = 0
    seconds: float = 0.0


class PromClient:
    def __init__(
        self,
        url: str,
        auth: Auth = Auth(),
        timeout_s: float = DEFAULT_TIMEOUT_S,
        budget: Budget | None = None,
    ) -> None:
        url, auth = split_credentials(url, auth)
        if any(c.isspace() or not c.isprintable() for c in url):
            raise PromError(f"--prometheus: {url!r} holds a blank or a control character")
        try:
            parsed = urllib.parse.urlsplit(url)
            port = parsed.port
        except ValueError as exc:
            raise PromError(f"--prometheus: {url!r} is not a URL ({exc})") from None
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise PromError(f"--prometheus: {url!r} is not an http:// or https:// URL")
        self.url = url.rstrip("/")
        self.auth = auth
        self.timeout_s = timeout_s
        self.budget = budget
        self.counts = Counts()
        self.on_query: Callable[[], None] | None = None  # after every request (a progress line)
        self._host, self._port, self._https = parsed.hostname, port, parsed.scheme == "https"
        self._base = parsed.path.rstrip("/")
        self._context: ssl.SSLContext | None = None
        if self._https:
            if auth.ca_file:
                self._context = _ca_context(auth.ca_file)
            else:
                self._context = ssl.create_default_context()
        self._proxy = _proxy_for(self._host, self._https)
        self._span_fits = 0  # the longest raw-sample chunk (s) that fit RAW_BODY_BYTES after a halving
        self._slowest_s = 0.0  # the longest a request took (the budget's message)

    def _request(
        self, path: str, params: list[tuple[str, str]], post: bool = True, limit: int | None = None
    ) -> bytes:
        """Ask the API (a form POST, long selectors fit; GET where the API takes no POST) and return its
        answer's body; a busy answer is asked again (``RETRIES``); a failure is a PromError of one line."""
        wait = RETRY_FIRST_WAIT_S
        for attempt in range(RETRIES + 1):
            if self.budget and self.budget.left() <= 0:
                raise self._spent()
            began = time.monotonic()
            self.counts.queries += 1
            try:
                try:
                    status, headers, body = self._once(path, params, post, limit or MAX_BODY_BYTES)
                finally:
                    took = time.monotonic() - began
                    self._slowest_s = max(self._slowest_s, took)
                    self.counts.seconds += took
                    if self.on_query:
                        self.on_query()
            except _Cut:
                raise self._spent() from None
            if status in _BUSY and attempt < RETRIES:
                pause = min(_retry_after(headers.get("Retry-After"), wait), RETRY_WAIT_MAX_S)
                if self.budget and self.budget.left() <= pause:  # no time left to ask again
                    raise self._spent(f"HTTP {status} and no time left to ask again")
                time.sleep(pause)
                wait *= 2
                continue
            if 300 <= status < 400:
                where = _USERINFO.sub("//", _clean(headers.get("Location") or "nowhere"))
                raise PromError(
                    f"{self.url}{path} answered HTTP {status}, a redirect to {where}: not followed "
                    "(credentials go to the URL given only); give --prometheus the final URL"
                )
            if status >= 400:
                tried = f" (after {attempt + 1} tries)" if status in _BUSY else ""
                reason = http.client.responses.get(status, "error")
                raise PromError(f"{self.url} answered HTTP {status} ({reason}){tried}{_api_error(body)}")
            return body
        raise AssertionError("unreachable")  # pragma: no cover

    def _spent(self, why: str = "") -> BudgetSpent:
        assert self.budget is not None
        return self.budget.spent(
            self.url, why or f"the range was not read in time (answers took up to {self._slowest_s:.1f} s)"
        )

    def _once(
        self, path: str, params: list[tuple[str, str]], post: bool, limit: int
    ) -> tuple[int, http.client.HTTPMessage, bytes]:
        """One request, cut at ``timeout_s`` from its start (or where the run's budget ends, if sooner)
        whatever the server or a proxy sends: a watchdog shuts the socket, which ends any read waiting
        on it, the proxy's CONNECT reply's too (the socket is held from the moment it is made)."""
        deadline, by_budget = self.timeout_s, False
        if self.budget and self.budget.left() < deadline:
            deadline, by_budget = max(0.001, self.budget.left()), True
        form = urllib.parse.urlencode(params)
        target = f"{self._base}{path}" if post else f"{self._base}{path}?{form}"
        headers = {"Connection": "close", **self.auth.headers()}
        if post:
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        conn, target = self._connection(target, headers, deadline)
        expired = threading.Event()
        held: list[socket.socket] = []  # the connection's socket (the response keeps it, not ``conn``)

        def cut() -> None:
            expired.set()
            for sock in held:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

        def made(*args: object, **kwargs: object) -> socket.socket:
            """The TCP socket as soon as it is made, before a proxy's tunnel is asked over it."""
            sock = socket.create_connection(*args, **kwargs)  # type: ignore[arg-type]
            held.append(sock)
            if expired.is_set():
                cut()
            return sock

        conn._create_connection = made  # type: ignore[attr-defined]
        watchdog = threading.Timer(deadline, cut)
        watchdog.daemon = True
        watchdog.start()
        try:
            conn.connect()  # the socket, the proxy's tunnel, TLS: all under the watchdog
            if conn.sock is not None:
                held.append(conn.sock)  # TLS' socket (the TCP one is detached into it)
            if expired.is_set():
                cut()
            conn.request(
                "POST" if post else "GET", target, body=form.encode() if post else None, headers=headers
            )
            answer = conn.getresponse()
            if answer.status >= 300:
                body = answer.read(64 * 1024)
            else:
                chunks, size = [], 0
                while chunk := answer.read(_READ_BYTES):
                    size += len(chunk)
                    if size > limit:
                        raise PromError(f"{self.url}{path}: an answer that exceeds {limit / 2**20:g} MiB")
                    chunks.append(chunk)
                body = b"".join(chunks)
            if expired.is_set():  # the watchdog ended the read: what came is not the whole answer
                raise TimeoutError
            return answer.status, answer.msg, body
        except PromError:
            raise
        except (OSError, http.client.HTTPException, ValueError) as exc:
            if expired.is_set() or isinstance(exc, TimeoutError):
                if by_budget:
                    raise _Cut from None
                raise PromError(f"{self.url}: no complete answer within {self.timeout_s:g} s") from None
            raise PromError(f"cannot reach {self.url} ({_reason(exc)})") from None
        finally:
            watchdog.cancel()
            conn.close()

    def _connection(
        self, target: str, headers: dict[str, str], timeout: float
    ) -> tuple[http.client.HTTPConnection, str]:
        """A connection to the server, or through the proxy the environment names for it (HTTPS_PROXY,
        HTTP_PROXY, NO_PROXY, as urllib and curl read them): a tunnel for https, the absolute URL for
        http. The proxy's own credentials (http://user:pw@proxy) go to the proxy only."""
        proxy = self._proxy
        host, port = self._host, self._port
        if proxy:
            host, port = proxy.hostname or host, proxy.port
            parsed = proxy
            if parsed.username:
                pair = (
                    f"{urllib.parse.unquote(parsed.username)}:{urllib.parse.unquote(parsed.password or '')}"
                )
                proxy_auth = {"Proxy-Authorization": "Basic " + base64.b64encode(pair.encode()).decode()}
            else:
                proxy_auth = {}
        if self._https:
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                host, port, timeout=timeout, context=self._context
            )
            if proxy:
                conn.set_tunnel(self._host, self._port, headers=proxy_auth)
            return conn, target
        conn = http.client.HTTPConnection(host, port, timeout=timeout)
        if proxy:
            headers.update(proxy_auth)
            netloc = f"[{self._host}]" if ":" in self._host else self._host
            return conn, f"http://{netloc}{f':{self._port}' if self._port else ''}{target}"
        return conn, target

    def _items(
        self,
        path: str,
        params: list[tuple[str, str]],
        where: tuple[str, ...],
        limit: int | None = None,
        post: bool = True,
    ) -> Iterator[object]:
        """The elements of the array at ``where`` in the API's answer. A large answer's are parsed each
        on its own as it is reached (a whole-document parse costs 17-40 times the body), a small one's
        (WHOLE_PARSE_BYTES) at once, which is faster; the status is judged at the end, so a caller
        keeps nothing of an answer that fails."""
        raw = self._request(path, params, post, limit)
        meta: dict[str, object] = {}
        try:
            if len(raw) <= WHOLE_PARSE_BYTES:
                yield from _whole(json.loads(raw), where, meta)
            else:
                text = raw.decode("utf-8")
                del raw
                end = yield from _array_at(text, 0, where, meta)
                if _skip(text, end) != len(text):
                    raise ValueError("more after the answer")
        except _SHAPE_ERRORS:
            raise PromError(f"{self.url}{path} did not answer JSON: is it a Prometheus API?") from None
        if meta.get("status") != "success":
            raise PromError(
                f"{self.url}{path}: {_clean(str(meta.get('error') or 'not a Prometheus API answer'))}"
            )

    def _shape(self, path: str, exc: BaseException) -> PromError:
        return PromError(
            f"{self.url}{path}: an answer of the wrong shape ({type(exc).__name__}: {_clean(str(exc))})"
        )

    def series(self, match: str, start: float, end: float) -> Iterator[dict[str, str]]:
        """The series' label sets, each as it is parsed (the index of a range may be large: a caller
        keeps what it needs of each, never the whole answer)."""
        path = "/api/v1/series"
        params = [("match[]", match), ("start", _ts(start)), ("end", _ts(end))]
        try:
            for item in self._items(path, params, ("data",), MAX_INDEX_BYTES):
                yield _labels(item)
        except _SHAPE_ERRORS as exc:
            raise self._shape(path, exc) from None

    def label_values(self, label: str, match: str, start: float, end: float) -> list[str]:
        path = f"/api/v1/label/{urllib.parse.quote(label)}/values"
        params = [("match[]", match), ("start", _ts(start)), ("end", _ts(end))]
        values = list(self._items(path, params, ("data",), post=False))
        if not all(isinstance(v, str) for v in values):
            raise self._shape(path, TypeError("not a list of strings"))
        return values  # type: ignore[return-value]

    def raw_times(self, expr: str, at: float, window_s: float) -> list[list[float]]:
        """The raw sample times of ``expr`` over ``window_s`` before ``at``, per series."""
        params = [("query", f"{expr}[{int(window_s)}s]"), ("time", _ts(at))]
        try:
            return [
                sorted(_finite_time(t) for t, _ in _pairs(item))
                for item in self._items("/api/v1/query", params, ("data", "result"))
            ]
        except _SHAPE_ERRORS as exc:
            raise self._shape("/api/v1/query", exc) from None

    def has_export(self, match: str, at: float) -> bool:
        """Whether the server exports raw samples (VictoriaMetrics' /api/v1/export; Prometheus has no
        such path and answers 404): an answer of JSON lines of series, or none (a proxy's page is not)."""
        try:
            body = self._request(
                "/api/v1/export", [("match[]", match), ("start", _ts(at - 1)), ("end", _ts(at))], False
            )
        except PromError:
            return False
        first = body.strip().split(b"\n", 1)[0]
        if not first:
            return True
        try:
            line = json.loads(first)
        except (ValueError, RecursionError):
            return False
        return isinstance(line, dict) and "metric" in line

    def raw(
        self,
        selector: str,
        start: float,
        end: float,
        span_s: float,
        export: bool = False,
        least_s: float = MIN_SPAN_S,
        thin_s: float = 0.0,
    ) -> list[Raw]:
        """The raw samples of ``selector`` in ``(start, end]``, per series (sorted by their labels, as
        Prometheus sorts them), every chunk's joined (a gauge's are rather placed on the step's clock
        chunk by chunk: ``raw_chunks``). ``thin_s``: of the samples of each ``thin_s`` seconds, only the
        latest is kept (a counter's increases are the same), so that what is held is bounded by the
        range's steps, not by the samples the server sends."""
        out: dict[tuple[tuple[str, str], ...], Raw] = {}
        for chunk in self.raw_chunks(selector, start, end, span_s, export, least_s):
            for key, labels, times_ms, values in chunk:
                if thin_s > 0:
                    times_ms, values = _thinned(times_ms, values, round(thin_s * 1000))
                into = out.get(key)
                if into is None:
                    into = out[key] = Raw(labels)
                into.extend(times_ms, values)
        return [out[key] for key in sorted(out)]

    def raw_chunks(
        self,
        selector: str,
        start: float,
        end: float,
        span_s: float,
        export: bool = False,
        least_s: float = MIN_SPAN_S,
    ) -> Iterator[list[tuple[tuple[tuple[str, str], ...], dict[str, str], list[int], list[float]]]]:
        """The raw samples of ``selector`` in ``(start, end]``, a chunk at a time, each chunk's series
        sorted by their labels (key, labels, times in ms, values), asked ``span_s`` seconds at a time: a
        range selector evaluated at each chunk's end, or VictoriaMetrics' export (``export``), whose
        samples are the same. A chunk the server refuses as too large, or whose answer exceeds
        RAW_BODY_BYTES (samples denser than the step needs), is asked again in halves down to
        ``least_s``, and the time that fit is where the next call starts: the caller holds one answer at
        a time, never the range's samples."""
        span = max(1, math.ceil(span_s))
        if self._span_fits:  # an earlier series of this server needed shorter chunks: start near there
            span = min(span, 2 * self._span_fits)
        least = max(1, math.ceil(least_s))
        path = "/api/v1/export" if export else "/api/v1/query"
        lo = start
        while lo < end:
            hi = min(end, lo + span)
            try:
                got = list(self._exported(selector, lo, hi) if export else self._selected(selector, lo, hi))
            except PromError as exc:
                if span > least and any(w in str(exc).lower() for w in _TOO_LARGE):
                    span = max(least, span // 2)
                    self._span_fits = span
                    continue
                raise
            except _SHAPE_ERRORS as exc:
                raise self._shape(path, exc) from None
            chunk = []
            for labels, times_ms, values in got:
                labels.pop("__name__", None)
                chunk.append((tuple(sorted(labels.items())), labels, times_ms, values))
                self.counts.samples += len(times_ms)
            del got
            chunk.sort(key=lambda c: c[0])
            yield chunk
            lo = hi

    def _selected(
        self, selector: str, lo: float, hi: float
    ) -> Iterator[tuple[dict[str, str], list[int], list[float]]]:
        """A range selector's raw samples (an instant query of ``selector[...]``): Prometheus sends each
        as [seconds, "value"]; they are converted a series at a time."""
        millis = math.ceil((hi - lo) * 1000)
        params = [("query", f"{selector}[{millis}ms]"), ("time", _ts(hi))]
        for item in self._items("/api/v1/query", params, ("data", "result"), RAW_BODY_BYTES):
            pairs = _pairs(item)
            if not pairs:
                continue
            times_ms = [round(_finite_time(t) * 1000) for t, _ in pairs]
            yield _finite(_labels(item["metric"]), times_ms, [_number(v) for _, v in pairs])

    def _exported(
        self, selector: str, lo: float, hi: float
    ) -> Iterator[tuple[dict[str, str], list[int], list[float]]]:
        """VictoriaMetrics' export: a line of JSON per series (or per block of one), times already in
        milliseconds and values as numbers; each line parsed on its own."""
        params = [("match[]", selector), ("start", _ts(lo)), ("end", _ts(hi))]
        body = self._request("/api/v1/export", params, limit=RAW_BODY_BYTES)
        lo_ms = round(lo * 1000)
        for text in body.split(b"\n"):
            if not text.strip():
                continue
            try:
                line = json.loads(text)
            except (ValueError, RecursionError):
                raise PromError(f"{self.url}/api/v1/export did not answer JSON lines") from None
            if not isinstance(line, dict):
                raise TypeError("an export line is not an object")
            times_ms, values = line.get("timestamps") or [], line.get("values") or []
            if not isinstance(times_ms, list) or not isinstance(values, list) or len(times_ms) != len(values):
                raise ValueError("timestamps and values of different lengths")
            if not all(type(t) is int for t in times_ms):
                raise TypeError("a timestamp that is not a whole number of milliseconds")
            values = [_number(v) for v in values]
            if any(b <= a for a, b in itertools.pairwise(times_ms)):  # blocks out of order: put them in it
                pairs = sorted(dict(zip(times_ms, values, strict=True)).items())
                times_ms, values = [t for t, _ in pairs], [v for _, v in pairs]
            if times_ms and times_ms[0] <= lo_ms:  # the range selector's (lo, hi]
                keep = bisect.bisect_right(times_ms, lo_ms)
                times_ms, values = times_ms[keep:], values[keep:]
            yield _finite(_labels(line.get("metric", {})), list(times_ms), values)

    def query_range(
        self,
        expr: str,
        start: float,
        end: float,
        step: float,
        on_chunk: Callable[[], None] | None = None,
        points: int = MAX_POINTS_PER_SERIES,
    ) -> list[Series]:
        """``expr`` from ``start`` to ``end`` every ``step``, asked in chunks of at most ``points``
        points (MAX_POINTS_PER_SERIES); the same series' chunks joined, at most a point a step (a server
        answering more is thinned, not held). A chunk the server refuses as too large, or whose answer
        exceeds RAW_BODY_BYTES, is asked again in halves."""
        out: dict[tuple[tuple[str, str], ...], Series] = {}
        points = max(MIN_POINTS_PER_SERIES, min(points, MAX_POINTS_PER_SERIES))
        path = "/api/v1/query_range"
        t = start
        while t <= end:
            stop = min(end, t + (points - 1) * step)
            params = [("query", expr), ("start", _ts(t)), ("end", _ts(stop)), ("step", f"{step:g}")]
            try:
                got = [
                    (_labels(item["metric"]), _pairs(item))
                    for item in self._items(path, params, ("data", "result"), RAW_BODY_BYTES)
                ]
                read = [
                    (labels, [(_finite_time(ts), _number(v)) for ts, v in pairs]) for labels, pairs in got
                ]
            except PromError as exc:
                if points > MIN_POINTS_PER_SERIES and any(w in str(exc).lower() for w in _TOO_LARGE):
                    points //= 2
                    continue
                raise
            except _SHAPE_ERRORS as exc:
                raise self._shape(path, exc) from None
            for labels, samples in read:
                labels.pop("__name__", None)
                series = out.setdefault(tuple(sorted(labels.items())), Series(labels))
                for ts, v in sorted(samples):
                    # the first point of each step's slot (a server's extra points between are not held)
                    if math.isfinite(v) and (
                        not series.times or math.floor((ts - start) / step + 1e-6) > series.slot
                    ):
                        series.times.append(ts)
                        series.values.append(v)
                        series.slot = math.floor((ts - start) / step + 1e-6)
                self.counts.samples += len(samples)
            if on_chunk:
                on_chunk()
            t = stop + step
        return list(out.values())


def _proxy_for(host: str, https: bool) -> urllib.parse.SplitResult | None:
    """The proxy the environment names for ``host`` (as urllib reads HTTPS_PROXY, HTTP_PROXY and
    NO_PROXY), or None; a variable that is not a URL is one line naming it (never its credentials)."""
    scheme = "https" if https else "http"
    proxy = None if urllib.request.proxy_bypass(host) else urllib.request.getproxies().get(scheme)
    if not proxy:
        return None
    proxy = proxy if "://" in proxy else f"http://{proxy}"
    try:
        parsed = urllib.parse.urlsplit(proxy)
        parsed.port  # noqa: B018  (a port out of range raises here)
        if not parsed.hostname:
            raise ValueError("no host")
    except ValueError as exc:
        names = (f"{scheme}_proxy", f"{scheme.upper()}_PROXY")
        name = next((n for n in names if os.environ.get(n, "") in (proxy, proxy[7:])), names[1])
        shown = _USERINFO.sub("//", _clean(proxy, 100))
        raise PromError(f"{name}: {shown!r} is not a proxy URL ({_clean(str(exc))})") from None
    return parsed


def split_credentials(url: str, auth: Auth) -> tuple[str, Auth]:
    """``http://user:password@host``: the URL without its user information (which no message may show)
    and the basic auth it names, where no other credentials were given."""
    scheme, sep, rest = url.partition("://")
    host, slash, path = rest.partition("/")
    if not sep or "@" not in host:
        return url, auth
    info, _, host = host.rpartition("@")
    user, _, password = info.partition(":")
    if not auth.user and not auth.token:
        auth = Auth(urllib.parse.unquote(user), urllib.parse.unquote(password), auth.token, auth.ca_file)
    return f"{scheme}://{host}{slash}{path}", auth


def _labels(value: object) -> dict[str, str]:
    """A label set: an object of strings (anything else is the wrong shape)."""
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise TypeError("a label set that is not an object of strings")
    return value


def _pairs(item: object) -> list[tuple[object, object]]:
    """A matrix series' [time, "value"] pairs."""
    if not isinstance(item, dict):
        raise TypeError("a result that is not an object")
    _labels(item.get("metric", {}))
    pairs = item.get("values") or []
    if not isinstance(pairs, list) or not all(isinstance(p, list) and len(p) == 2 for p in pairs):
        raise TypeError("values that are not [time, value] pairs")
    return [(p[0], p[1]) for p in pairs]


def _number(value: object) -> float:
    """A sample's value: a number, or the API's decimal text of one (a hexadecimal or a word is not)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise TypeError(f"a sample value {value!r:.40}")
    if isinstance(value, str) and value.lower().lstrip("+-").startswith("0x"):
        raise ValueError(f"a sample value {value!r:.40}")
    return float(value)


def _finite_time(value: object) -> float:
    """A sample's time in seconds: a finite number (NaN, infinities and text are the wrong shape)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"a sample time {value!r:.40}")
    t = float(value)
    if not math.isfinite(t):
        raise ValueError(f"a sample time {value!r:.40}")
    return t


def _array_at(
    text: str, i: int, where: tuple[str, ...], meta: dict[str, object] | None
) -> Generator[object, None, int]:
    """The elements of the array at key path ``where`` of the JSON object at ``text[i]``, each decoded
    on its own, returning where the object ends; its other members go to ``meta`` (the top level's
    status and error)."""
    i = _skip(text, i)
    if text[i] != "{":
        raise ValueError("not an object")
    i = _skip(text, i + 1)
    if text[i] == "}":
        return i + 1
    while True:
        key, i = _DEC.raw_decode(text, i)
        if not isinstance(key, str):
            raise ValueError("a key that is not a string")
        i = _skip(text, i)
        if text[i] != ":":
            raise ValueError("no ':' after a key")
        i = _skip(text, i + 1)
        if key == where[0] and len(where) > 1 and text[i] == "{":
            i = yield from _array_at(text, i, where[1:], None)
        elif key == where[0] and len(where) == 1:
            i = yield from _elements(text, i)
        else:
            value, i = _DEC.raw_decode(text, i)
            if meta is not None:
                meta[key] = value
        i = _skip(text, i)
        if text[i] == "}":
            return i + 1
        if text[i] != ",":
            raise ValueError("no ',' or '}' after a member")
        i = _skip(text, i + 1)


def _whole(doc: object, where: tuple[str, ...], meta: dict[str, object]) -> Iterator[object]:
    """``_array_at`` of a document parsed whole."""
    if not isinstance(doc, dict):
        raise ValueError("not an object")
    meta.update((k, v) for k, v in doc.items() if k != where[0])
    value: object = doc
    for key in where:
        value = value.get(key) if isinstance(value, dict) else None
    if value is None:
        return
    if not isinstance(value, list):
        raise ValueError("not an array")
    yield from value


def _skip(text: str, i: int) -> int:
    """Past the blanks at ``i``."""
    return _WS.match(text, i).end()  # type: ignore[union-attr]


def _elements(text: str, i: int) -> Generator[object, None, int]:
    """Each element of the array at ``text[i]`` (null: none), returning where the array ends."""
    if text.startswith("null", i):
        return i + 4
    if text[i] != "[":
        raise ValueError("not an array")
    i = _skip(text, i + 1)
    if text[i] == "]":
        return i + 1
    while True:
        value, i = _DEC.raw_decode(text, i)
        yield value
        i = _skip(text, i)
        if text[i] == "]":
            return i + 1
        if text[i] != ",":
            raise ValueError("no ',' or ']' after an element")
        i = _skip(text, i + 1)


def _finite(
    labels: dict[str, str], times_ms: list[int], values: list[float]
) -> tuple[dict[str, str], list[int], list[float]]:
    """A series' samples less the NaNs (a staleness marker) and infinities, should any come back, in
    time order (a server's answer out of order is put in it; one sample a time)."""
    if all(map(math.isfinite, values)) and all(a < b for a, b in itertools.pairwise(times_ms)):
        return labels, times_ms, values
    kept = sorted(dict(p for p in zip(times_ms, values, strict=True) if math.isfinite(p[1])).items())
    return labels, [t for t, _ in kept], [v for _, v in kept]


def _thinned(times_ms: list[int], values: list[float], every_ms: int) -> tuple[list[int], list[float]]:
    """The latest sample of each ``every_ms`` (samples in time order)."""
    if len(times_ms) < 2 or all(b // every_ms > a // every_ms for a, b in itertools.pairwise(times_ms)):
        return times_ms, values
    keep = [
        i
        for i in range(len(times_ms))
        if i + 1 == len(times_ms) or times_ms[i + 1] // every_ms > times_ms[i] // every_ms
    ]
    return [times_ms[i] for i in keep], [values[i] for i in keep]


def _ts(t: float) -> str:
    return f"{t:.3f}"


def _api_error(body: bytes) -> str:
    """The API's own ``error`` text of a failed call, when it sent one."""
    try:
        doc = json.loads(body or b"{}")
    except (ValueError, RecursionError):
        return ""
    error = doc.get("error") if isinstance(doc, dict) else None
    return f": {_clean(str(error))}" if error else ""


def _retry_after(value: str | None, default: float) -> float:
    """Retry-After's seconds (a number, or an HTTP date), else ``default``."""
    if not value:
        return default
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError, OverflowError):
            return default
        if when is None or when.tzinfo is None:
            return default
        seconds = when.timestamp() - time.time()
    return max(0.0, seconds) if math.isfinite(seconds) else default


def _clean(text: str, limit: int = 300) -> str:
    """A server's text as part of one line: control characters blanked, cut to ``limit``."""
    flat = "".join(c if c.isprintable() else " " for c in text)
    return flat if len(flat) <= limit else flat[:limit] + "..."


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return _clean(str(exc) or type(exc).__name__)
