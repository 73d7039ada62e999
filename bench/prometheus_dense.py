"""What a server's sample spacing costs ``replay --prometheus``: one node, one GPU, one series
(dcgm-exporter's utilisation) served by a small fake Prometheus on loopback at each spacing given
(default 15 s, a normal scrape, and 4 ms, a server sending far more samples than the step needs), read
at the same step by the command line in a child process.

Prints, per spacing, the samples read, the queries, the wall time and the child's peak RSS: what a
node holds is its steps, so the peak at 4 ms stays within a small factor of the peak at 15 s (one
bounded answer at a time is parsed), while the samples read grow 3,750 times.

    python bench/prometheus_dense.py [--from=-1d] [--step 15] [--spacing-ms 15000,4] [--code DIR]

``--code DIR`` runs the command from another checkout (a before/after comparison).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

REPO = Path(__file__).resolve().parent.parent
METRIC = "DCGM_FI_DEV_GPU_UTIL"
WINDOW = re.compile(r"\[(\d+)(ms|s)\]")
# the child prints its own peak resident memory as it exits (kB, Linux' ru_maxrss)
CHILD = (
    "import atexit, resource, sys; "
    "atexit.register(lambda: print('PEAK_RSS_KB', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "
    "file=sys.stderr)); "
    "from exporter.cli import main; sys.exit(main(sys.argv[1:]))"
)


def matrix(query: str, at_ms: int, spacing_ms: int) -> Iterator[bytes]:
    """A range selector's answer, made a piece at a time: every sample ``spacing_ms`` apart."""
    size, unit = WINDOW.search(query).groups()  # type: ignore[union-attr]
    window = int(size) * (1 if unit == "ms" else 1000)
    last = at_ms // spacing_ms * spacing_ms
    first = (at_ms - window) // spacing_ms * spacing_ms + spacing_ms
    yield b'{"status":"success","data":{"resultType":"matrix","result":['
    yield b'{"metric":{"Hostname":"n0","gpu":"0"},"values":['
    per = 20_000 * spacing_ms
    for lo in range(first, last + 1, per):
        hi = min(last, lo + per - spacing_ms)
        piece = ",".join(f'[{t / 1000:.3f},"{t % 97}"]' for t in range(lo, hi + 1, spacing_ms))
        yield (("," if lo != first else "") + piece).encode()
    yield b"]}]}}"


def server(spacing_ms: int) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            self._answer()

        def do_POST(self) -> None:
            self._answer()

        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            split = urlsplit(self.path)
            form = parse_qs(self.rfile.read(length).decode() if length else split.query)
            try:
                if split.path == "/api/v1/query":
                    self.send_response(200)
                    self.end_headers()  # no length: the answer ends with the connection
                    at_ms = round(float(form["time"][0]) * 1000)
                    for piece in matrix(form["query"][0], at_ms, spacing_ms):
                        self.wfile.write(piece)
                    return
                if split.path == "/api/v1/series":
                    found = METRIC in form["match[]"][0]
                    data: object = [{"__name__": METRIC, "Hostname": "n0", "gpu": "0"}] if found else []
                elif split.path.startswith("/api/v1/label/"):
                    data = [METRIC]
                else:
                    self.send_error(404)
                    return
                body = json.dumps({"status": "success", "data": data}).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client stopped reading an answer past its bound

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


def run(spacing_ms: int, start: str, step: str, code: Path) -> dict[str, float]:
    httpd = server(spacing_ms)
    url = f"http://127.0.0.1:{httpd.server_address[1]}"
    args = ["replay", "--prometheus", url, "--from", start, "--step", step, "--jobs", "1", "--json"]
    if "--max-duration" in (code / "exporter/offline/promhistory/command.py").read_text():
        args += ["--max-duration", "86400"]  # the budget is not what is measured here
    env = {**os.environ, "PYTHONPATH": str(code)}
    began = time.monotonic()
    try:
        done = subprocess.run(
            [sys.executable, "-c", CHILD, *args], cwd=code, env=env, capture_output=True, text=True
        )
    finally:
        httpd.shutdown()
        httpd.server_close()
    wall = time.monotonic() - began
    peak = next(
        (int(line.split()[1]) for line in done.stderr.splitlines() if line.startswith("PEAK_RSS_KB")), 0
    )
    read: dict[str, float] = {}
    if done.returncode == 0:
        doc = json.loads(done.stdout.splitlines()[-1])
        read = {**doc["fleet"]["read"], "rows": doc.get("rows", 0)}
    else:
        errors = [
            line
            for line in done.stderr.splitlines()
            if not line.startswith(("PEAK_RSS", "gpu-bottleneck-exporter: read "))
        ]
        print(f"  spacing {spacing_ms} ms: exit {done.returncode}: {' '.join(errors)[:300]}")
    return {"rc": done.returncode, "wall_s": wall, "peak_mib": peak / 1024, **read}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="start", default="-1d")
    parser.add_argument("--step", default="15")
    parser.add_argument("--spacing-ms", default="15000,4")
    parser.add_argument("--code", type=Path, default=REPO, help="the checkout whose command is run")
    args = parser.parse_args(argv)
    print(
        f"replay --prometheus, 1 node x 1 GPU x 1 series, --from {args.start} --step {args.step}, {args.code}"
    )
    print(
        f"{'spacing':>10} {'samples read':>14} {'queries':>8} {'held':>8} {'wall s':>8} {'peak RSS MiB':>13}"
    )
    for spacing in (int(s) for s in args.spacing_ms.split(",")):
        r = run(spacing, args.start, args.step, args.code)
        steps = r.get("rows", 0)  # the samples placed on the step's clock: what the node held, a GPU
        print(
            f"{spacing / 1000:>9g}s {r.get('samples', 0):>14,.0f} {r.get('queries', 0):>8,.0f} "
            f"{steps:>8,} {r['wall_s']:>8.1f} {r['peak_mib']:>13.1f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
