"""Synthetic traces of the GPU work that shares a fleet with training, for the detection bench.

    python -m devtools.workload_traces [OUT_DIR]   # default: examples/traces/workloads

Each trace is what ``nvidia-smi --query-gpu=... --format=csv -l 1`` prints for one workload class, from a
small physical model (seeded, so the files are reproducible): an LLM server under bursty Poisson load that
later goes quiet, the same server with requests queued behind a saturated CPU (its log's request counts in
the ``serving.*`` columns), an evaluation job with natural pauses, single-GPU batch decoding, a model
split layer-wise over four GPUs, a notebook, a training job that loses a third of its time to its input
pipeline, and a training job on boards an operator power-capped, logged without a name. Labels say which
episodes are waste worth a page; everything else must stay quiet.
"""

from __future__ import annotations

import gzip
import json
import random
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
T0 = datetime(2026, 11, 2, 9, 0, 0, tzinfo=UTC).timestamp()


@dataclass(frozen=True)
class Board:
    name: str
    total_mib: float
    idle_w: float
    tdp_w: float
    clock_max: float


H100 = Board("NVIDIA H100 80GB HBM3", 81559, 70.0, 700.0, 1980)
A100 = Board("NVIDIA A100-SXM4-80GB", 81920, 60.0, 400.0, 1410)
L4 = Board("NVIDIA L4", 23034, 16.0, 72.0, 2040)


@dataclass
class Sample:
    util: float  # 0-1
    mem_util: float  # 0-1
    mem_mib: float
    power_w: float
    running: float | None = None
    waiting: float | None = None
    clock: float | None = None  # the SM clock over its maximum (None: the maximum while it works)


Model = Callable[[float], list[Sample]]  # seconds since start -> one sample per GPU


def _busy(rng: random.Random, board: Board, power_share: float, mem_util: float, mem: float) -> Sample:
    util = min(1.0, 0.9 + 0.1 * rng.random())
    power = board.idle_w + (board.tdp_w - board.idle_w) * power_share * (0.93 + 0.1 * rng.random())
    return Sample(util, mem_util * (0.85 + 0.3 * rng.random()), mem, power)


def _idle(rng: random.Random, board: Board, mem: float) -> Sample:
    return Sample(0.0, 0.0, mem, board.idle_w * (1.0 + 0.15 * rng.random()))


# ---- the workloads -------------------------------------------------------------------------------


def serving(rng: random.Random, board: Board, rate: float, quiet_from: float, queue: bool = False) -> Model:
    """A vLLM-like server: weights load, then 90 % of the framebuffer is reserved for the KV cache and
    held; requests arrive as a Poisson process and decode for 1-6 s each (continuous batching: the GPU is
    busy while any runs); decode is memory-bound: utilization high, power 35-60 % of the board's range.
    From ``quiet_from`` no request arrives. ``queue``: the CPU cannot keep up (tokenizer, scheduler), so
    requests wait while the GPU runs only a trickle of them."""
    ends: list[float] = []
    arrivals: list[float] = []
    t = 40.0
    while t < quiet_from:
        t += rng.expovariate(rate)
        arrivals.append(t)
    busy_until: list[tuple[float, float]] = []
    for a in arrivals:
        length = rng.uniform(1.0, 6.0)
        busy_until.append((a, a + length))
        ends.append(a + length)

    def model(s: float) -> list[Sample]:
        reserved = 0.9 * board.total_mib
        mem = 16000.0 * min(1.0, s / 25.0) if s < 30 else reserved
        running = sum(1 for a, e in busy_until if a <= s < e)
        waiting = 0.0
        if queue and s >= 60:
            waiting = float(8 + int(s / 30) % 5)
            running = 1 if (s % 5.0) < 1.0 else 0  # the CPU admits a request now and then
        busy = _busy(rng, board, rng.uniform(0.35, 0.6), 0.55, mem)
        sample = busy if running else _idle(rng, board, mem)
        sample.running, sample.waiting = float(running), waiting
        return [sample]

    return model


def evaluation(rng: random.Random, board: Board) -> Model:
    """Evaluation or batch inference: busy stretches of 60-120 s near the power limit, then a natural
    pause of 5-10 s (scoring, loading the next subset)."""
    phases: list[tuple[float, bool]] = []
    t = 0.0
    while t < 4 * 3600:
        t += rng.uniform(60, 120)
        phases.append((t, True))
        t += rng.uniform(5, 10)
        phases.append((t, False))
    mem = 0.62 * board.total_mib

    def model(s: float) -> list[Sample]:
        busy = next((b for end, b in phases if s < end), True)
        return [_busy(rng, board, 0.85, 0.45, mem) if busy else _idle(rng, board, mem)]

    return model


def decode(rng: random.Random, board: Board, gpus: int) -> Model:
    """Batch generation on GPU 0 of a node whose other GPUs hold a resident copy of a model and wait:
    decode keeps a kernel resident (utilization 90-100 %) with the memory controller busy and power at
    35-60 % of the board's range. No collective anywhere."""
    mem = 0.55 * board.total_mib

    def model(s: float) -> list[Sample]:
        first = _busy(rng, board, rng.uniform(0.3, 0.55), 0.6, mem)
        return [first] + [_idle(rng, board, 0.2 * board.total_mib) for _ in range(gpus - 1)]

    return model


def pipeline(rng: random.Random, board: Board, gpus: int, dt: float) -> Model:
    """A model split layer-wise over the GPUs (one process, device_map="auto"): the stages take turns,
    one busy at a time, so each reads about 1/N of the time and their sum about one GPU's."""
    mem = 0.7 * board.total_mib
    stage_s = 0.1  # a stage's turn per token

    def model(s: float) -> list[Sample]:
        out = []
        for g in range(gpus):
            # the share of this sample period in which stage g ran (turns are far shorter than dt)
            share = (1.0 / gpus) * (0.8 + 0.3 * rng.random())
            # a token every ~N*stage_s: at fine sampling the turns show as alternation
            if dt < gpus * stage_s:
                share = 1.0 if int(s / stage_s) % gpus == g else 0.0
            power = board.idle_w + (board.tdp_w - board.idle_w) * 0.8 * share
            out.append(Sample(share, share * 0.5, mem, power * (0.97 + 0.06 * rng.random())))
        return out

    return model


def notebook(rng: random.Random, board: Board) -> Model:
    """A notebook session: memory held, minutes of nothing, cells that compute for 10-60 s."""
    cells: list[tuple[float, float]] = []
    t = 60.0
    while t < 4 * 3600:
        start = t + rng.uniform(30, 240)
        cells.append((start, start + rng.uniform(10, 60)))
        t = cells[-1][1]
    # then the user leaves with the kernel still alive
    mem = 0.3 * board.total_mib

    def model(s: float) -> list[Sample]:
        busy = any(a <= s < e for a, e in cells if e < 1800)
        return [_busy(rng, board, 0.7, 0.4, mem) if busy else _idle(rng, board, mem)]

    return model


def training_third(rng: random.Random, board: Board, gpus: int, onset: float) -> Model:
    """Data-parallel training (steps of ~1 s at 1 s sampling read 97-100 %); from ``onset`` every rank
    waits for its input a third of the time, in step-sized gaps (the ranks move together)."""
    mem = 0.78 * board.total_mib

    def model(s: float) -> list[Sample]:
        starving = s >= onset and rng.random() < 0.33
        return [
            _idle(rng, board, mem) if starving else _busy(rng, board, 0.85, 0.45, mem) for _ in range(gpus)
        ]

    return model


def operator_cap(rng: random.Random, board: Board, gpus: int, cap_w: float, clock: float) -> Model:
    """Data-parallel training on boards an operator capped (`nvidia-smi -pl`): every rank computes at the
    cap, its SM clock held at ``clock`` of its maximum (a few percent of jitter)."""
    mem = 0.7 * board.total_mib

    def model(s: float) -> list[Sample]:
        return [
            Sample(
                min(1.0, 0.95 + 0.05 * rng.random()),
                0.4 * (0.85 + 0.3 * rng.random()),
                mem,
                cap_w * (0.97 + 0.03 * rng.random()),
                clock=clock * (0.97 + 0.06 * rng.random()),
            )
            for _ in range(gpus)
        ]

    return model


# ---- writing -------------------------------------------------------------------------------------

HEADER = (
    "timestamp, index, name, utilization.gpu [%], utilization.memory [%], memory.used [MiB], "
    "memory.total [MiB], power.draw [W], power.limit [W], clocks.sm [MHz], clocks.max.sm [MHz]"
)


def rows(
    board: Board,
    model: Model,
    seconds: float,
    dt: float,
    serving_cols: bool,
    limit_w: float | None = None,
    named: bool = True,
) -> Iterator[str]:
    """The log's lines; ``limit_w`` the enforced limit (default: the board's TDP), ``named`` whether the
    log has the board's name (without it, nothing in the log says what the board could draw)."""
    header = HEADER if named else HEADER.replace(" name,", "")
    yield header + (", serving.running, serving.waiting" if serving_cols else "")
    limit = board.tdp_w if limit_w is None else limit_w
    for k in range(int(seconds / dt)):
        s = k * dt
        stamp = datetime.fromtimestamp(T0 + s, UTC).strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]
        for g, x in enumerate(model(s)):
            clock = board.clock_max * (x.clock or 1.0) if x.util > 0 else 210
            name = f" {board.name}," if named else ""
            line = (
                f"{stamp}, {g},{name} {round(100 * x.util)} %, {round(100 * x.mem_util)} %, "
                f"{x.mem_mib:.0f} MiB, {board.total_mib:.0f} MiB, {x.power_w:.2f} W, {limit:.2f} W, "
                f"{clock:.0f} MHz, {board.clock_max:.0f} MHz"
            )
            if serving_cols:
                line += f", {x.running:.0f}, {x.waiting:.0f}"
            yield line


@dataclass(frozen=True)
class Spec:
    name: str
    workload: str
    scenario: str
    board: Board
    seconds: float
    dt: float
    build: Callable[[random.Random], Model]
    labels: tuple[dict, ...] = ()
    serving_cols: bool = False
    limit_w: float | None = None  # the enforced power limit (None: the board's TDP)
    named: bool = True  # the log names the board


def specs() -> list[Spec]:
    quiet = 2400.0
    return [
        Spec(
            "w01_h100_serving_bursty_then_quiet",
            "serving",
            "vLLM-like server, Poisson load (one request every ~7 s) for 40 min, then no requests for 20 min",
            H100,
            3600,
            1.0,
            lambda r: serving(r, H100, 1 / 7, quiet),
            ({"gpu": "0", "kind": "idle_allocated", "start": quiet + 6, "end": 3600.0},),
        ),
        Spec(
            "w02_l4_serving_busy",
            "serving",
            "vLLM-like server on an L4 under heavier Poisson load (one request every ~2.5 s) for 30 min",
            L4,
            1800,
            0.5,
            lambda r: serving(r, L4, 1 / 2.5, 1800),
        ),
        Spec(
            "w03_h100_serving_queued_cpu",
            "serving",
            "the server's CPU saturated: requests wait in its queue while the GPU idles (its log's counts)",
            H100,
            1200,
            1.0,
            lambda r: serving(r, H100, 1 / 7, 1200, queue=True),
            ({"gpu": "0", "kind": "data_starvation", "start": 60.0, "end": 1200.0},),
            serving_cols=True,
        ),
        Spec(
            "w04_a100_evaluation_pauses",
            "evaluation",
            "evaluation at ~90 % mean utilization, a 5-10 s pause every 1-2 minutes",
            A100,
            2880,
            1.0,
            lambda r: evaluation(r, A100),
        ),
        Spec(
            "w05_a100x4_decode_single",
            "batch",
            "batch generation on GPU 0 (memory-bound decode, 35-60 % power); GPUs 1-3 hold a model, idle",
            A100,
            1800,
            1.0,
            lambda r: decode(r, A100, 4),
            # the idle holders are reserved GPUs doing nothing: the one waste worth a page here
            tuple({"gpu": str(g), "kind": "idle_allocated", "start": 0.0, "end": 1800.0} for g in (1, 2, 3)),
        ),
        Spec(
            "w06_a100x4_pipeline_1s",
            "pipeline",
            "a 70B model split layer-wise over 4 A100s (the stages take turns), sampled every second",
            A100,
            1800,
            1.0,
            lambda r: pipeline(r, A100, 4, 1.0),
            (),  # the turns are the parallelism chosen: the pipeline class, no verdict
        ),
        Spec(
            "w07_a100x4_pipeline_100ms",
            "pipeline",
            "the same pipeline sampled every 100 ms: the turns show",
            A100,
            900,
            0.1,
            lambda r: pipeline(r, A100, 4, 0.1),
            (),
        ),
        Spec(
            "w08_l4_notebook",
            "interactive",
            "a notebook: cells compute for 10-60 s every few minutes for 30 min, then the user leaves the "
            "kernel holding memory",
            L4,
            3600,
            2.0,
            lambda r: notebook(r, L4),
            ({"gpu": "0", "kind": "idle_allocated", "start": 1800.0, "end": 3600.0},),
        ),
        Spec(
            "w09_h100x4_training_third_starved",
            "training",
            "data-parallel training that loses a third of its time to input waits from 5 minutes on",
            H100,
            1500,
            1.0,
            lambda r: training_third(r, H100, 4, 300.0),
            tuple(
                {"gpu": str(g), "kind": "data_starvation", "start": 300.0, "end": 1500.0} for g in range(4)
            ),
        ),
        Spec(
            "w10_4gpu_training_operator_power_cap",
            "training",
            "data-parallel training on four boards an operator capped at 300 W (`nvidia-smi -pl 300` on "
            "700 W H100s): each draws its cap with its SM clock held near 60 % of its maximum; the log has "
            "no clock-event reasons, no default limit and no board name",
            H100,
            900,
            1.0,
            lambda r: operator_cap(r, H100, 4, 300.0, 0.6),
            tuple({"gpu": str(g), "kind": "power_throttle", "start": 0.0, "end": 900.0} for g in range(4)),
            limit_w=300.0,
            named=False,
        ),
    ]


def save(path: Path, lines: Iterable[str], labels: dict) -> None:
    """A trace gzipped with no time in its header (the same bytes every run) and its labels beside it."""
    with gzip.GzipFile(path, "wb", mtime=0) as fh:
        fh.write(("\n".join(lines) + "\n").encode())
    name = path.name.removesuffix(".gz").rsplit(".", 1)[0]
    (path.parent / f"{name}.labels.json").write_text(
        json.dumps({"trace": path.name, **labels}, indent=1) + "\n"
    )


def write(spec: Spec, out: Path) -> None:
    rng = random.Random(spec.name)
    model = spec.build(rng)
    lines = rows(spec.board, model, spec.seconds, spec.dt, spec.serving_cols, spec.limit_w, spec.named)
    labels = {"scenario": spec.scenario, "workload": spec.workload, "labels": list(spec.labels)}
    save(out / f"{spec.name}.csv.gz", lines, labels)


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else REPO / "examples" / "traces" / "workloads"
    out.mkdir(parents=True, exist_ok=True)
    for spec in specs():
        write(spec, out)
        print(f"wrote {out / spec.name}.csv.gz")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
