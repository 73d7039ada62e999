"""Diagnose a fleet from its Prometheus, with nothing installed on the nodes: a real Prometheus, started
in a temporary directory and loaded (``promtool tsdb create-blocks-from openmetrics``) with a week of a
small simulated fleet in dcgm-exporter 4.9's names and kube-state-metrics' ``kube_pod_labels``, then one
``replay --prometheus`` over it: the summary by namespace and an HTML report.

By default two days of two nodes (a few hundred MB on disk while it runs, a few minutes); ``--days 7
--nodes 4`` is a week of four (2.5 GB, eight minutes or more). A line on stderr every few seconds says how
far it got. Ctrl-C stops it in one line and removes what it wrote (but a report already written to --out).

The fleet: NODES nodes of 8 H100s, jobs of four namespaces taking turns on them. Each job's GPUs play one of
the project's labelled example traces (made by its simulator), looped, scraped every STEP seconds:
``research`` trains with a starved input pipeline, ``notebooks`` holds GPUs it does not use, ``vision``
runs hot and power-capped, ``platform`` trains healthily. Between jobs the GPUs are free.

    python scripts/demo_prometheus.py [--days 2] [--nodes 2] [--step 30] [--out DIR] [--keep]
"""

from __future__ import annotations

import argparse
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from exporter.offline.promhistory import export, names
from exporter.offline.promhistory.agreement import sampled
from exporter.offline.traces import TraceReader
from scripts.stack import free_port, tool, wait_http

REPO = Path(__file__).resolve().parent.parent
TRACES = REPO / "examples" / "traces"
GPUS = 8
MODEL = "NVIDIA H100 80GB HBM3"
DAY_S = 86400.0
# (namespace, job, trace it plays, hours it runs); each node runs them in turn, then a free hour
JOBS = (
    ("research", "llama-pretrain", "starvation_h100x8", 10.0),
    ("platform", "resnet-baseline", "healthy_h100x8", 8.0),
    ("notebooks", "alice-notebook", "idle_h100x8", 6.0),
    ("vision", "detector-train", "thermal_h100x8", 6.0),
    ("vision", "segmenter-train", "power_cap_h100x8", 4.0),
)
FREE_S = 3600.0
PROGRESS_EVERY_S = 5.0  # a progress line on stderr at most this often
DEFAULT_DAYS, DEFAULT_NODES = 2.0, 2  # a few minutes; a week of four nodes writes 2.5 GB
# a free GPU: no pod, a driver's few hundred MiB, idle power
FREE = {"util": 0.0, "mem_used_bytes": 0.25 * 2**30, "power_w": 70.0}


@dataclass(frozen=True)
class Run:
    start: float
    end: float
    namespace: str
    job: str
    pod: str
    trace: str


def schedule(nodes: int, start: float, end: float) -> dict[str, list[Run]]:
    """Each node's jobs, in turn from a different one per node, back to back with a free hour between."""
    out: dict[str, list[Run]] = {}
    for n in range(nodes):
        runs, t, i = [], start, n
        while t < end:
            namespace, job, trace, hours = JOBS[i % len(JOBS)]
            stop = min(end, t + hours * 3600.0)
            runs.append(Run(t, stop, namespace, job, f"{job}-{n}-{i}", trace))
            t, i = stop + FREE_S, i + 1
        out[f"gpu-node-{n}"] = runs
    return out


class Loops:
    """Each trace scraped at the step once, then looped: attribute -> GPU -> the values at each step."""

    def __init__(self, step: float) -> None:
        self.step = step
        self.cache: dict[str, tuple[dict[str, dict[str, list[float]]], int]] = {}

    def get(self, trace: str) -> tuple[dict[str, dict[str, list[float]]], int]:
        if trace not in self.cache:
            gpus, _ = sampled(TraceReader(TRACES / f"{trace}.csv.gz"), self.step, names.DCGM_49)
            values: dict[str, dict[str, list[float]]] = {}
            length = 0
            for ident, gpu in gpus.items():
                for attr, by_time in gpu.values.items():
                    values.setdefault(attr, {})[ident] = [by_time[t] for t in sorted(by_time)]
                    length = max(length, len(by_time))
            self.cache[trace] = (values, length)
        return self.cache[trace]


def series(
    fleet: dict[str, list[Run]], loops: Loops, start: float, end: float
) -> Iterator[tuple[str, str, dict[str, str], list[tuple[float, float]]]]:
    """(family, kind, labels, samples) of every series: dcgm-exporter's per GPU and pod, the pods' labels."""
    step = loops.step
    for s in export.writers(names.DCGM_49):
        for node, runs in fleet.items():
            for gpu in range(GPUS):
                for labels, samples in _gpu_series(s, node, str(gpu), runs, loops, start, end, step):
                    yield s.metric, "gauge", labels, samples
    for runs in fleet.values():
        for run in runs:
            labels = {"namespace": run.namespace, "pod": run.pod, "label_job_name": run.job}
            labels |= {"job": "kube-state-metrics", "instance": "ksm:8080"}
            yield names.KUBE_POD_LABELS, "gauge", labels, [(t, 1.0) for t in _times(run.start, run.end, step)]


def _times(start: float, end: float, step: float) -> list[float]:
    return [start + k * step for k in range(int((end - start) // step))]


def _gpu_series(
    s: names.Series,
    node: str,
    gpu: str,
    runs: list[Run],
    loops: Loops,
    start: float,
    end: float,
    step: float,
) -> Iterator[tuple[dict[str, str], list[tuple[float, float]]]]:
    base = {
        "gpu": gpu,
        "UUID": f"GPU-{node}-{gpu}",
        "device": f"nvidia{gpu}",
        "modelName": MODEL,
        "hostname": node,
        "instance": f"{node}:9400",
        "job": "gpu",
    }
    free: list[tuple[float, float]] = []
    t = start
    for run in [*runs, Run(end, end, "", "", "", "")]:
        value = FREE.get(s.attr, _constant(s.attr, loops))
        if value is not None:
            free += [(x, value / s.scale) for x in _times(t, run.start, step)]
        if run.end <= run.start:
            break
        values, length = loops.get(run.trace)
        by_gpu = values.get(s.attr, {}).get(gpu)
        if by_gpu:
            samples = [
                (x, by_gpu[k % length] / s.scale)
                for k, x in enumerate(_times(run.start, run.end, step))
                if k % length < len(by_gpu)
            ]
            yield base | {"namespace": run.namespace, "pod": run.pod, "container": "main"}, samples
        t = run.end
    if free:
        yield base, free


def _constant(attr: str, loops: Loops) -> float | None:
    """What a free GPU still reports of the attributes that do not change with work (its limit, size)."""
    values, _ = loops.get(JOBS[1][2])  # the healthy trace's board
    first = values.get(attr, {}).get("0")
    return first[0] if first and attr in ("power_limit_w", "mem_total_bytes", "sm_clock_max_hz") else None


class Progress:
    """One line on stderr at most every PROGRESS_EVERY_S: what is being done, how far, how long so far."""

    def __init__(self) -> None:
        self.began = time.monotonic()
        self.last = self.began

    def __call__(self, text: str, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self.last >= PROGRESS_EVERY_S:
            self.last = now
            print(f"demo: {text} ({now - self.began:.0f} s)", file=sys.stderr, flush=True)


def openmetrics(
    path: Path,
    fleet: dict[str, list[Run]],
    loops: Loops,
    start: float,
    end: float,
    progress: Progress | None = None,
) -> int:
    """Write the history as OpenMetrics (each family's lines together); returns the samples written."""
    count, current = 0, None
    with path.open("w") as out:
        for family, kind, labels, samples in series(fleet, loops, start, end):
            if family != current:
                out.write(f"# TYPE {family} {kind}\n")
                current = family
            text = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
            out.writelines(f"{family}{{{text}}} {v!r} {t:.3f}\n" for t, v in samples)
            count += len(samples)
            if progress:
                progress(f"writing the history: {count / 1e6:.1f} M samples, {out.tell() / 1e6:,.0f} MB")
        out.write("# EOF\n")
    return count


def _wait(proc: subprocess.Popen[bytes], progress: Progress, doing: str) -> int:
    """Wait for a child, saying every few seconds that it still runs."""
    while True:
        try:
            return proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            progress(doing)


def load_prometheus(
    work: Path, history: Path, children: list[subprocess.Popen[bytes]], progress: Progress
) -> tuple[subprocess.Popen[bytes], str]:
    """promtool's blocks from the history, and a Prometheus serving them (no scraping). The children are
    put in ``children`` as they start, so that an interruption stops them."""
    prometheus, promtool = tool("prometheus"), tool("promtool")
    size = history.stat().st_size / 1e6
    build = _child(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", str(history), str(work / "tsdb")],
        children,
        stdout=subprocess.DEVNULL,
        stderr=(work / "promtool.log").open("w"),
    )
    if _wait(build, progress, f"promtool is writing the TSDB blocks of {size:,.0f} MB of history"):
        raise SystemExit(f"demo: promtool failed: {(work / 'promtool.log').read_text()[-500:]}")
    (work / "prometheus.yml").write_text("global:\n  scrape_interval: 30s\n")
    port = free_port()
    proc = _child(
        [
            prometheus,
            f"--storage.tsdb.path={work / 'tsdb'}",
            "--storage.tsdb.retention.time=10y",
            f"--web.listen-address=127.0.0.1:{port}",
            f"--config.file={work / 'prometheus.yml'}",
        ],
        children,
        stdout=subprocess.DEVNULL,
        stderr=(work / "prometheus.log").open("w"),
    )
    url = f"http://127.0.0.1:{port}"
    wait_http(f"{url}/-/ready", 60, proc)
    return proc, url


def _child(command: list[str], children: list[subprocess.Popen[bytes]], **kwargs: object) -> subprocess.Popen:
    """A child in a session of its own: Ctrl-C reaches this script only, which stops the child itself
    (a child reached too would print its own traceback or half a line)."""
    # Ctrl-C held off while the child starts: a KeyboardInterrupt inside Popen (forked, not yet returned)
    # would leave a child running that nobody stops (it then wrote its report into the removed directory).
    # The child inherits the blocked SIGINT; in a session of its own no Ctrl-C reaches it anyway.
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        proc = subprocess.Popen(command, start_new_session=True, **kwargs)  # type: ignore[call-overload]
        children.append(proc)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
    return proc


def _stop(children: list[subprocess.Popen[bytes]]) -> None:
    for proc in children:
        if proc.poll() is None:
            proc.terminate()
    for proc in children:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=float, default=DEFAULT_DAYS)
    parser.add_argument("--nodes", type=int, default=DEFAULT_NODES)
    parser.add_argument("--step", type=float, default=30.0, help="the scrape interval simulated")
    parser.add_argument("--out", type=Path, help="where the report goes (default: the temporary directory)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args(argv)
    if not tool("prometheus") or not tool("promtool"):
        print("demo: needs prometheus and promtool on PATH (scripts/install-tools.sh demo)", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="demo-prometheus-"))
    children: list[subprocess.Popen[bytes]] = []
    finished = False
    try:
        status = _demo(args, work, children)
        finished = True
        return status
    except KeyboardInterrupt:
        _stop(children)
        shutil.rmtree(work, ignore_errors=True)
        print(f"demo: interrupted; stopped and removed {work}", file=sys.stderr)
        return 130
    finally:
        _stop(children)
        if finished and not args.keep:  # the report stays (in the directory, unless --out says elsewhere)
            (work / "history.om").unlink(missing_ok=True)
            shutil.rmtree(work / "tsdb", ignore_errors=True)


def _demo(args: argparse.Namespace, work: Path, children: list[subprocess.Popen[bytes]]) -> int:
    end = float(int(time.time()) // 3600 * 3600 - 3600)
    start = end - args.days * DAY_S
    out = args.out or work
    out.mkdir(parents=True, exist_ok=True)
    progress = Progress()
    fleet = schedule(args.nodes, start, end)
    print(
        f"demo: writing {args.days:g} days of {args.nodes} node(s) x {GPUS} GPUs at {args.step:g} s to {work}"
    )
    count = openmetrics(work / "history.om", fleet, Loops(args.step), start, end, progress)
    print(f"demo: {count:,} samples; loading them into a Prometheus", flush=True)
    _, url = load_prometheus(work, work / "history.om", children, progress)
    print(f"demo: Prometheus at {url}, loaded in {time.monotonic() - progress.began:.0f} s ({work})")
    report = out / "fleet-report.html"
    command = [
        sys.executable,
        "-m",
        "exporter",
        "replay",
        "--prometheus",
        url,
        "--from",
        str(start),
        "--to",
        str(end),
        "--report",
        str(report),
    ]
    print(
        "demo: $ gpu-bottleneck-exporter replay --prometheus", url, f"--from -{args.days:g}d --report", report
    )
    sys.stdout.flush()
    # its progress lines and warnings on stderr as they come; its summary read here, to show its end
    run = _child(command, children, cwd=REPO, stdout=subprocess.PIPE, text=True)
    stdout, _ = run.communicate()
    lines = stdout.splitlines()
    # the summary comes first (how it was read, the roll-up by namespace): shown up to the GPUs' lines
    end = next((i for i, line in enumerate(lines) if line == "per GPU:"), len(lines))
    print("\n".join(lines[:end]))
    if end < len(lines):
        print(f"demo: every GPU's episodes and time: {report} (or the command above without --report)")
    return run.returncode


if __name__ == "__main__":
    raise SystemExit(main())
