"""Hand-made plain `nvidia-smi` logs: what most teams keep, judged without the columns they lack.

    python -m devtools.plain_traces [OUT_DIR]   # default: examples/traces/plain

Each trace is what ``nvidia-smi --query-gpu=timestamp,index,name,utilization.gpu,utilization.memory,
memory.used,memory.total,power.draw,power.limit,temperature.gpu,clocks.sm --format=csv -l 1`` prints
(or, for the server, ``nvidia-smi -l 60`` screens with their process table), with no clock-event reasons,
no ``clocks.max.sm``, no default limit and no host columns. They are **hand-made** from a small seeded
physical model (the files are reproducible byte for byte; a test fails while they are stale), for the
cases the plain columns must still tell apart: a rank of a data-parallel job that stops while its peers
spin in their collective, one GPU of a machine of independent jobs that stops, a healthy job with a
checkpoint pause, a server its process table names, and a board an operator caps in steps.
"""

from __future__ import annotations

import math
import random
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from devtools.workload_traces import A100, H100, Board, save

REPO = Path(__file__).resolve().parent.parent
T0 = datetime(2026, 11, 16, 14, 0, 0, tzinfo=UTC).timestamp()
LAPTOP = Board("NVIDIA GeForce RTX 4070 Laptop GPU", 8188, 4.0, 115.0, 2175)


@dataclass
class Row:
    util: float  # 0-1
    mem_util: float  # 0-1
    mem_mib: float
    power_w: float
    temp_c: float
    clock: float  # the SM clock over the board's maximum
    limit_w: float | None = None  # the enforced limit (None: the board's default)


Model = Callable[[float], list[Row]]


def _compute(rng: random.Random, board: Board, mem: float, share: float = 0.85, temp: float = 62.0) -> Row:
    """A rank computing flat out: utilization 97-100 %, power near ``share`` of the board's range."""
    power = board.idle_w + (board.tdp_w - board.idle_w) * share * (0.94 + 0.08 * rng.random())
    return Row(min(1.0, 0.97 + 0.04 * rng.random()), 0.45 * (0.9 + 0.2 * rng.random()), mem, power, temp, 1.0)


def _spin(rng: random.Random, board: Board, mem: float) -> Row:
    """A rank spinning in a collective that waits for a peer: an NCCL kernel resident (utilization
    99-100 %), the SMs mostly polling, so power about half the board's range and memory traffic low."""
    power = board.idle_w + (board.tdp_w - board.idle_w) * 0.4 * (0.9 + 0.2 * rng.random())
    return Row(min(1.0, 0.99 + 0.02 * rng.random()), 0.02 * rng.random(), mem, power, 55.0, 1.0)


def _stopped(rng: random.Random, board: Board, mem: float) -> Row:
    """A GPU with memory held and no kernel: 0-3 % utilization at idle draw, the clock parked."""
    util = 0.03 * rng.random() if rng.random() < 0.4 else 0.0
    return Row(util, 0.0, mem, board.idle_w * (1.0 + 0.35 * rng.random()), 41.0, 0.11)


def ddp_rank_stops(
    rng: random.Random, board: Board, gpus: int, rank: int, stop: tuple[float, float]
) -> Model:
    """Data-parallel training; rank ``rank`` stops during ``stop`` (its host hung on a read, its loader
    died and respawned) while the others spin in the all-reduce waiting for it."""
    mem = 0.87 * board.total_mib

    def model(s: float) -> list[Row]:
        if not stop[0] <= s < stop[1]:
            return [_compute(rng, board, mem) for _ in range(gpus)]
        return [_stopped(rng, board, mem) if g == rank else _spin(rng, board, mem) for g in range(gpus)]

    return model


def independent_one_stops(
    rng: random.Random, board: Board, gpus: int, gpu: int, stop: tuple[float, float]
) -> Model:
    """A machine of independent single-GPU jobs (each its own model, its own pace); GPU ``gpu``'s job
    stops during ``stop``. Nobody waits for it: the others keep their own pace."""
    mems = [rng.uniform(0.55, 0.9) * board.total_mib for _ in range(gpus)]
    shares = [rng.uniform(0.55, 0.9) for _ in range(gpus)]

    def model(s: float) -> list[Row]:
        out = []
        for g in range(gpus):
            if g == gpu and stop[0] <= s < stop[1]:
                out.append(_stopped(rng, board, mems[g]))
                continue
            row = _compute(rng, board, mems[g], shares[g])
            row.util = min(1.0, 0.88 + 0.12 * rng.random())
            out.append(row)
        return out

    return model


def ddp_checkpoint(rng: random.Random, board: Board, gpus: int, every: float, pause: float) -> Model:
    """Healthy data-parallel training that saves a checkpoint every ``every`` seconds: every rank stops
    for ``pause`` seconds together while rank 0 writes (memory unchanged). A natural pause: no page."""
    mem = 0.87 * board.total_mib

    def model(s: float) -> list[Row]:
        saving = s > 60 and (s % every) < pause
        return [_stopped(rng, board, mem) if saving else _compute(rng, board, mem) for _ in range(gpus)]

    return model


def ddp_rank0_saves(rng: random.Random, board: Board, gpus: int, every: float, pause: float) -> Model:
    """Healthy data-parallel training whose rank 0 alone writes a checkpoint every ``every`` seconds
    (``torch.save`` on the main process) for ``pause`` seconds, while the other ranks wait for it at the
    barrier, spinning in its all-reduce: the same picture as a stopped rank, on the rank where saves run."""
    mem = 0.87 * board.total_mib

    def model(s: float) -> list[Row]:
        if not (s > 60 and (s % every) < pause):
            return [_compute(rng, board, mem) for _ in range(gpus)]
        return [_stopped(rng, board, mem) if g == 0 else _spin(rng, board, mem) for g in range(gpus)]

    return model


CAP_STEPS = ((300.0, 250.0, 0.55), (600.0, 200.0, 0.42), (900.0, 150.0, 0.28), (1200.0, 100.0, 0.12))


def capped_in_steps(rng: random.Random, board: Board, sweep_end: float) -> Model:
    """One board's training job while an operator sweeps its power limit down in steps (``nvidia-smi -pl``
    for an energy study): at each cap it draws the cap with its SM clock held at a fraction of its
    maximum. After the sweep the default limit is back: full clocks, the board at 81 C (warm, not
    throttling)."""
    mem = 0.6 * board.total_mib

    def model(s: float) -> list[Row]:
        if s >= sweep_end:  # full power again: the board warms from 58 C toward 81 C over minutes
            temp = 81.0 - 23.0 * math.exp(-(s - sweep_end) / 90.0) + rng.uniform(-0.5, 0.5)
            return [_compute(rng, board, mem, 0.9, temp)]
        cap = [(lim, clk) for start, lim, clk in CAP_STEPS if s >= start]
        if not cap:
            return [_compute(rng, board, mem, 0.8, 64.0)]
        limit, clock = cap[-1]
        return [
            Row(
                min(1.0, 0.96 + 0.05 * rng.random()),
                0.35 * (0.9 + 0.2 * rng.random()),
                mem,
                limit * (0.97 + 0.03 * rng.random()),
                58.0,
                clock * (0.96 + 0.08 * rng.random()),
                limit,
            )
        ]

    return model


def server_sweep(rng: random.Random, board: Board, seconds: float) -> Model:
    """An Ollama server on a laptop GPU answering an evaluation sweep: a model resident (5.6 of 8 GiB),
    requests one after another for minutes, then none for a while; a screen a minute catches whatever
    moment it falls on."""
    mem = 5730.0
    phases: list[tuple[float, float]] = []
    t = 300.0
    while t < seconds:
        length = rng.uniform(600, 3000)
        phases.append((t, t + length))
        t += length + rng.uniform(300, 2400)

    def model(s: float) -> list[Row]:
        busy = any(a <= s < b for a, b in phases) and rng.random() < 0.7
        if busy:
            return [_compute(rng, board, mem, rng.uniform(0.4, 0.75), 70.0)]
        return [_stopped(rng, board, mem)]

    return model


# ---- writing -------------------------------------------------------------------------------------

HEADER = (
    "timestamp, index, name, utilization.gpu [%], utilization.memory [%], memory.used [MiB], "
    "memory.total [MiB], power.draw [W], power.limit [W], temperature.gpu, clocks.sm [MHz]"
)


def _stamp(s: float) -> str:
    return datetime.fromtimestamp(T0 + s, UTC).strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]


def csv_rows(board: Board, model: Model, seconds: float, dt: float) -> Iterator[str]:
    yield HEADER
    for k in range(int(seconds / dt)):
        s = k * dt
        for g, x in enumerate(model(s)):
            limit = board.tdp_w if x.limit_w is None else x.limit_w
            yield (
                f"{_stamp(s)}, {g}, {board.name}, {round(100 * x.util)} %, {round(100 * x.mem_util)} %, "
                f"{x.mem_mib:.0f} MiB, {board.total_mib:.0f} MiB, {x.power_w:.2f} W, {limit:.2f} W, "
                f"{x.temp_c:.0f}, {board.clock_max * x.clock:.0f} MHz"
            )


def screen_rows(board: Board, model: Model, seconds: float, dt: float, process: str) -> Iterator[str]:
    """``nvidia-smi -l N`` on Windows: a dated screen per sample, the GPU table and its process table."""
    for k in range(int(seconds / dt)):
        s = k * dt
        (x,) = model(s)
        when = datetime.fromtimestamp(T0 + s, UTC).strftime("%a %b %d %H:%M:%S %Y")
        yield when
        yield "+-----------------------------------------------------------------------------------------+"
        yield "| NVIDIA-SMI 560.94                 Driver Version: 560.94         CUDA Version: 12.6     |"
        yield "|-----------------------------------------+------------------------+----------------------+"
        yield "| GPU  Name                  Driver-Model | Bus-Id          Disp.A | Volatile Uncorr. ECC |"
        yield "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |"
        yield "|=========================================+========================+======================|"
        yield f"|   0  {board.name:<30} WDDM  |   00000000:01:00.0 Off |                  N/A |"
        power = f"{x.power_w:3.0f}W / {board.tdp_w:3.0f}W"
        memory = f"{x.mem_mib:5.0f}MiB / {board.total_mib:5.0f}MiB"
        util = f"{round(100 * x.util):3d}%"
        yield f"| N/A   {x.temp_c:.0f}C    P0            {power} |   {memory} |     {util}      Default |"
        yield "+-----------------------------------------+------------------------+----------------------+"
        yield ""
        yield "+-----------------------------------------------------------------------------------------+"
        yield "| Processes:                                                                              |"
        yield "|  GPU   GI   CI        PID   Type   Process name                              GPU Memory |"
        yield "|        ID   ID                                                               Usage      |"
        yield "|=========================================================================================|"
        yield f"|    0   N/A  N/A     18324      C   {process:<40}      N/A      |"
        yield "+-----------------------------------------------------------------------------------------+"


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
    process: str = ""  # a screen log with this process in its table ("": a query-gpu CSV)
    allowed: tuple[dict, ...] = ()  # stretches where the named kinds may fire or not


def specs() -> list[Spec]:
    stop = (240.0, 420.0)
    return [
        Spec(
            "p01_h100x4_ddp_rank_stops",
            "training",
            "4-GPU data-parallel training at 1 s; rank 2 stops for three minutes (0-3 % at idle power) while "
            "ranks 0, 1 and 3 spin in the all-reduce at 99-100 % and about half their power",
            H100,
            600,
            1.0,
            lambda r: ddp_rank_stops(r, H100, 4, 2, stop),
            ({"gpu": "2", "kind": "data_starvation", "start": stop[0], "end": stop[1]},),
        ),
        Spec(
            "p02_a100x4_independent_one_stops",
            "training",
            "four independent single-GPU jobs at their own pace; GPU 1's job stops for three minutes",
            A100,
            600,
            1.0,
            lambda r: independent_one_stops(r, A100, 4, 1, stop),
            ({"gpu": "1", "kind": "data_starvation", "start": stop[0], "end": stop[1]},),
        ),
        Spec(
            "p03_h100x4_ddp_checkpoints",
            "training",
            "healthy 4-GPU data-parallel training that saves a checkpoint every 5 minutes, every rank "
            "pausing 20 s together",
            H100,
            1500,
            1.0,
            lambda r: ddp_checkpoint(r, H100, 4, 300.0, 20.0),
        ),
        Spec(
            "p04_a100_power_cap_steps",
            "training",
            "one A100 (400 W default) training while an operator caps it in steps of 250, 200, 150 and "
            "100 W every 5 minutes: it draws the cap with its SM clock at 55, 42, 28 and 12 % of its "
            "maximum; then the default limit is back and it runs at full clocks at 81 C",
            A100,
            1800,
            1.0,
            lambda r: capped_in_steps(r, A100, 1500.0),
            ({"gpu": "0", "kind": "power_throttle", "start": 300.0, "end": 1500.0},),
        ),
        Spec(
            "p05_laptop_ollama_screens_60s",
            "serving",
            "an Ollama server on a laptop GPU answering an evaluation sweep for twelve hours, logged as "
            "`nvidia-smi -l 60` screens whose process table names ollama.exe",
            LAPTOP,
            12 * 3600,
            60.0,
            lambda r: server_sweep(r, LAPTOP, 12 * 3600),
            process="C:\\Program Files\\Ollama\\ollama.exe",
            # a server without requests for five minutes is idle capacity (an info notice), never a page
            allowed=({"gpu": "0", "kinds": ["idle_allocated"], "start": 0.0, "end": 12 * 3600.0},),
        ),
        Spec(
            "p06_h100x4_ddp_rank0_saves",
            "training",
            "healthy 4-GPU data-parallel training whose rank 0 alone writes a checkpoint for 60 s every 5 "
            "minutes while ranks 1-3 wait at the barrier, spinning in the all-reduce",
            H100,
            1500,
            1.0,
            lambda r: ddp_rank0_saves(r, H100, 4, 300.0, 60.0),
        ),
    ]


def write(spec: Spec, out: Path) -> Path:
    model = spec.build(random.Random(spec.name))
    if spec.process:
        path = out / f"{spec.name}.log.gz"
        lines = screen_rows(spec.board, model, spec.seconds, spec.dt, spec.process)
    else:
        path = out / f"{spec.name}.csv.gz"
        lines = csv_rows(spec.board, model, spec.seconds, spec.dt)
    labels: dict = {
        "scenario": spec.scenario,
        "workload": spec.workload,
        "made": "by hand (devtools/plain_traces.py), not recorded",
        "labels": list(spec.labels),
    }
    if spec.allowed:
        labels["allowed"] = list(spec.allowed)
    save(path, lines, labels)
    return path


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else REPO / "examples" / "traces" / "plain"
    out.mkdir(parents=True, exist_ok=True)
    for spec in specs():
        print(f"wrote {write(spec, out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
