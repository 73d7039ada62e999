"""Soak: the exporter on a simulated 8-GPU node whose pods churn, under 50 concurrent scrapers and a
flood of hostile clients, for N minutes per scenario.

    python bench/soak.py                        # every scenario, 10 minutes each
    python bench/soak.py --minutes 2            # shorter
    python bench/soak.py --scenario push        # one of them: slow, push, tls

The exporter runs as its own process (the real server: connection guard, header and body deadlines)
with a new pod taking all GPUs every 10 s through the simulated kubelet. The scrapers run in this
process: 50 on kept-alive connections scraping every second with Prometheus' headers, connected before
the flood begins (as Prometheus is), and one more opening a new connection for each scrape, every
second, reported apart. The flood runs in a process of its own, each client reconnecting a second after
the server cuts it:

- slow: plain HTTP; 250 slowloris clients (a request header trickled, one line every 2 s) and 250
  half-open ones (connect, send nothing).
- push: plain HTTP with --progress-api on; 1,100 clients sending a POST /v1/progress header that
  announces a 1,000-byte body, then one byte of it, and nothing more.
- tls: TLS (a web config with a test certificate, the scrapers in TLS too); 1,100 clients that finish
  the handshake and send nothing.

Printed per scenario: failed scrapes, scrape latency (kept-alive; and connect + scrape on a new
connection, which must fit Prometheus' 10 s scrape timeout), the largest gap between two collections,
RSS (after warm-up, its growth, its peak throughout), series per scrape, against the scenario's targets.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import itertools
import json
import os
import resource
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import httpx
import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.core import PROMETHEUS_HEADERS, free_port, percentile  # noqa: E402

CHURN_S = 10.0  # a new pod takes the GPUs this often
SCRAPERS, SLOWLORIS, HALF_OPEN, FLOOD = 50, 250, 250, 1100
CHART_MEMORY_LIMIT_MIB = 256.0  # the Helm chart's resources.limits.memory
SCRAPE_TIMEOUT_MS = 10_000.0  # Prometheus' default scrape timeout: a new connection's scrape must fit
# a progress report whose header announces 1,000 bytes of body, of which one byte ever comes
STALLED_PUSH = (
    b"POST /v1/progress HTTP/1.1\r\nHost: soak\r\nContent-Type: application/json\r\n"
    b"Content-Length: 1000\r\n\r\n{"
)


@dataclass(frozen=True)
class Scenario:
    name: str
    flood: str  # what the flood process runs
    tls: bool
    progress_api: bool
    targets: dict[str, float]  # figure -> the value it must stay under
    says: str


SCENARIOS = {
    "slow": Scenario(
        "slow",
        "slow",
        tls=False,
        progress_api=False,
        targets={
            "failed_scrapes": 1,
            "scrape_p99_ms": 100.0,
            "max_collection_gap_s": 1.5,
            "rss_growth_mib": 5.0,
            "new_connection_max_ms": SCRAPE_TIMEOUT_MS,
        },
        says=f"{SLOWLORIS} slowloris and {HALF_OPEN} half-open clients",
    ),
    "push": Scenario(
        "push",
        "push",
        tls=False,
        progress_api=True,
        targets={
            "failed_scrapes": 1,
            "scrape_p99_ms": 50.0,
            "rss_peak_mib": CHART_MEMORY_LIMIT_MIB,
            "new_connection_max_ms": SCRAPE_TIMEOUT_MS,
        },
        says=f"{FLOOD} clients pushing progress with a stalled body (--progress-api on)",
    ),
    "tls": Scenario(
        "tls",
        "tls",
        tls=True,
        progress_api=False,
        targets={
            "failed_scrapes": 1,
            "scrape_p99_ms": 50.0,
            "rss_peak_mib": CHART_MEMORY_LIMIT_MIB,
            "new_connection_max_ms": SCRAPE_TIMEOUT_MS,
        },
        says=f"{FLOOD} idle TLS connections (TLS web config)",
    ),
}


# ---- the exporter process --------------------------------------------------------------------------


def child(port: int, gpus: int, stats_path: Path, progress_api: bool, web_config: str) -> int:
    """The exporter serving a simulated node whose pods churn; writes its collection gaps at exit."""
    from exporter.app import Application, configure_logging, listen, web_state
    from exporter.config.settings import Settings
    from exporter.serve.server import serve
    from exporter.sim import SimulatedNode

    configure_logging("warning")
    node = SimulatedNode("healthy", n_gpus=gpus)
    module = node.install()
    node.host.start()
    settings = Settings(
        listen_address="127.0.0.1",
        port=port,
        interval_s=1.0,
        sim_gpus=gpus,
        log_level="warning",
        progress_api=progress_api,
        web_config_file=web_config,
    )
    settings = replace(settings, pod_resources_socket=node.kubelet_socket)
    web = web_state(settings)
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
        serve(app, sock, web)
    finally:
        stop.set()
        gaps = [b - a for a, b in itertools.pairwise(arrivals[5:])]  # after the start
        stats_path.write_text(json.dumps({"collections": len(arrivals), "max_gap_s": max(gaps, default=0.0)}))
        node.close()
    return 0


# ---- the load --------------------------------------------------------------------------------------


class Load:
    def __init__(self, url: str, port: int, seconds: float, tls: ssl.SSLContext | None = None) -> None:
        self.url, self.port, self.deadline = url, port, time.monotonic() + seconds
        self.tls = tls
        self.latencies: list[float] = []
        self.failures: list[str] = []
        self.fresh: list[float] = []  # connect (and handshake) + scrape, on a new connection each time
        self.last_body = ""
        self.max_series = 0
        self.slow_cut = 0
        self.timeline: list[tuple[float, float]] = []

    async def connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection("127.0.0.1", self.port, ssl=self.tls)

    async def scraper(self, offset: float, stream: Streams | None) -> None:
        """One scraper on a kept-alive connection, every second. A minimal HTTP/1.1 client: the load
        generator's own work must not be what is measured (httpx costs milliseconds per scrape)."""
        await asyncio.sleep(offset)
        tick, n = time.monotonic(), 0
        while time.monotonic() < self.deadline:
            t0 = time.perf_counter()
            try:
                if stream is None:
                    stream = await self.connect()
                status, head, body = await get_metrics(*stream)
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

    async def newcomer(self) -> None:
        """A scraper that opens a new connection for every scrape, every second: what a flood costs a
        client that is not connected yet (reported apart from the kept-alive scrapers)."""
        tick = time.monotonic()
        while time.monotonic() < self.deadline:
            t0 = time.perf_counter()
            writer = None
            try:
                reader, writer = await asyncio.wait_for(self.connect(), 10)
                status, _, _ = await get_metrics(reader, writer)
                if status != 200:
                    self.failures.append(f"new connection: status {status}")
                else:
                    self.fresh.append((time.perf_counter() - t0) * 1000)
            except (OSError, ValueError, IndexError, asyncio.IncompleteReadError, TimeoutError) as exc:
                self.failures.append(f"new connection: {type(exc).__name__}: {exc}")
            finally:
                if writer is not None:
                    writer.close()
            tick += 1.0
            await asyncio.sleep(max(0.0, tick - time.monotonic()))

    def count_series(self, body: bytes) -> None:
        self.last_body = body.decode()
        series = sum(1 for ln in self.last_body.splitlines() if ln and ln[0] != "#")
        self.max_series = max(self.max_series, series)

    async def slow(self, trickle: bool, first: bytes = b"") -> None:
        """A client that holds a connection until the server cuts it, then comes back a second later:
        ``trickle`` sends a header line every 2 s, ``first`` is sent once after connecting."""
        while time.monotonic() < self.deadline:
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection("127.0.0.1", self.port, ssl=self.tls), 30
                )
            except (OSError, TimeoutError):
                await asyncio.sleep(0.5)
                continue
            try:
                if trickle:
                    writer.write(b"GET /metrics HTTP/1.1\r\nHost: soak\r\n")
                if first:
                    writer.write(first)
                    await writer.drain()
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

    async def scrape(self, flood: Callable[[], object]) -> None:
        """The scrapers connect first, as Prometheus is connected when a flood begins; then the flood."""
        streams = await asyncio.gather(*(self.connect() for _ in range(SCRAPERS)))
        # one scrape each first: a connection that has sent no request yet is the first the server
        # closes for a flood's new one, a kept-alive one only after every such
        await asyncio.gather(*(get_metrics(*stream) for stream in streams))
        flood()
        await asyncio.gather(self.newcomer(), *(self.scraper(i / SCRAPERS, s) for i, s in enumerate(streams)))

    async def crawl(self, flood: str) -> None:
        if flood == "slow":
            clients = [self.slow(i < SLOWLORIS) for i in range(SLOWLORIS + HALF_OPEN)]
        elif flood == "push":
            clients = [self.slow(False, STALLED_PUSH) for _ in range(FLOOD)]
        else:  # tls: the handshake, then nothing
            clients = [self.slow(False) for _ in range(FLOOD)]
        await asyncio.gather(*clients)


Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]
REQUEST = (
    "GET /metrics HTTP/1.1\r\nHost: soak\r\n"
    + "".join(f"{k}: {v}\r\n" for k, v in PROMETHEUS_HEADERS.items())
    + "\r\n"
).encode()


async def get_metrics(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> tuple[int, bytes, bytes]:
    """One GET /metrics: (status, header, body)."""
    writer.write(REQUEST)
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    status = int(head.split(b" ", 2)[1])
    length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
    return status, head, await asyncio.wait_for(reader.readexactly(length), 10)


def client_context(cafile: str) -> ssl.SSLContext | None:
    return ssl.create_default_context(cafile=cafile) if cafile else None


def slow_clients(flood: str, port: int, seconds: float, cafile: str) -> int:
    """The flood, in a process of their own so their work does not delay the scrapers' clock."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4 * FLOOD)), hard))
    load = Load(f"http://127.0.0.1:{port}", port, seconds, client_context(cafile))
    asyncio.run(load.crawl(flood))
    used = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"cut": load.slow_cut, "cpu_s": used.ru_utime + used.ru_stime}))
    return 0


def tls_files(folder: Path) -> tuple[Path, Path]:
    """A test CA and a server certificate for 127.0.0.1; returns (web config, CA file)."""
    from tests.faults.certs import Authority

    ca = Authority(folder, "soak")
    ca.issue("server")
    config = folder / "web.yml"
    config.write_text("tls_server_config:\n  cert_file: server.pem\n  key_file: server-key.pem\n")
    return config, ca.pem


def soak(scenario: Scenario, minutes: float, gpus: int) -> dict[str, float]:
    port = free_port()
    folder = Path(tempfile.mkdtemp())
    stats_path = folder / "stats.json"
    web_config, cafile = tls_files(folder) if scenario.tls else ("", "")
    argv = [sys.executable, __file__, "--child", str(port), "--gpus", str(gpus), "--stats", str(stats_path)]
    argv += ["--web-config", str(web_config)] + (["--progress-api"] if scenario.progress_api else [])
    log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - read after the process exits
    proc = subprocess.Popen(
        argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(REPO)}
    )
    ps = psutil.Process(proc.pid)
    context = client_context(str(cafile))
    url = f"{'https' if context else 'http'}://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/readyz", timeout=1, verify=context or True).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.1)
    seconds = minutes * 60
    load = Load(url, port, seconds, context)
    rss: list[tuple[float, float]] = []

    def watch() -> None:
        start = time.monotonic()
        while time.monotonic() - start < seconds:
            rss.append((time.monotonic() - start, ps.memory_info().rss / 2**20))
            time.sleep(2)

    cpu0 = sum(ps.cpu_times()[:2])
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    flood_args = ["--minutes", str(minutes), "--cafile", str(cafile)]
    crawlers: list[subprocess.Popen[str]] = []

    def flood() -> None:
        crawlers.append(
            subprocess.Popen(
                [
                    *(sys.executable, __file__, "--flood", scenario.flood, "--slow-clients", str(port)),
                    *flood_args,
                ],
                cwd=REPO,
                stdout=subprocess.PIPE,
                text=True,
                env={**os.environ, "PYTHONPATH": str(REPO)},
            )
        )

    try:
        asyncio.run(load.scrape(flood))
        crawler = crawlers[0]
        watcher.join(5)
        cpu = sum(ps.cpu_times()[:2]) - cpu0
        flood = json.loads(crawler.communicate(timeout=60)[0].splitlines()[-1])
        load.slow_cut = flood["cut"]
    finally:
        for crawler in crawlers:
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
        "new_connection_scrapes": len(load.fresh),
        "new_connection_p99_ms": percentile(load.fresh, 0.99) if load.fresh else float("nan"),
        "new_connection_max_ms": max(load.fresh, default=float("nan")),
        "max_collection_gap_s": stats["max_gap_s"],
        "collections": stats.get("collections", 0),
        "rss_warm_mib": after[0],
        "rss_end_mib": after[-1],
        "rss_growth_mib": after[-1] - after[0],
        "rss_peak_mib": max(m for _, m in rss),
        "series_last": sum(1 for ln in load.last_body.splitlines() if ln and ln[0] != "#"),
        "series_max": load.max_series,
        "pods_seen_last": len(
            {ln.split('pod="')[1].split('"')[0] for ln in load.last_body.splitlines() if 'pod="' in ln}
        ),
        "slow_connections_cut": load.slow_cut,
        "exporter_cpu_share": cpu / seconds,
        "flood_cpu_share": flood["cpu_s"] / seconds,
        "tracebacks": output.count("Traceback"),
        "log_lines": len(output.splitlines()),
        "first_failures": load.failures[:3],  # type: ignore[dict-item]
        "slowest": [f"{ms:.1f} ms at {t - t0:.0f} s" for t, ms in slowest],  # type: ignore[dict-item]
    }


def report(scenario: Scenario, figures: dict[str, float]) -> list[str]:
    """Print one scenario's figures against its targets; returns the targets it missed."""
    targets = scenario.targets

    def target(key: str, default: str = "") -> str:
        return f"< {targets[key]:g}" if key in targets else default

    rows = [
        ("scrapes", "scrapes", ""),
        ("failed scrapes", "failed_scrapes", "0"),
        ("scrape latency p50 (ms)", "scrape_p50_ms", ""),
        ("scrape latency p99 (ms)", "scrape_p99_ms", target("scrape_p99_ms")),
        ("scrape latency max (ms)", "scrape_max_ms", ""),
        ("scrapes on a new connection each", "new_connection_scrapes", ""),
        ("  connect + scrape p99 (ms)", "new_connection_p99_ms", ""),
        ("  connect + scrape max (ms)", "new_connection_max_ms", target("new_connection_max_ms")),
        ("largest gap between collections (s)", "max_collection_gap_s", target("max_collection_gap_s")),
        ("collections", "collections", ""),
        ("RSS after warm-up (MiB)", "rss_warm_mib", ""),
        ("RSS at the end (MiB)", "rss_end_mib", ""),
        ("RSS growth (MiB)", "rss_growth_mib", target("rss_growth_mib")),
        ("RSS peak, throughout (MiB)", "rss_peak_mib", target("rss_peak_mib")),
        ("series per scrape, last", "series_last", ""),
        ("series per scrape, most", "series_max", "bounded"),
        ("pods in the last scrape", "pods_seen_last", ""),
        ("flood connections cut by the server", "slow_connections_cut", ""),
        ("exporter CPU (cores busy, simulator included)", "exporter_cpu_share", ""),
        ("flood CPU (cores busy, the load generator's)", "flood_cpu_share", ""),
        ("exporter log lines", "log_lines", ""),
        ("tracebacks in the exporter's log", "tracebacks", "0"),
    ]
    print(f"\n{scenario.name}: {'figure':46s} {'value':>10s}  target")
    for label, key, goal in rows:
        print(f"{'':{len(scenario.name) + 2}s}{label:46s} {figures[key]:10.2f}  {goal}")
    print("slowest scrapes:", ", ".join(figures["slowest"]))  # type: ignore[arg-type]
    if figures["first_failures"]:
        print("first failures:", *figures["first_failures"], sep="\n  ")  # type: ignore[arg-type]
    return [f"{scenario.name}: {k}" for k, limit in targets.items() if not figures[k] < limit] + (
        [f"{scenario.name}: tracebacks"] if figures["tracebacks"] else []
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=10.0, help="per scenario")
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--scenario", choices=[*SCENARIOS, "all"], default="all")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--stats", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--progress-api", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--web-config", default="", help=argparse.SUPPRESS)
    parser.add_argument("--slow-clients", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--flood", default="slow", help=argparse.SUPPRESS)
    parser.add_argument("--cafile", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.slow_clients:
        return slow_clients(args.flood, args.slow_clients, args.minutes * 60, args.cafile)
    if args.child:
        return child(args.child, args.gpus, args.stats, args.progress_api, args.web_config)
    chosen = list(SCENARIOS.values()) if args.scenario == "all" else [SCENARIOS[args.scenario]]
    missed, every = [], {}
    for scenario in chosen:
        print(
            f"soaking the exporter on a simulated {args.gpus}-GPU node for {args.minutes:g} min: {SCRAPERS} "
            f"scrapers, {scenario.says}, a new pod every {CHURN_S:.0f} s",
            flush=True,
        )
        every[scenario.name] = figures = soak(scenario, args.minutes, args.gpus)
        missed += report(scenario, figures)
    if args.json:
        args.json.write_text(json.dumps(every, indent=2))
    print("\nall targets met" if not missed else f"\nmissed targets: {', '.join(missed)}")
    return 1 if missed else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
