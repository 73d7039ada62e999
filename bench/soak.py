"""Soak: the exporter on a simulated 8-GPU node whose pods churn, under 50 concurrent scrapers and 500
slow clients, for N minutes.

    python bench/soak.py                # 10 minutes
    python bench/soak.py --minutes 2    # shorter

The exporter runs as its own process (the real server: connection guard, header deadline, TLS-less
plain HTTP) with a new pod taking all GPUs every 10 s through the simulated kubelet. The load runs in
this process: 50 scrapers on kept-alive connections scraping every second with Prometheus' headers,
250 slowloris clients (a request header trickled, one line every 2 s, reconnecting when cut) and 250
half-open ones (connect, send nothing, reconnect when cut). Printed: failed scrapes, scrape latency,
the largest gap between two collections, RSS growth after warm-up, series per scrape.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import itertools
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

import httpx
import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.core import PROMETHEUS_HEADERS, free_port, percentile  # noqa: E402

TARGETS = {"failed_scrapes": 1, "scrape_p99_ms": 100.0, "max_collection_gap_s": 1.5, "rss_growth_mib": 5.0}
CHURN_S = 10.0  # a new pod takes the GPUs this often
SCRAPERS, SLOWLORIS, HALF_OPEN = 50, 250, 250


# ---- the exporter process --------------------------------------------------------------------------


def child(port: int, gpus: int, stats_path: Path) -> int:
    """The exporter serving a simulated node whose pods churn; writes its collection gaps at exit."""
    from exporter.app import Application, configure_logging, listen
    from exporter.config import Settings
    from exporter.server import serve
    from exporter.sim import SimulatedNode

    configure_logging("warning")
    node = SimulatedNode("healthy", n_gpus=gpus)
    module = node.install()
    node.host.start()
    settings = Settings(
        listen_address="127.0.0.1", port=port, interval_s=1.0, sim_gpus=gpus, log_level="warning"
    )
    settings = replace(settings, pod_resources_socket=node.kubelet_socket)
    app = Application(settings, module, node.host_options())
    arrivals: list[float] = []

    def on_gpu(identity, points) -> None:
        if identity.index == 0:
            arrivals.append(time.monotonic())

    app.sampler.gpu_listeners.append(on_gpu)
    stop = threading.Event()
    template = node.pods[0]

    def churn() -> None:
        n = 0
        while not stop.wait(CHURN_S):
            n += 1
            node.pods = [
                replace(
                    template, name=f"job-{n}-0", uid=f"6f1c2d3e-4b5a-4c6d-8e7f-{n:012x}", container="trainer"
                )
            ]

    threading.Thread(target=churn, daemon=True).start()
    sock = listen("127.0.0.1", port)
    try:
        serve(app, sock)
    finally:
        stop.set()
        gaps = [b - a for a, b in itertools.pairwise(arrivals[5:])]  # after the start
        stats_path.write_text(json.dumps({"collections": len(arrivals), "max_gap_s": max(gaps, default=0.0)}))
        node.close()
    return 0


# ---- the load --------------------------------------------------------------------------------------


class Load:
    def __init__(self, url: str, port: int, seconds: float) -> None:
        self.url, self.port, self.deadline = url, port, time.monotonic() + seconds
        self.latencies: list[float] = []
        self.failures: list[str] = []
        self.last_body = ""
        self.max_series = 0
        self.slow_cut = 0
        self.timeline: list[tuple[float, float]] = []

    async def scraper(self, offset: float) -> None:
        """One scraper on a kept-alive connection, every second. A minimal HTTP/1.1 client: the load
        generator's own work must not be what is measured (httpx costs milliseconds per scrape)."""
        request = (
            "GET /metrics HTTP/1.1\r\nHost: soak\r\n"
            + "".join(f"{k}: {v}\r\n" for k, v in PROMETHEUS_HEADERS.items())
            + "\r\n"
        ).encode()
        await asyncio.sleep(offset)
        tick, stream, n = time.monotonic(), None, 0
        while time.monotonic() < self.deadline:
            t0 = time.perf_counter()
            try:
                if stream is None:
                    stream = await asyncio.open_connection("127.0.0.1", self.port)
                reader, writer = stream
                writer.write(request)
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
                status = int(head.split(b" ", 2)[1])
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                body = await asyncio.wait_for(reader.readexactly(length), 10)
                elapsed = (time.perf_counter() - t0) * 1000
                if status != 200:
                    self.failures.append(f"status {status}")
                else:
                    self.latencies.append(elapsed)
                    self.timeline.append((time.monotonic(), elapsed))
                    if offset == 0 and n % 10 == 0:
                        self.count_series(
                            gzip.decompress(body) if b"content-encoding: gzip" in head.lower() else body
                        )
            except (OSError, ValueError, IndexError, asyncio.IncompleteReadError, TimeoutError) as exc:
                self.failures.append(f"{type(exc).__name__}: {exc}")
                if stream is not None:
                    stream[1].close()
                stream = None
            n += 1
            tick += 1.0
            await asyncio.sleep(max(0.0, tick - time.monotonic()))
        if stream is not None:
            stream[1].close()

    def count_series(self, body: bytes) -> None:
        self.last_body = body.decode()
        series = sum(1 for ln in self.last_body.splitlines() if ln and ln[0] != "#")
        self.max_series = max(self.max_series, series)

    async def slow(self, trickle: bool) -> None:
        while time.monotonic() < self.deadline:
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
            except OSError:
                await asyncio.sleep(0.5)
                continue
            try:
                if trickle:
                    writer.write(b"GET /metrics HTTP/1.1\r\nHost: soak\r\n")
                while time.monotonic() < self.deadline:
                    if trickle:
                        writer.write(b"X-Slow: 1\r\n")
                        await writer.drain()
                    try:
                        if await asyncio.wait_for(reader.read(1024), 2.0) == b"":
                            break  # cut by the server
                    except TimeoutError:
                        continue
                self.slow_cut += 1
            except OSError:
                self.slow_cut += 1
            finally:
                writer.close()
            await asyncio.sleep(1.0)  # a slow client comes back after a second

    async def scrape(self) -> None:
        await asyncio.gather(*(self.scraper(i / SCRAPERS) for i in range(SCRAPERS)))

    async def crawl(self) -> None:
        await asyncio.gather(*(self.slow(i < SLOWLORIS) for i in range(SLOWLORIS + HALF_OPEN)))


def slow_clients(port: int, seconds: float) -> int:
    """The slow clients, in a process of their own so their work does not delay the scrapers' clock."""
    load = Load(f"http://127.0.0.1:{port}", port, seconds)
    asyncio.run(load.crawl())
    print(json.dumps({"cut": load.slow_cut}))
    return 0


def soak(minutes: float, gpus: int) -> dict[str, float]:
    port = free_port()
    stats_path = Path(tempfile.mkdtemp()) / "stats.json"
    log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - read after the process exits
    proc = subprocess.Popen(
        [sys.executable, __file__, "--child", str(port), "--gpus", str(gpus), "--stats", str(stats_path)],
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    ps = psutil.Process(proc.pid)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/readyz", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.1)
    seconds = minutes * 60
    load = Load(url, port, seconds)
    rss: list[tuple[float, float]] = []

    def watch() -> None:
        start = time.monotonic()
        while time.monotonic() - start < seconds:
            rss.append((time.monotonic() - start, ps.memory_info().rss / 2**20))
            time.sleep(2)

    cpu0 = sum(ps.cpu_times()[:2])
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    crawler = subprocess.Popen(
        [sys.executable, __file__, "--slow-clients", str(port), "--minutes", str(minutes)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        asyncio.run(load.scrape())
        watcher.join(5)
        cpu = sum(ps.cpu_times()[:2]) - cpu0
        load.slow_cut = json.loads(crawler.communicate(timeout=60)[0].splitlines()[-1])["cut"]
    finally:
        crawler.kill()
        proc.terminate()
        proc.wait(30)
    log.seek(0)
    output = log.read()
    t0 = load.timeline[0][0] if load.timeline else 0.0
    slowest = sorted(load.timeline, key=lambda x: -x[1])[:5]
    stats = json.loads(stats_path.read_text()) if stats_path.exists() else {"max_gap_s": float("nan")}
    warm = min(60.0, seconds * 0.25)  # imports, first windows and caches settle in the first minute
    after = [m for t, m in rss if t >= warm] or [m for _, m in rss]
    return {
        "scrapes": len(load.latencies) + len(load.failures),
        "failed_scrapes": len(load.failures),
        "scrape_p50_ms": percentile(load.latencies, 0.5),
        "scrape_p99_ms": percentile(load.latencies, 0.99),
        "scrape_max_ms": max(load.latencies),
        "max_collection_gap_s": stats["max_gap_s"],
        "collections": stats.get("collections", 0),
        "rss_warm_mib": after[0],
        "rss_end_mib": after[-1],
        "rss_growth_mib": after[-1] - after[0],
        "series_last": sum(1 for ln in load.last_body.splitlines() if ln and ln[0] != "#"),
        "series_max": load.max_series,
        "pods_seen_last": len(
            {ln.split('pod="')[1].split('"')[0] for ln in load.last_body.splitlines() if 'pod="' in ln}
        ),
        "slow_connections_cut": load.slow_cut,
        "exporter_cpu_share": cpu / seconds,
        "tracebacks": output.count("Traceback"),
        "log_lines": len(output.splitlines()),
        "first_failures": load.failures[:3],  # type: ignore[dict-item]
        "slowest": [f"{ms:.1f} ms at {t - t0:.0f} s" for t, ms in slowest],  # type: ignore[dict-item]
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--stats", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--slow-clients", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.slow_clients:
        return slow_clients(args.slow_clients, args.minutes * 60)
    if args.child:
        return child(args.child, args.gpus, args.stats)
    print(
        f"soaking the exporter on a simulated {args.gpus}-GPU node for {args.minutes:g} min: {SCRAPERS} "
        f"scrapers, {SLOWLORIS} slowloris and {HALF_OPEN} half-open clients, a new pod every {CHURN_S:.0f} s",
        flush=True,
    )
    figures = soak(args.minutes, args.gpus)
    rows = [
        ("scrapes", "scrapes", ""),
        ("failed scrapes", "failed_scrapes", "0"),
        ("scrape latency p50 (ms)", "scrape_p50_ms", ""),
        ("scrape latency p99 (ms)", "scrape_p99_ms", "< 100"),
        ("scrape latency max (ms)", "scrape_max_ms", ""),
        ("largest gap between collections (s)", "max_collection_gap_s", "< 1.5"),
        ("collections", "collections", ""),
        ("RSS after warm-up (MiB)", "rss_warm_mib", ""),
        ("RSS at the end (MiB)", "rss_end_mib", ""),
        ("RSS growth (MiB)", "rss_growth_mib", "< 5"),
        ("series per scrape, last", "series_last", ""),
        ("series per scrape, most", "series_max", "bounded"),
        ("pods in the last scrape", "pods_seen_last", ""),
        ("slow connections cut by the server", "slow_connections_cut", ""),
        ("exporter CPU (cores busy, simulator included)", "exporter_cpu_share", ""),
        ("exporter log lines", "log_lines", ""),
        ("tracebacks in the exporter's log", "tracebacks", "0"),
    ]
    print(f"\n{'figure':40s} {'value':>10s}  target")
    for label, key, target in rows:
        print(f"{label:40s} {figures[key]:10.2f}  {target}")
    print("slowest scrapes:", ", ".join(figures["slowest"]))
    if figures["first_failures"]:
        print("first failures:", *figures["first_failures"], sep="\n  ")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    failed = [k for k, limit in TARGETS.items() if not figures[k] < limit] + (
        ["tracebacks"] if figures["tracebacks"] else []
    )
    print("\nall targets met" if not failed else f"\nmissed targets: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
