"""The Prometheus HTTP API (Prometheus and VictoriaMetrics answer it alike): series discovery, range
queries and raw samples cut into bounded chunks (VictoriaMetrics' /api/v1/export where the server has
it), with the authentication other Prometheus clients take (basic auth, a bearer token, a CA file), and
every failure as one line (``PromError``)."""

from __future__ import annotations

import base64
import bisect
import itertools
import json
import math
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

# Prometheus refuses a range query of more than 11,000 points per series; a chunk stays under it
MAX_POINTS_PER_SERIES = 10_000
# a chunk the server refuses as too large is halved down to this many points before giving up
MIN_POINTS_PER_SERIES = 100
# seconds one request may take: a week's chunk of one node answers in well under a second
DEFAULT_TIMEOUT_S = 60.0
# an answer larger than this is not one node's chunk (the server ignored the bounds)
MAX_BODY_BYTES = 512 * 1024 * 1024
# a chunk of raw samples the server refuses as too large is halved down to this many seconds
MIN_SPAN_S = 3600
_TOO_LARGE = ("too many", "exceed", "maxsamples", "max_samples", "limit")


class PromError(Exception):
    """The server could not be read: the message is one line naming the URL and why."""


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
        return Path(path).read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise PromError(f"{flag}: cannot read {path} ({exc.strerror or exc})") from None


@dataclass
class Series:
    labels: dict[str, str]
    times: list[float] = field(default_factory=list)
    values: list[float] = field(default_factory=list)


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
    def __init__(self, url: str, auth: Auth = Auth(), timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        parsed = urllib.parse.urlparse(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise PromError(f"--prometheus: {url!r} is not an http:// or https:// URL")
        self.url = url.rstrip("/")
        self.auth = auth
        self.timeout_s = timeout_s
        self.counts = Counts()
        self._context: ssl.SSLContext | None = None
        if parsed.scheme == "https":
            try:
                self._context = ssl.create_default_context(cafile=auth.ca_file or None)
            except (OSError, ssl.SSLError) as exc:
                raise PromError(f"--prometheus-ca-file: cannot load {auth.ca_file} ({exc})") from None

    def _request(self, path: str, params: list[tuple[str, str]], post: bool = True) -> bytes:
        """Ask the API (a form POST, long selectors fit; GET where the API takes no POST) and return its
        answer's body; a failure is a PromError of one line."""
        form = urllib.parse.urlencode(params)
        if post:
            request = urllib.request.Request(
                f"{self.url}{path}",
                data=form.encode(),
                headers={"Content-Type": "application/x-www-form-urlencoded", **self.auth.headers()},
            )
        else:
            request = urllib.request.Request(f"{self.url}{path}?{form}", headers=self.auth.headers())
        began = time.monotonic()
        self.counts.queries += 1
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s, context=self._context) as answer:
                raw = answer.read(MAX_BODY_BYTES + 1)
        except urllib.error.HTTPError as exc:
            raise PromError(f"{self.url} answered HTTP {exc.code} ({exc.reason}){_api_error(exc)}") from None
        except urllib.error.URLError as exc:
            reason = exc.reason
            if isinstance(reason, TimeoutError):
                raise PromError(f"{self.url}: no answer within {self.timeout_s:g} s") from None
            raise PromError(f"cannot reach {self.url} ({reason})") from None
        except TimeoutError:
            raise PromError(f"{self.url}: no answer within {self.timeout_s:g} s") from None
        except (OSError, ValueError) as exc:
            raise PromError(f"cannot reach {self.url} ({exc})") from None
        finally:
            self.counts.seconds += time.monotonic() - began
        if len(raw) > MAX_BODY_BYTES:
            raise PromError(f"{self.url}{path}: an answer over {MAX_BODY_BYTES >> 20} MiB")
        return raw

    def _call(self, path: str, params: list[tuple[str, str]], post: bool = True) -> object:
        """The API's ``data`` for a call (``_request``); an answer that is not the API's is one line."""
        raw = self._request(path, params, post)
        try:
            doc = json.loads(raw)
        except ValueError:
            raise PromError(f"{self.url}{path} did not answer JSON: is it a Prometheus API?") from None
        if not isinstance(doc, dict) or doc.get("status") != "success":
            error = doc.get("error") if isinstance(doc, dict) else None
            raise PromError(f"{self.url}{path}: {error or 'not a Prometheus API answer'}")
        return doc.get("data")

    def series(self, match: str, start: float, end: float) -> list[dict[str, str]]:
        data = self._call("/api/v1/series", [("match[]", match), ("start", _ts(start)), ("end", _ts(end))])
        return [dict(d) for d in data] if isinstance(data, list) else []

    def label_values(self, label: str, match: str, start: float, end: float) -> list[str]:
        path = f"/api/v1/label/{urllib.parse.quote(label)}/values"
        data = self._call(path, [("match[]", match), ("start", _ts(start)), ("end", _ts(end))], post=False)
        return [str(v) for v in data] if isinstance(data, list) else []

    def raw_times(self, expr: str, at: float, window_s: float) -> list[list[float]]:
        """The raw sample times of ``expr`` over ``window_s`` before ``at``, per series."""
        data = self._call("/api/v1/query", [("query", f"{expr}[{int(window_s)}s]"), ("time", _ts(at))])
        result = data.get("result", []) if isinstance(data, dict) else []
        return [[float(t) for t, _ in item.get("values", [])] for item in result]

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
        except ValueError:
            return False
        return isinstance(line, dict) and "metric" in line

    def raw(self, selector: str, start: float, end: float, span_s: float, export: bool = False) -> list[Raw]:
        """The raw samples of ``selector`` in ``(start, end]``, per series (sorted by their labels, as
        Prometheus sorts them), asked in chunks of ``span_s`` seconds: a range selector evaluated at
        each chunk's end, or VictoriaMetrics' export (``export``), whose samples are the same."""
        out: dict[tuple[tuple[str, str], ...], Raw] = {}
        span = max(1, math.ceil(span_s))
        lo = start
        while lo < end:
            hi = min(end, lo + span)
            try:
                got = self._exported(selector, lo, hi) if export else self._selected(selector, lo, hi)
            except PromError as exc:
                if span > MIN_SPAN_S and any(w in str(exc).lower() for w in _TOO_LARGE):
                    span //= 2
                    continue
                raise
            for labels, times_ms, values in got:
                labels.pop("__name__", None)
                key = tuple(sorted(labels.items()))
                into = out.get(key)
                if into is None:
                    into = out[key] = Raw(labels)
                into.extend(times_ms, values)
                self.counts.samples += len(times_ms)
            lo = hi
        return [out[key] for key in sorted(out)]

    def _selected(
        self, selector: str, lo: float, hi: float
    ) -> Iterator[tuple[dict[str, str], list[int], list[float]]]:
        """A range selector's raw samples (an instant query of ``selector[...]``): Prometheus sends each
        as [seconds, "value"]; they are converted a series at a time."""
        millis = math.ceil((hi - lo) * 1000)
        data = self._call("/api/v1/query", [("query", f"{selector}[{millis}ms]"), ("time", _ts(hi))])
        for item in data.get("result", []) if isinstance(data, dict) else []:
            pairs = item.get("values") or []
            if not pairs:
                continue
            stamps, texts = zip(*pairs, strict=True)
            yield _finite(
                dict(item.get("metric", {})), [round(t * 1000) for t in stamps], list(map(float, texts))
            )

    def _exported(
        self, selector: str, lo: float, hi: float
    ) -> Iterator[tuple[dict[str, str], list[int], list[float]]]:
        """VictoriaMetrics' export: a line of JSON per series (or per block of one), times already in
        milliseconds and values as numbers; read as one JSON document."""
        body = self._request("/api/v1/export", [("match[]", selector), ("start", _ts(lo)), ("end", _ts(hi))])
        body = body.strip()
        if not body:
            return
        try:
            lines = json.loads(b"[" + body.replace(b"\n", b",") + b"]")
        except ValueError:
            raise PromError(f"{self.url}/api/v1/export did not answer JSON lines") from None
        lo_ms = round(lo * 1000)
        for line in lines:
            times_ms, values = line.get("timestamps") or [], line.get("values") or []
            if any(b <= a for a, b in itertools.pairwise(times_ms)):  # blocks out of order: put them in it
                pairs = sorted(dict(zip(times_ms, values, strict=True)).items())
                times_ms, values = [t for t, _ in pairs], [v for _, v in pairs]
            if times_ms and times_ms[0] <= lo_ms:  # the range selector's (lo, hi]
                keep = bisect.bisect_right(times_ms, lo_ms)
                times_ms, values = times_ms[keep:], values[keep:]
            yield _finite(dict(line.get("metric", {})), list(times_ms), [float(v) for v in values])

    def query_range(
        self,
        expr: str,
        start: float,
        end: float,
        step: float,
        on_chunk: Callable[[], None] | None = None,
    ) -> list[Series]:
        """``expr`` from ``start`` to ``end`` every ``step``, asked in chunks of at most
        MAX_POINTS_PER_SERIES points; the same series' chunks joined. A chunk the server refuses as too
        large is asked again in halves."""
        out: dict[tuple[tuple[str, str], ...], Series] = {}
        points = MAX_POINTS_PER_SERIES
        t = start
        while t <= end:
            stop = min(end, t + (points - 1) * step)
            try:
                data = self._call(
                    "/api/v1/query_range",
                    [("query", expr), ("start", _ts(t)), ("end", _ts(stop)), ("step", f"{step:g}")],
                )
            except PromError as exc:
                if points > MIN_POINTS_PER_SERIES and any(w in str(exc).lower() for w in _TOO_LARGE):
                    points //= 2
                    continue
                raise
            for item in data.get("result", []) if isinstance(data, dict) else []:
                labels = dict(item.get("metric", {}))
                labels.pop("__name__", None)
                series = out.setdefault(tuple(sorted(labels.items())), Series(labels))
                for ts, value in item.get("values", []):
                    v = float(value)
                    if math.isfinite(v):
                        series.times.append(float(ts))
                        series.values.append(v)
                self.counts.samples += len(item.get("values", []))
            if on_chunk:
                on_chunk()
            t = stop + step
        return list(out.values())


def _finite(
    labels: dict[str, str], times_ms: list[int], values: list[float]
) -> tuple[dict[str, str], list[int], list[float]]:
    """A series' samples less the NaNs (a staleness marker) and infinities, should any come back."""
    if all(map(math.isfinite, values)):
        return labels, times_ms, values
    kept = [(t, v) for t, v in zip(times_ms, values, strict=True) if math.isfinite(v)]
    return labels, [t for t, _ in kept], [v for _, v in kept]


def _ts(t: float) -> str:
    return f"{t:.3f}"


def _api_error(exc: urllib.error.HTTPError) -> str:
    """The API's own ``error`` text of a failed call, when it sent one."""
    try:
        doc = json.loads(exc.read(64 * 1024) or b"{}")
    except (ValueError, OSError):
        return ""
    error = doc.get("error") if isinstance(doc, dict) else None
    return f": {str(error)[:300]}" if error else ""
