"""``replay --prometheus``'s flags, read into a ``Request``, and its progress line."""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Callable

from exporter.offline.promhistory.client import DEFAULT_TIMEOUT_S, Auth, PromError, split_credentials
from exporter.offline.promhistory.history import MAX_STEP_S, Progress, Request
from exporter.policy.thresholds import PROMETHEUS_FUTURE_MARGIN, PROMETHEUS_MAX_DURATION

_RELATIVE = re.compile(r"^-(\d+(?:\.\d+)?)([smhdw])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
DEFAULT_FROM = "-1d"
# a progress line on stderr at most this often, once reading has taken this long
PROGRESS_EVERY_S = 5.0
# the finest step: a scrape is a fraction of a second at the finest, and the step's clock is in ms
MIN_STEP_S = 0.1
# the longest --max-duration taken: a month (a run longer than that is a mistake in the unit)
MAX_DURATION_LIMIT_S = 30 * 86400.0


def add_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "reading a Prometheus instead of a file (docs/diagnose.md): dcgm-exporter, nvidia_gpu_exporter or "
        "this exporter's series, node_exporter's beside them"
    )
    group.add_argument(
        "--prometheus",
        metavar="URL",
        help="a Prometheus or VictoriaMetrics HTTP API (http://prometheus:9090)",
    )
    group.add_argument(
        "--from",
        dest="time_from",
        metavar="TIME",
        help=f"start: RFC 3339 or '-7d' style (default {DEFAULT_FROM})",
    )
    group.add_argument(
        "--to", dest="time_to", metavar="TIME", help="end: RFC 3339, '-1h' style or 'now' (default)"
    )
    group.add_argument(
        "--selector",
        metavar="MATCHERS",
        help='PromQL label matchers for the GPU series: \'namespace="ml",pod=~"train-.*"\'',
    )
    group.add_argument(
        "--step",
        metavar="SECONDS",
        help="seconds between the samples read (default: the series' scrape interval)",
    )
    group.add_argument("--prometheus-user", metavar="USER", help="basic auth user")
    group.add_argument("--prometheus-password-file", metavar="FILE", help="basic auth password, from a file")
    group.add_argument("--prometheus-bearer-token-file", metavar="FILE", help="a bearer token, from a file")
    group.add_argument("--prometheus-ca-file", metavar="FILE", help="CA certificates for an https:// URL")
    group.add_argument(
        "--jobs",
        metavar="N",
        type=int,
        help="processes judging the nodes, one node each at a time (default: one per core)",
    )
    group.add_argument(
        "--recompute",
        action="store_true",
        help="judge the nodes this exporter watched from their raw readings at the step, rather than "
        "read back the ledger and verdicts it exported",
    )
    group.add_argument(
        "--prometheus-timeout",
        metavar="SECONDS",
        help=f"seconds one request may take, its whole answer (default {DEFAULT_TIMEOUT_S:g})",
    )
    group.add_argument(
        "--max-duration",
        metavar="SECONDS",
        help="seconds the whole run may spend reading the Prometheus before it gives up "
        f"(default {PROMETHEUS_MAX_DURATION.value:g})",
    )


def parse_time(text: str, now: float) -> float:
    """RFC 3339 (or any time replay's --start takes), '-7d' style before now, or 'now'."""
    word = text.strip()
    if word == "now":
        return now
    match = _RELATIVE.match(word)
    if match:
        return now - float(match.group(1)) * _UNIT_S[match.group(2)]
    from exporter.offline.traceformats.base import parse_time as absolute

    try:
        return absolute(word)
    except (ValueError, OverflowError):
        raise ValueError(
            f"{text!r} is not a time (RFC 3339 like 2026-11-20T00:00:00Z, '-7d', '-12h' or 'now')"
        ) from None


def _seconds(text: str | None, flag: str, limit: float, least: float = 0.0) -> float | None:
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        raise PromError(f"{flag}: {text!r} is not a number of seconds") from None
    if not (least < value if least == 0 else least <= value) or not value <= limit:
        low = "more than 0" if least == 0 else f"at least {least:g}"
        raise PromError(f"{flag}: must be {low} and at most {limit:g} seconds, not {text!r}")
    return value


def request_from(args: argparse.Namespace, now: float | None = None) -> Request:
    """The flags as a Request; a mistake is a PromError of one line naming the flag."""
    now = time.time() if now is None else now
    try:
        start = parse_time(args.time_from or DEFAULT_FROM, now)
        end = parse_time(args.time_to or "now", now)
    except ValueError as exc:
        raise PromError(f"--from/--to: {exc}") from None
    if end <= start:
        raise PromError("--from must be before --to")
    margin = PROMETHEUS_FUTURE_MARGIN.value
    if end > now + margin:  # no sample is in the future: a range past now would read nothing, at length
        raise PromError(
            f"--to: {args.time_to!r} is {_span(end - now)} past now; no sample is written in the future "
            f"(at most {margin:g} s past this machine's clock is taken): give 'now' or an earlier time"
        )
    if start < 0:  # a relative time far back ('-99999999w'): as RFC 3339, nothing is before 1970
        raise PromError(f"--from: {args.time_from!r} is before 1970")
    selector = (args.selector or "").strip().removeprefix("{").removesuffix("}").strip()
    auth = Auth.from_files(
        args.prometheus_user,
        args.prometheus_password_file,
        args.prometheus_bearer_token_file,
        args.prometheus_ca_file,
    )
    # http://user:password@host: the basic auth it names, and the URL without it for every message and
    # output that names the server (the password would be printed otherwise)
    url, auth = split_credentials(args.prometheus or "", auth)
    args.prometheus = url
    return Request(
        url=url,
        start=start,
        end=end,
        selector=selector,
        step=_seconds(args.step, "--step", MAX_STEP_S, MIN_STEP_S),
        auth=auth,
        timeout_s=_seconds(args.prometheus_timeout, "--prometheus-timeout", 3600.0) or DEFAULT_TIMEOUT_S,
        budget_s=_seconds(getattr(args, "max_duration", None), "--max-duration", MAX_DURATION_LIMIT_S)
        or PROMETHEUS_MAX_DURATION.value,
        jobs=_jobs(getattr(args, "jobs", None)),
        recompute=bool(getattr(args, "recompute", False)),
    )


def _span(seconds: float) -> str:
    """A length of time as a person reads it (the largest unit that fits)."""
    for unit, size in (("days", 86400), ("hours", 3600), ("minutes", 60)):
        if seconds >= size:
            return f"{seconds / size:.4g} {unit}"
    return f"{seconds:.0f} s"


def _jobs(jobs: int | None) -> int | None:
    if jobs is not None and jobs < 1:
        raise PromError(f"--jobs: must be 1 or more, not {jobs}")
    return jobs


def progress_printer() -> Callable[[Progress], None]:
    """A line on stderr every few seconds while a long range is read."""
    began = time.monotonic()
    last = [began]

    def show(p: Progress) -> None:
        now = time.monotonic()
        if now - last[0] < PROGRESS_EVERY_S:
            return
        last[0] = now
        print(
            f"gpu-bottleneck-exporter: read {p.nodes_done}/{p.nodes} node(s), {p.queries} queries, "
            f"{p.samples / 1e6:.2f} M samples, {now - began:.0f} s",
            file=sys.stderr,
        )

    return show
