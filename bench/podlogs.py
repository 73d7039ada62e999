r"""Cost of following pod logs: 8 GPU pods each writing 1,000 lines a second.

    python bench/podlogs.py            # 60 s
    python bench/podlogs.py --quick    # 15 s
    python bench/podlogs.py --hostile  # the parser's CPU on lines written to be slow to match
    python bench/podlogs.py --tenant   # a pass's CPU when tenants' logs make a user pattern slow

A writer process appends CRI records (the kubelet's layout, rotated at 10 MiB as the kubelet does) for 8
pods: progress lines, HF Trainer loss dicts, tqdm bars, an NCCL INFO line now and then. This process
runs the real pod-log source on its own thread, as the exporter does, and measures what it adds: CPU
seconds per second of wall time (its whole process, so the source's thread and everything it makes
Python do) and RSS growth from before the source started. Prints the figures as JSON with the targets
(< 5 % of a core, < 30 MiB).

``--hostile`` times the parser alone on one generated line of each shape that made backtracking patterns
slow (long runs of blanks or digits after a keyword, a pattern's head repeated across the line), 64 KiB
long: each pattern set (the progress table; the NCCL, error and workload lines) and the whole containerd
record (four 16 KiB P records and an F). Target: < 50 ms a line.

``--tenant`` drives the pod-log source's passes by hand on 1 and on 64 containers (the most followed),
each log getting 70 lines a pass of ``step`` run into 1,020 digits, under the worst user pattern the cost
check accepts, ``(?:step|it)\s*(?P<step>\d+)\s*\S*\s*loss`` (about 12 ms a line): the CPU of each
pass, without the budget (a CPU clock that never moves) and with it (``podlogs.progress_cpu_seconds``),
and how many containers waited and for how long. Target: with the budget, a pass's CPU stays under
TENANT_PASS_TARGET_S whatever the number of containers.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

PODS = 8
LINES_PER_S = 1000
TARGETS = {"cpu_core_share": 0.05, "rss_extra_mib": 30.0}

WRITER = r"""
import os, sys, time
from datetime import datetime, UTC
root, pods, rate, seconds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
ROTATE = 10 << 20
dirs = [os.path.join(root, f"ml_train-{p}_uid-{p}", "trainer") for p in range(pods)]
for d in dirs:
    os.makedirs(d, exist_ok=True)
files = [open(os.path.join(d, "0.log"), "a") for d in dirs]
step, start, batch = 0, time.monotonic(), rate // 10
while time.monotonic() - start < seconds:
    t0 = time.monotonic()
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f") + "000Z"
    for p, f in enumerate(files):
        lines = []
        for i in range(batch):
            n = step + i
            if n % 100 == 0:
                text = f"n1:40{p}:40{p} [{p}] NCCL INFO Channel 00/0 : {p}[{p}] -> {p+1}[{p+1}] via P2P/CUMEM"
            elif n % 10 == 0:
                loss = 2.5 - n * 1e-6
                text = "{'loss': %.4f, 'grad_norm': 1.02, 'learning_rate': 4.9e-05, 'epoch': 0.12}" % loss
            elif n % 3 == 0:
                text = f" 12%|#         | {n}/1000000 [01:23<10:12,  9.44it/s]"
            else:
                text = f"rank {p} step {n} | loss {2.5 - n * 1e-6:.5f} | tokens/s 41230 | mem 61.2 GiB"
            lines.append(f"{stamp} stdout F {text}\n")
        f.write("".join(lines))
        f.flush()
        if f.tell() > ROTATE:  # the kubelet's rotation: rename, start a new file
            f.close()
            path = os.path.join(dirs[p], "0.log")
            os.rename(path, path + "." + datetime.now(UTC).strftime("%Y%m%d-%H%M%S%f"))
            files[p] = open(path, "a")
    step += batch
    time.sleep(max(0.0, 0.1 - (time.monotonic() - t0)))
"""


HOSTILE_BYTES = 64 << 10
HOSTILE_TARGET_S = 0.05


def hostile_lines(size: int = HOSTILE_BYTES) -> dict[str, str]:
    """One line of ``size`` characters per shape that costs a backtracking pattern more than linear time:
    a keyword then a run its quantifiers share, or a pattern's head repeated with its tail never coming."""

    def rep(unit: str, head: str = "") -> str:
        return (head + unit * (size // len(unit) + 1))[:size]

    return {
        "blanks_after_step": "step" + " " * (size - 5) + "x",
        "digits": "1" * (size - 1) + "x",
        "nccl_warn": rep("NCCL WARN "),
        "megatron_heads": rep("iteration 1/1 |"),
        "deepspeed_heads": rep("steps: 1 "),
        "lightning_heads": rep("Epoch 1: 1%|"),
        "tqdm_heads": rep("1/1 [1:1<1:1, 1"),
        "hf_trainer_heads": rep("{'loss': 1,"),
        "vllm_heads": rep("Avg prompt throughput: 1 tokens/s, Running: 1 reqs, "),
        "sglang_heads": rep("Decode batch #running-req: 1,"),
        "jupyter_heads": rep("[I ", "ServerApp "),
        "dataloader_heads": rep("DataLoader worker (pid"),
        "ib_completion_heads": rep("NET/IB : Got completion ", "NCCL "),
        "plugin_heads": rep("NET/Plugin : Plugin load ", "NCCL "),
        "peer_closed_heads": rep("NET/IB : ", "NCCL "),
    }


def cri_records(text: str, stamp: str = "2026-01-01T00:00:00.000000000Z", part: int = 16 << 10) -> list[str]:
    """``text`` as containerd writes it: a P record per full ``part`` characters, then an F with the rest."""
    full = len(text) // part
    records = [f"{stamp} stdout P {text[i * part : (i + 1) * part]}" for i in range(full)]
    return [*records, f"{stamp} stdout F {text[full * part :]}"]


def hostile(size: int = HOSTILE_BYTES) -> dict[str, object]:
    """Seconds of CPU the parser takes on each hostile line, per pattern set."""
    from exporter.podlogs.logparse import LogState, match_progress

    def cpu(fn, *args) -> float:  # type: ignore[no-untyped-def]
        started = time.process_time()
        fn(*args)
        return round(time.process_time() - started, 4)

    rows = {}
    for name, line in hostile_lines(size).items():
        rows[name] = {
            "progress": cpu(match_progress, line),
            "nccl_errors_workload": cpu(lambda text: LogState().feed(text, progress=False), line),
            "cri_record": cpu(LogState().feed_cri, cri_records(line)),
        }
    worst = max(v for row in rows.values() for v in row.values())
    return {"line_bytes": size, "cpu_s": rows, "worst_s": worst, "target_s": HOSTILE_TARGET_S}


WORST_PATTERN = r"(?:step|it)\s*(?P<step>\d+)\s*\S*\s*loss"
TENANT_LINES = 70  # lines a pass, per container
TENANT_PASSES = 6
# the budget, one search past it (35 ms, the cost check's bound), and reading 70 lines a container
TENANT_PASS_TARGET_S = 0.25


def tenant_passes(containers: int, budgeted: bool) -> dict[str, object]:
    """CPU seconds of each pass over ``containers`` hostile logs, with or without the pattern budget."""
    from exporter.podlogs.logparse import PATTERNS, load_patterns
    from exporter.sources.errors import ErrorCounter
    from exporter.sources.podlogs import PodLogSource

    patterns = load_patterns(json.dumps([{"name": "mine", "regex": WORST_PATTERN, "step": "step"}]))
    stamp = "2026-01-01T00:00:00.000000000Z"
    line = f"{stamp} stdout F step{'9' * 1020}\n" * TENANT_LINES  # no match, ~10 ms a line
    with tempfile.TemporaryDirectory(prefix="gbe-bench-tenant-") as root:
        pods = [("ml", f"job-{i}") for i in range(containers)]
        logs = []
        for ns, pod in pods:
            d = Path(root, f"{ns}_{pod}_uid-{pod}", "trainer")
            d.mkdir(parents=True)
            logs.append(d / "0.log")
            logs[-1].write_text("")
        clock = time.thread_time if budgeted else (lambda: 0.0)
        source = PodLogSource(
            root, ErrorCounter(), patterns + PATTERNS, sys_root=os.path.join(root, "sys"), cpu_clock=clock
        )
        source.set_pods(frozenset(pods))
        source.poll()  # opens the empty logs: every later line is new
        passes = []
        for _ in range(TENANT_PASSES):
            for log in logs:
                with log.open("a") as f:
                    f.write(line)
            started = time.thread_time()
            view = source.poll()
            passes.append(round(time.thread_time() - started, 3))
        return {
            "containers": containers,
            "budget": budgeted,
            "pass_cpu_s": passes,
            "max_pass_cpu_s": max(passes),
            "deferred": view.progress_deferred,
            "wait_s": round(view.progress_wait_s, 1),
        }


def tenant() -> dict[str, object]:
    from exporter.policy.thresholds import PODLOG_PROGRESS_CPU

    rows = [tenant_passes(n, budgeted) for n in (1, 64) for budgeted in (False, True)]
    worst = max(r["max_pass_cpu_s"] for r in rows if r["budget"])  # type: ignore[type-var]
    return {
        "pattern": WORST_PATTERN,
        "lines_per_pass": TENANT_LINES,
        "budget_s": PODLOG_PROGRESS_CPU.value,
        "runs": rows,
        "worst_budgeted_pass_cpu_s": worst,
        "target_s": TENANT_PASS_TARGET_S,
    }


def rss_mib(proc: psutil.Process) -> float:
    return proc.memory_info().rss / (1 << 20)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="15 s instead of 60 s")
    parser.add_argument("--hostile", action="store_true", help="time the parser on hostile lines only")
    parser.add_argument("--hostile-bytes", type=int, default=HOSTILE_BYTES, help="their length")
    parser.add_argument("--tenant", action="store_true", help="a pass's CPU under a slow user pattern")
    args = parser.parse_args()
    if args.tenant:
        figures = tenant()
        print(json.dumps(figures, indent=2))
        return 0 if figures["worst_budgeted_pass_cpu_s"] < TENANT_PASS_TARGET_S else 1  # type: ignore[operator]
    if args.hostile:
        figures = hostile(args.hostile_bytes)
        print(json.dumps(figures, indent=2))
        return 0 if figures["worst_s"] < HOSTILE_TARGET_S else 1  # type: ignore[operator]
    seconds = 15.0 if args.quick else 60.0

    from exporter.sources.errors import ErrorCounter
    from exporter.sources.podlogs import PodLogSource

    me = psutil.Process()
    with tempfile.TemporaryDirectory(prefix="gbe-bench-podlogs-") as root:
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, root, str(PODS), str(LINES_PER_S), str(seconds + 5)]
        )
        time.sleep(2.0)  # the writer has made the directories and is writing
        source = PodLogSource(root, ErrorCounter(), sys_root=os.path.join(root, "sys"))
        source.set_pods(frozenset(("ml", f"train-{p}") for p in range(PODS)))
        rss_before = rss_mib(me)
        cpu_before, wall_before = me.cpu_times(), time.monotonic()
        source.start()
        time.sleep(seconds)
        cpu_after, wall = me.cpu_times(), time.monotonic() - wall_before
        rss_after = rss_mib(me)
        source.stop()
        view = source.view
        writer.wait(30)
    cpu = (cpu_after.user - cpu_before.user) + (cpu_after.system - cpu_before.system)
    figures = {
        "pods": PODS,
        "lines_per_s_per_pod": LINES_PER_S,
        "seconds": round(wall, 1),
        "records_read": view.lines,
        "records_per_s": round(view.lines / wall),
        "records_per_core_s": round(view.lines / cpu) if cpu > 0 else None,
        "skipped_lines": view.skipped_lines,
        "skipped_bytes": view.skipped_bytes,
        "cpu_core_share": round(cpu / wall, 4),
        "rss_extra_mib": round(rss_after - rss_before, 1),
        "steps_seen": sorted({c.step for c in view.containers if c.step is not None})[-1:],
        "targets": TARGETS,
    }
    figures["targets_met"] = (
        figures["cpu_core_share"] < TARGETS["cpu_core_share"]
        and figures["rss_extra_mib"] < TARGETS["rss_extra_mib"]
    )
    print(json.dumps(figures, indent=2))
    return 0 if figures["targets_met"] else 1


if __name__ == "__main__":
    sys.exit(main())
