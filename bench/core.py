"""Cost of the exporter core on a simulated 8 x H100 node.

    python bench/core.py            # the full run: 500 scrapes, 10 minutes of sampling (~10.5 min)
    python bench/core.py --quick    # a 25-second smoke run with the same measurements

Runs the real command (``python -m exporter --simulate healthy``) as a separate process and measures it
from outside: /metrics latency over real HTTP with Prometheus' request headers (each scrape right after
a new snapshot, so every one renders, plus a second cached scrape), the process's CPU seconds per minute
and its RSS at the end. NVML calls per GPU per collection are counted by the simulated driver in an
in-process sampler over the same node model, with the default intervals.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

PROMETHEUS_HEADERS = {
    "Accept": "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
    "text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
    "Accept-Encoding": "gzip",
    "User-Agent": "Prometheus/2.42.0",
}
TARGETS = {"scrape_p99_ms": 25.0, "cpu_s_per_min": 1.5, "rss_mib": 80.0}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def run_exporter(gpus: int, minutes: float, scrapes: int) -> dict[str, float]:
    port = free_port()
    log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - read after the process exits
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "exporter",
            "--simulate",
            "healthy",
            "--sim-gpus",
            str(gpus),
            "--port",
            str(port),
            "--listen-address",
            "127.0.0.1",
            "--interval",
            "1",
        ],
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    ps = psutil.Process(proc.pid)
    url = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(headers=PROMETHEUS_HEADERS, timeout=5.0) as client:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                try:
                    if client.get(url + "/readyz").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.1)
            started = time.monotonic()
            # phase 1: CPU at 1 s sampling, scraped every 15 s as a Prometheus would
            cpu_window = min(60.0, minutes * 60 * 0.3)
            scrape_every = 15.0 if cpu_window >= 60 else cpu_window / 4
            cpu_start = sum(ps.cpu_times()[:2])
            for i in range(int(cpu_window / scrape_every)):
                time.sleep(max(0.0, started + (i + 1) * scrape_every - time.monotonic()))
                assert client.get(url + "/metrics").status_code == 200
            time.sleep(max(0.0, started + cpu_window - time.monotonic()))
            window_cpu = sum(ps.cpu_times()[:2]) - cpu_start
            window_s = time.monotonic() - started
            # phase 2: latency, each scrape right after a new snapshot (renders), then once more (cached)
            cold, warm, size = [], [], 0
            burst_start, burst_cpu0 = time.monotonic(), sum(ps.cpu_times()[:2])
            for _ in range(scrapes):
                time.sleep(1.02)
                t0 = time.perf_counter()
                response = client.get(url + "/metrics")
                cold.append((time.perf_counter() - t0) * 1000)
                t0 = time.perf_counter()
                client.get(url + "/metrics")
                warm.append((time.perf_counter() - t0) * 1000)
                size = len(response.content)
                assert response.status_code == 200
            burst_cpu = (sum(ps.cpu_times()[:2]) - burst_cpu0) / (time.monotonic() - burst_start) * 60
            # phase 3: memory after the full sampling time
            time.sleep(max(0.0, started + minutes * 60 - time.monotonic()))
            elapsed = time.monotonic() - started
            total_cpu = sum(ps.cpu_times()[:2]) - cpu_start
            rss = ps.memory_info().rss / 2**20
            series = sum(1 for line in response.text.splitlines() if line and not line.startswith("#"))
    finally:
        proc.terminate()
        proc.wait(15)
    log.seek(0)
    match = re.search(r"simulated driver and /proc used ([0-9.]+) s of CPU", log.read())
    # the simulator's load is steady (driver ticks), so its share of any window is its average rate
    sim_per_s = float(match.group(1)) / elapsed if match else float("nan")
    return {
        "scrape_p50_ms": percentile(cold, 0.5),
        "scrape_p99_ms": percentile(cold, 0.99),
        "cached_scrape_p50_ms": percentile(warm, 0.5),
        "cached_scrape_p99_ms": percentile(warm, 0.99),
        "scrapes": len(cold),
        "series": series,
        "body_bytes": size,
        "process_cpu_s_per_min": window_cpu / window_s * 60,
        "simulator_cpu_s_per_min": sim_per_s * 60,
        "cpu_s_per_min": (window_cpu / window_s - sim_per_s) * 60,
        "burst_cpu_s_per_min": burst_cpu - sim_per_s * 60,
        "whole_run_cpu_s_per_min": (total_cpu / elapsed - sim_per_s) * 60,
        "rss_mib": rss,
        "sampled_minutes": elapsed / 60,
    }


def count_nvml_calls(gpus: int, cycles: int = 60) -> dict[str, float]:
    from exporter.collect.sampler import Sampler
    from exporter.config.settings import Settings
    from exporter.sim import SimulatedNode
    from exporter.sources.errors import ErrorCounter
    from exporter.sources.nvml import NvmlSource

    now = [1_790_000_000.0]

    def clock() -> float:
        return now[0]

    node = SimulatedNode("healthy", n_gpus=gpus, clock=clock)
    try:
        settings = Settings()
        errors = ErrorCounter()
        nvml = NvmlSource.configured(node.install(), errors, settings, clock=clock)
        sampler = Sampler(settings, errors, {"nvml": nvml}, clock=clock)
        now[0] += 1
        sampler.cycle(wait_s=5)  # the session opens: discovery is not a collection
        now[0] += 1
        sampler.cycle(wait_s=5)  # the first collection primes cursors and probes unsupported calls
        node.library.calls.clear()
        for _ in range(cycles):
            now[0] += 1
            sampler.cycle(wait_s=5)
        per = {name: n / (cycles * gpus) for name, n in node.library.calls.items()}
        total = sum(per.values())
        steady = sum(v for v in per.values() if v >= 0.99)
        sampler.stop()
    finally:
        node.close()
    return {"nvml_calls_per_gpu_per_collection": total, "nvml_calls_every_collection": steady, "by_call": per}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="20-second smoke run")
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--scrapes", type=int, default=500)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    if args.quick:
        args.minutes, args.scrapes = 25 / 60, 12
    calls = count_nvml_calls(args.gpus)
    print(
        f"running the exporter on a simulated {args.gpus} x H100 node for {args.minutes:g} min "
        f"with {args.scrapes} scrapes ...",
        flush=True,
    )
    figures = run_exporter(args.gpus, args.minutes, args.scrapes)
    figures.update({k: v for k, v in calls.items() if k != "by_call"})
    print()
    print(f"{'figure':44s} {'value':>10s}  target")
    rows = [
        ("/metrics latency p50, fresh snapshot (ms)", "scrape_p50_ms", ""),
        ("/metrics latency p99, fresh snapshot (ms)", "scrape_p99_ms", "< 25"),
        ("/metrics latency p50, cached (ms)", "cached_scrape_p50_ms", ""),
        ("/metrics latency p99, cached (ms)", "cached_scrape_p99_ms", ""),
        ("series per scrape", "series", ""),
        ("process CPU seconds per minute, all threads", "process_cpu_s_per_min", ""),
        ("  of which the simulated driver and /proc", "simulator_cpu_s_per_min", ""),
        ("exporter CPU seconds per minute (1 s sampling)", "cpu_s_per_min", "< 1.5"),
        ("  ... while scraped every second (latency phase)", "burst_cpu_s_per_min", ""),
        (f"RSS after {figures['sampled_minutes']:.1f} min of sampling (MiB)", "rss_mib", "< 80"),
        ("NVML calls per GPU per collection (amortized)", "nvml_calls_per_gpu_per_collection", ""),
        ("NVML calls per GPU in every collection", "nvml_calls_every_collection", ""),
    ]
    for label, key, target in rows:
        print(f"{label:44s} {figures[key]:10.2f}  {target}")
    print("\nNVML calls per GPU per collection, by entry point:")
    for name, n in sorted(calls["by_call"].items(), key=lambda kv: -kv[1]):  # type: ignore[union-attr]
        print(f"  {name:48s} {n:6.2f}")
    failed = [k for k, limit in TARGETS.items() if figures[k] >= limit]
    if args.json:
        args.json.write_text(json.dumps(figures | {"by_call": calls["by_call"]}, indent=2))
    print("\nall targets met" if not failed else f"\nmissed targets: {', '.join(failed)}")
    return 1 if failed and not args.quick else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
