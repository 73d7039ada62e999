"""CPU cost side by side with nvitop-exporter 1.7.2 on the same simulated 8 x H100 node.

    python bench/peer_cpu.py            # 3 minutes per phase after a 60 s warm-up (~7.5 min)
    python bench/peer_cpu.py --quick    # 40 s per phase, a smoke run
    python bench/peer_cpu.py --ours-only

The first run creates ``.bench-venv/`` in the checkout (ignored by git) with ``nvitop-exporter==1.7.2``
and the same nvidia-ml-py version as this project's environment, through pip; later runs reuse it. The
peer is no dependency of the project.

Both exporters run at once, each as its own process over its own copy of the simulated driver
(exporter/sim: the fake libnvidia-ml under the real nvidia-ml-py; bench/peer_sim.py puts it under the
peer), sampling every second. Two phases: scraped every second, then every 15 s, with Prometheus'
request headers. Per phase and process: CPU seconds per minute of the whole process, less the
simulator's own CPU over the same phase (the fake driver's time is counted inside it; ours also runs the
simulated /proc writer; each process says how much so far on SIGUSR1, at both ends of a phase); a real
node spends that time in libnvidia-ml and the kernel instead. Our simulated kubelet
runs as a child process, as a node's kubelet does, and is not counted. Then scrape latency
p50/p99 (the 1 s phase), RSS at the end, and series per scrape.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import httpx
import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.core import PROMETHEUS_HEADERS, free_port, percentile  # noqa: E402

PEER = "nvitop-exporter==1.7.2"
VENV = REPO / ".bench-venv"
GOAL = 0.5  # the goal: half the peer's CPU at 15 s scrapes


def peer_python() -> Path:
    """The peer's interpreter, in its own environment (created on first use)."""
    python = VENV / "bin" / "python"
    bindings = metadata.version("nvidia-ml-py")
    marker = VENV / f".installed-{PEER}-{bindings}"
    if not marker.exists():
        print(f"installing {PEER} (nvidia-ml-py=={bindings}) into {VENV} ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENV)], check=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", PEER, f"nvidia-ml-py=={bindings}"], check=True
        )
        marker.touch()
    return python


@dataclass
class Proc:
    name: str
    argv: list[str]
    sim_pattern: str  # the line the process prints on SIGUSR1 and at exit: its simulator's CPU seconds
    port: int = field(default_factory=free_port)
    popen: subprocess.Popen | None = None
    log: object = None
    latencies: dict[str, list[float]] = field(default_factory=dict)
    cpu: dict[str, tuple[float, float, float]] = field(default_factory=dict)  # phase -> cpu, sim, wall s
    rss_mib: float = 0.0
    series: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/metrics"

    def start(self) -> None:
        self.log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - read after the process exits
        argv = [a.replace("{port}", str(self.port)) for a in self.argv]
        self.popen = subprocess.Popen(argv, cwd=REPO, stdout=self.log, stderr=subprocess.STDOUT)
        self.ps = psutil.Process(self.popen.pid)

    def cpu_s(self) -> float:
        return sum(self.ps.cpu_times()[:2])

    def sim_s(self, timeout: float = 10.0) -> float:
        """The simulator's CPU seconds so far: asked with SIGUSR1, read from the line it logs."""
        assert self.popen is not None
        self.log.seek(0)  # type: ignore[attr-defined]
        before = len(re.findall(self.sim_pattern, self.log.read()))  # type: ignore[attr-defined]
        self.popen.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.log.seek(0)  # type: ignore[attr-defined]
            found = re.findall(self.sim_pattern, self.log.read())  # type: ignore[attr-defined]
            if len(found) > before:
                return float(found[-1])
            time.sleep(0.02)
        raise SystemExit(f"{self.name} did not say its simulator's CPU within {timeout:g} s")

    def stop(self) -> None:
        assert self.popen is not None
        self.rss_mib = self.ps.memory_info().rss / 2**20
        self.popen.send_signal(signal.SIGTERM)
        self.popen.wait(20)


def wait_ready(client: httpx.Client, procs: list[Proc]) -> None:
    deadline = time.monotonic() + 60
    for p in procs:
        while True:
            try:
                if client.get(p.url).status_code == 200 and b"gpu" in client.get(p.url).content:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit(f"{p.name} did not answer within 60 s")
            time.sleep(0.2)


def phase(client: httpx.Client, procs: list[Proc], name: str, seconds: float, every: float) -> None:
    print(f"phase {name}: {seconds:g} s, a scrape of each every {every:g} s ...", flush=True)
    sim0 = {p.name: p.sim_s() for p in procs}
    start, cpu0 = time.monotonic(), {p.name: p.cpu_s() for p in procs}
    for i in range(int(seconds / every)):
        time.sleep(max(0.0, start + (i + 1) * every - time.monotonic()))
        for p in procs if i % 2 else reversed(procs):  # neither always goes first
            t0 = time.perf_counter()
            response = client.get(p.url)
            p.latencies.setdefault(name, []).append((time.perf_counter() - t0) * 1000)
            assert response.status_code == 200, (p.name, response.status_code)
            p.series = sum(1 for line in response.text.splitlines() if line and not line.startswith("#"))
    time.sleep(max(0.0, start + seconds - time.monotonic()))
    wall = time.monotonic() - start
    cpu1 = {p.name: p.cpu_s() for p in procs}
    for p in procs:
        p.cpu[name] = (cpu1[p.name] - cpu0[p.name], p.sim_s() - sim0[p.name], wall)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="40 s per phase, 20 s warm-up")
    parser.add_argument("--phase-seconds", type=float, default=180.0)
    parser.add_argument("--warmup", type=float, default=60.0, help="seconds before measuring (windows fill)")
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--ours-only", action="store_true", help="no peer (no .bench-venv needed)")
    args = parser.parse_args()
    if args.quick:
        args.phase_seconds, args.warmup = 40.0, 20.0
    gpus = str(args.gpus)
    procs = [
        Proc(
            "ours",
            [
                sys.executable,
                "-m",
                "exporter",
                "--simulate",
                "healthy",
                "--sim-gpus",
                gpus,
                "--interval",
                "1",
                "--port",
                "{port}",
                "--listen-address",
                "127.0.0.1",
            ],
            r"simulated driver and /proc used ([0-9.]+) s of CPU",
        )
    ]
    if not args.ours_only:
        procs.append(
            Proc(
                "nvitop-exporter 1.7.2",
                [
                    str(peer_python()),
                    str(REPO / "bench" / "peer_sim.py"),
                    "--gpus",
                    gpus,
                    "--",
                    "--bind-address",
                    "127.0.0.1",
                    "--port",
                    "{port}",
                    "--interval",
                    "1",
                ],
                r"simulated driver used ([0-9.]+) s of CPU",
            )
        )
    print(f"{len(procs)} exporter(s) on a simulated {gpus} x H100 node, 1 s sampling ...", flush=True)
    for p in procs:
        p.start()
    try:
        with httpx.Client(headers=PROMETHEUS_HEADERS, timeout=10.0) as client:
            wait_ready(client, procs)
            time.sleep(args.warmup)
            phase(client, procs, "1s", args.phase_seconds, 1.0)
            phase(client, procs, "15s", args.phase_seconds, 15.0)
    finally:
        for p in procs:
            if p.popen is not None and p.popen.poll() is None:
                p.stop()
    report(procs)
    return 0


def report(procs: list[Proc]) -> None:
    def per_min(p: Proc, name: str, less_sim: bool) -> float:
        cpu, sim, wall = p.cpu[name]
        return (cpu - (sim if less_sim else 0.0)) / wall * 60

    def sim_per_min(p: Proc) -> float:
        return sum(sim for _, sim, _ in p.cpu.values()) / sum(wall for *_, wall in p.cpu.values()) * 60

    rows: list[tuple[str, list[str]]] = []
    for name in ("1s", "15s"):
        rows.append(
            (
                f"CPU s/min, scraped every {name}, less simulator",
                [f"{per_min(p, name, True):.2f}" for p in procs],
            )
        )
        rows.append(
            (f"CPU s/min, scraped every {name}, raw", [f"{per_min(p, name, False):.2f}" for p in procs])
        )
    rows += [
        ("simulator's own CPU s/min", [f"{sim_per_min(p):.2f}" for p in procs]),
        (
            "scrape latency p50 (ms), 1 s scrapes",
            [f"{percentile(p.latencies['1s'], 0.5):.2f}" for p in procs],
        ),
        (
            "scrape latency p99 (ms), 1 s scrapes",
            [f"{percentile(p.latencies['1s'], 0.99):.2f}" for p in procs],
        ),
        ("RSS at the end (MiB)", [f"{p.rss_mib:.1f}" for p in procs]),
        ("series per scrape", [str(p.series) for p in procs]),
    ]
    print()
    print(f"{'':46s}" + "".join(f"{p.name:>24s}" for p in procs))
    for label, values in rows:
        print(f"{label:46s}" + "".join(f"{v:>24s}" for v in values))
    if len(procs) == 2:
        ours, peer = procs
        print()
        for name in ("1s", "15s"):
            ratio = per_min(ours, name, True) / per_min(peer, name, True)
            print(f"ours / peer, CPU less simulator, scraped every {name}: {ratio:.2f}x")
        ratio = per_min(ours, "15s", True) / per_min(peer, "15s", True)
        print(f"goal at 15 s scrapes: <= {GOAL:.2f}x -> {'met' if ratio <= GOAL else 'not met'}")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
