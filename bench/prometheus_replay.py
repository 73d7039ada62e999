"""What one ``replay --prometheus`` costs: a real VictoriaMetrics loaded through its import API
(/api/v1/import, JSON lines, generated and sent in batches, never held whole) with the simulated fleet of
scripts/demo_prometheus.py at a 30 s scrape, then one replay over the whole range, in this process and
its workers (``--jobs``, default the cores).

Prints the load's figures, then the replay's wall and CPU time (this process and its workers together),
the peak RSS of this process, of its largest worker and of the server, the queries issued and samples
read, and the cost per GPU-day, extrapolated to the issue's week of 100 nodes x 8 GPUs (the replay's work
is linear in GPU-days: each worker holds one node at a time).

``--signals five`` (default) writes the issue's five dcgm-exporter series per GPU (utilization, power,
framebuffer used, temperature, SM clock); ``--signals all`` the demo's seventeen. ``--own`` writes this
exporter's series instead (its utilization, a ledger and verdicts made up from it): their ledger and
verdicts are read back, not judged, and the figures are the reading's.

    python bench/prometheus_replay.py [--nodes 10] [--days 7] [--step 30] [--jobs N] [--signals five] [--own]
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from exporter.offline.promhistory import export, names
from exporter.offline.promhistory.history import Progress, Request, cores, replay_prometheus
from scripts import demo_prometheus as demo
from scripts.stack import free_port, start_victoria_metrics, tool, wait_http

TARGET_GPU_DAYS = 100 * 8 * 7.0  # the week of 100 nodes x 8 GPUs
DAY_S = 86400.0
FIVE = ("util", "power_w", "mem_used_bytes", "temp_c", "sm_clock_hz")
BATCH_BYTES = 32 << 20  # one import request's body


def lines(
    fleet: dict[str, list[demo.Run]], loops: demo.Loops, start: float, end: float, five: bool
) -> Iterator[str]:
    """The fleet's series as VictoriaMetrics' JSON lines (one per series), each made when it is sent."""
    step = loops.step
    for s in export.writers(names.DCGM_49):
        if five and s.attr not in FIVE:
            continue
        for node, runs in fleet.items():
            for gpu in range(demo.GPUS):
                for labels, samples in demo._gpu_series(s, node, str(gpu), runs, loops, start, end, step):
                    yield _line(s.metric, labels, samples)
    for runs in fleet.values():
        for run in runs:
            labels = {"namespace": run.namespace, "pod": run.pod, "label_job_name": run.job}
            labels |= {"job": "kube-state-metrics", "instance": "ksm:8080"}
            times = demo._times(run.start, run.end, step)
            yield _line(names.KUBE_POD_LABELS, labels, [(t, 1.0) for t in times])


# --own: this exporter's series, as its chart scrapes them (the node label added by relabelling)
OWN_KINDS = ("data_starvation", "comm_hang", "comm_bound", "thermal_throttle", "power_throttle")
BUSY = 0.5  # --own's made-up ledger: a sample this busy is computing, a less busy one waiting for input


def own_lines(fleet: dict[str, list[demo.Run]], loops: demo.Loops, start: float, end: float) -> Iterator[str]:
    """This exporter's series for the fleet: its utilization (how replay finds the GPUs), a ledger made
    up from it (computing, input_wait, free: the counters carried across pods as live), five verdict
    series (data_starvation 1 while waiting), the workload class and gpu_info. Their reading is what is
    measured, not what they say."""
    step = loops.step
    util = next(s for s in export.writers(names.DCGM_49) if s.attr == "util")
    for node, runs in fleet.items():
        for gpu in range(demo.GPUS):
            base = {"gpu": str(gpu), "uuid": f"GPU-{node}-{gpu}", "node": node, "instance": f"{node}:9612"}
            base |= {"job": "gpu-bottleneck-exporter"}
            yield _line("gpu_info", {**base, "model": demo.MODEL}, [(start, 1.0), (end, 1.0)])
            totals: dict[str, float] = {}
            for labels, samples in demo._gpu_series(util, node, str(gpu), runs, loops, start, end, step):
                own = {**base, **{k: labels[k] for k in ("namespace", "pod", "container") if k in labels}}
                yield _line("gpu_utilization_ratio", own, samples)
                by_state: dict[str, list[tuple[float, float]]] = {}
                waiting: list[tuple[float, float]] = []
                for t, v in samples:
                    state = "free" if "pod" not in own else "computing" if v >= BUSY else "input_wait"
                    totals[state] = totals.get(state, 0.0) + step
                    for name, total in totals.items():
                        by_state.setdefault(name, []).append((t, total))
                    waiting.append((t, 1.0 if state == "input_wait" else 0.0))
                for state, counted in by_state.items():
                    yield _line("gpu_time_seconds_total", {**own, "state": state}, counted)
                for kind in OWN_KINDS:
                    values = waiting if kind == "data_starvation" else [(t, 0.0) for t, _ in waiting]
                    yield _line("gpu_bottleneck", {**own, "kind": kind}, values)
                klass = {"workload": "training", "source": "default"}
                yield _line("gpu_workload_class", {**own, **klass}, [(t, 1.0) for t, _ in samples])


def _line(name: str, labels: dict[str, str], samples: list[tuple[float, float]]) -> str:
    metric = {"__name__": name, **labels}
    values = [v for _, v in samples]
    stamps = [round(t * 1000) for t, _ in samples]
    return json.dumps({"metric": metric, "values": values, "timestamps": stamps}) + "\n"


def load(url: str, source: Iterator[str]) -> tuple[int, int]:
    """Send the lines in batches of about BATCH_BYTES; returns (lines, bytes) sent."""
    batch: list[str] = []
    size = count = sent = 0
    for line in source:
        batch.append(line)
        size += len(line)
        count += 1
        if size >= BATCH_BYTES:
            sent += _post(url, batch)
            batch, size = [], 0
    if batch:
        sent += _post(url, batch)
    urllib.request.urlopen(f"{url}/internal/force_flush", timeout=600).read()
    return count, sent


def _post(url: str, batch: list[str]) -> int:
    body = "".join(batch).encode()
    urllib.request.urlopen(urllib.request.Request(f"{url}/api/v1/import", data=body), timeout=600).read()
    return len(body)


def start_victoria(work: Path) -> tuple[subprocess.Popen[bytes], str]:
    binary = tool("victoria-metrics")
    if not binary:
        raise SystemExit("bench: needs victoria-metrics on PATH (scripts/install-tools.sh)")
    port = free_port()
    proc = start_victoria_metrics(binary, work, port)
    url = f"http://127.0.0.1:{port}"
    wait_http(f"{url}/health", 60, proc)
    return proc, url


def peak_rss_mib(pid: int) -> float:
    """A live process' peak resident memory (VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def samples_in(url: str, start: float, end: float, names_re: str) -> int:
    """The samples the server holds in the range (its own count: what the load put there)."""
    query = f"sum(count_over_time({{__name__=~'{names_re}'}}[{int(end - start) + 1}s]))"
    params = urllib.parse.urlencode({"query": query, "time": f"{end:.3f}"})
    doc = json.loads(urllib.request.urlopen(f"{url}/api/v1/query?{params}", timeout=600).read())
    result = doc["data"]["result"]
    return int(float(result[0]["value"][1])) if result else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10)
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--step", type=float, default=30.0)
    parser.add_argument("--jobs", type=int, default=cores())
    parser.add_argument("--signals", choices=("five", "all"), default="five")
    parser.add_argument(
        "--own", action="store_true", help="this exporter's series: its ledger and verdicts read back"
    )
    args = parser.parse_args(argv)
    end = float(int(time.time()) // 3600 * 3600 - 3600)
    start = end - args.days * DAY_S
    work = Path(tempfile.mkdtemp(prefix="bench-prometheus-"))
    proc, url = start_victoria(work)
    try:
        began = time.monotonic()
        fleet = demo.schedule(args.nodes, start, end)
        loops = demo.Loops(args.step)
        made = (
            own_lines(fleet, loops, start, end)
            if args.own
            else lines(fleet, loops, start, end, args.signals == "five")
        )
        series, sent = load(url, made)
        loaded = time.monotonic() - began
        held = samples_in(url, start, end, "gpu_.*" if args.own else "DCGM_.*")
        seen = Progress()
        wall0, cpu0 = time.monotonic(), _cpu()
        result = replay_prometheus(
            Request(url, start, end, jobs=args.jobs), prices=None, on_progress=lambda p: _keep(seen, p)
        )
        wall, cpu = time.monotonic() - wall0, _cpu() - cpu0
        server_mib = peak_rss_mib(proc.pid)
        worker_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # before the server's
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        shutil.rmtree(work, ignore_errors=True)  # the server's storage: hundreds of MiB at full size
    own_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    gpu_days = args.nodes * demo.GPUS * args.days
    steps = gpu_days * DAY_S / args.step
    print(
        f"fleet: {args.nodes} nodes x {demo.GPUS} GPUs, {args.days:g} days at {args.step:g} s, "
        f"{'this exporter' + chr(39) + 's series' if args.own else args.signals + ' signals'}: "
        f"{held:,} GPU samples in {series:,} series "
        f"({sent / 2**20:.0f} MiB of JSON lines)"
    )
    print(
        f"load: generated and imported into VictoriaMetrics in {loaded:.0f} s "
        f"({held / loaded / 1e6:.2f} M samples/s)"
    )
    print(
        f"replay: {wall:.1f} s wall, {cpu:.1f} s CPU ({args.jobs} jobs; reading {seen.reading_s:.1f} s CPU, "
        f"analysis the rest); peak RSS {own_mib:.0f} MiB here, "
        f"{worker_mib:.0f} MiB the largest worker, {server_mib:.0f} MiB VictoriaMetrics; "
        f"{seen.queries} queries, "
        f"{seen.samples:,} samples read, {len(result.stats.gpus)} GPUs, {result.stats.rows:,} rows"
    )
    if result.fleet:
        back = result.fleet["read"]["read_back_nodes"]  # type: ignore[index]
        print(f"read back (this exporter's own ledger and verdicts): {back} of {args.nodes} nodes")
    print(
        f"cost: {wall / gpu_days:.3f} s wall and {cpu / gpu_days:.3f} s CPU per GPU-day "
        f"({cpu * 1e6 / steps:.0f} us CPU per GPU-step); the issue's week of 100 x 8 GPUs "
        f"({TARGET_GPU_DAYS:.0f} GPU-days) at this rate: "
        f"~{wall / gpu_days * TARGET_GPU_DAYS / 60:.0f} min wall, "
        f"~{cpu / gpu_days * TARGET_GPU_DAYS / 60:.0f} min CPU"
    )
    return 0


def _cpu() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _keep(into: Progress, p: Progress) -> None:
    into.queries, into.samples, into.nodes_done = p.queries, p.samples, p.nodes_done
    into.reading_s = p.reading_s


if __name__ == "__main__":
    raise SystemExit(main())
