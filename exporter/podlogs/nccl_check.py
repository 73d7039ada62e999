"""``nccl-check LOG...``: the live log parser over saved logs (torchrun/mpirun output, ``kubectl logs``,
CRI files, .gz), printed as the bring-up checklist. Exit 0 when every item passes, 1 on warnings, 2 on
failures; a file that cannot be read is one line on stderr and exit 2 as well."""

from __future__ import annotations

import gzip
import io
import json
import sys
import zlib
from collections.abc import Iterator
from typing import IO

from exporter.podlogs.logparse import LogState, checks, exit_status, plain_lines, summary

LINE_LIMIT = 1 << 20  # a "line" longer than this is read in pieces: a log without newlines stays bounded


class CheckError(Exception):
    """A log that cannot be read: one line on stderr, exit status 2."""


def _lines(path: str) -> Iterator[str]:
    try:
        raw: IO[bytes] = sys.stdin.buffer if path == "-" else open(path, "rb")  # noqa: SIM115
    except OSError as exc:
        raise CheckError(f"{path}: cannot read ({exc.strerror})") from None
    try:
        head = raw.peek(2)[:2] if hasattr(raw, "peek") else b""
        stream: IO[bytes] = gzip.GzipFile(fileobj=raw) if head == b"\x1f\x8b" else raw  # type: ignore[assignment]
        text = io.TextIOWrapper(stream, encoding="utf-8", errors="replace", newline=None)
        while line := text.readline(LINE_LIMIT):
            yield line.rstrip("\r\n")
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise CheckError(f"{path}: cannot read ({getattr(exc, 'strerror', None) or exc})") from None
    except zlib.error as exc:  # a good gzip header over a corrupt body
        raise CheckError(f"{path}: cannot read (corrupt gzip data: {str(exc).rsplit(': ', 1)[-1]})") from None
    finally:
        if raw is not sys.stdin.buffer:
            raw.close()


def check(paths: list[str]) -> LogState:
    state = LogState()
    for path in paths:
        for text, t in plain_lines(_lines(path)):
            state.feed(text, t, progress=False)
    return state


MARK = {"pass": "PASS", "warn": "WARN", "fail": "FAIL"}


def human(state: LogState) -> str:
    intra = ", ".join(sorted(state.transports["intra"])) or "none seen"
    inter = ", ".join(sorted(state.transports["inter"])) or "none seen"
    lines = [
        f"NCCL {state.version or '?'}, network {state.network or '?'}"
        f"{' (GPUDirect RDMA)' if state.gdrdma else ''}; intra-node: {intra}; inter-node: {inter}",
        "",
    ]
    found = checks(state)
    for c in found:
        lines.append(f"{MARK[c.status]}  {c.name:22s} {c.evidence}")
        if c.fix:
            lines.append(f"      {'':22s} fix: {c.fix}")
    warns = sum(c.status == "warn" for c in found)
    fails = sum(c.status == "fail" for c in found)
    errors = ", ".join(f"{k} x{n}" for k, n in sorted(state.errors.items()) if n) or "none"
    lines += ["", f"NCCL WARN lines: {state.warnings}; job-ending errors: {errors}"]
    lines.append(f"result: {len(found) - warns - fails} passed, {warns} warnings, {fails} failures")
    return "\n".join(lines)


def run(paths: list[str], as_json: bool) -> int:
    try:
        state = check(paths)
    except CheckError as exc:
        print(f"gpu-bottleneck-exporter: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(summary(state)) if as_json else human(state))
    return exit_status(checks(state))
