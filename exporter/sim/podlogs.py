"""The simulated pods' container logs, in the kubelet's layout and the CRI format, so that the real pod-log
source follows them as it follows a node's: ``<root>/<namespace>_<pod>_<uid>/<container>/0.log``.

Each training pod prints its NCCL_DEBUG=INFO init (transports as the scenario has them) and then a line
a second while its job runs: a step counter and, every few steps, HF Trainer's loss dict. A hung job
(``comm_hang``) stops printing at the onset, as a real one does; with ``logs=flow`` it keeps printing
request lines instead: the idle tensor-parallel server whose NVML picture is the same as a hang's.
A job killed by a full /dev/shm prints PyTorch's Bus error once; a hung one, PyTorch's watchdog timeout
after ten minutes. ``nvlink_down`` sets its channels up via SHM, ``comm_bound`` over sockets between
nodes (on a node with an EFA device).

The workloads beside training (physics.py's ``Workload``) print what their programs print, each line at
the time of its event and with the numbers of the simulated load: the vLLM server its start-up, V1's
engine stats every 5 s per engine and uvicorn's access line per request; the evaluation and the pipeline
their tqdm bars; the notebook the Jupyter server's lines. With pods=2 the second pod trains and logs
steps.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from pathlib import Path

from exporter.sim.kubelet import SimPod
from exporter.sim.physics import (
    EVAL_BATCHES_S,
    EVAL_LOAD_S,
    EVAL_READY_S,
    NB_KERNEL_S,
    PIPE_BATCH_TOKENS,
    PIPE_SHARD_LOAD_S,
    SERVE_GRAPHS_S,
    SERVE_KV_S,
    SERVE_LOAD_S,
    SERVE_READY_S,
    SERVE_WEIGHTS_BYTES,
    Evaluation,
    GiB,
    NodeModel,
    Notebook,
    Pipeline,
    Request,
    Serving,
    Workload,
    noise,
)
from exporter.sim.scenarios import WORKLOADS

LINE_EVERY_S = 1.0
LOSS_EVERY = 5  # steps between loss dicts
NCCL = "{host}:{pid}:{pid} [{rank}] NCCL INFO "
WATCHDOG_S = 600.0  # PyTorch's default NCCL timeout
WATCHDOG = (
    "[rank0]:[E ProcessGroupNCCL.cpp:563] [Rank 0] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=4711, OpType=ALLREDUCE, NumelIn=1, Timeout(ms)=600000) ran for 600043 milliseconds"
)


Event = tuple[float, str, str]  # (time, stream, text) of one line a workload prints

# the vLLM server: V1 engine stats every STATS_EVERY_S, per engine (data parallel: one per GPU)
VLLM_MODEL = "meta-llama/Llama-3.1-8B-Instruct"
VLLM_VERSION = "0.9.2"
STATS_EVERY_S = 5.0
MAX_MODEL_LEN = 8192
# the evaluation's and the pipeline's progress bars
EVAL_TOTAL_BATCHES = 12000
EVAL_BATCH_SIZE = 8
EVAL_BAR_EVERY_S = 5.0  # how often rank 0's bar is written to the log while it advances
PIPE_SHARDS = 30  # a 70B checkpoint's safetensors shards
PIPE_BATCHES = 128  # batches of prompts to generate for
NOTEBOOK = "/home/jovyan/train.ipynb"
AUTOSAVE_S = 120.0  # JupyterLab saves a changed notebook this often


def cri(t: float, text: str, stream: str = "stdout") -> str:
    stamp = datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")
    return f"{stamp}000Z {stream} F {text}\n"


def nccl_init(scenario: str, ranks: int) -> list[str]:
    """The INFO lines of one init, with the transports the scenario's fabric gives."""
    h = NCCL.format(host="sim-node-0", pid=4021, rank=0)
    intra = "P2P/CUMEM"
    if scenario == "nvlink_down":
        intra = "SHM/direct/direct"
    lines = [
        h + "Bootstrap : Using eth0:10.0.0.11<0>",
        h + "NCCL version 2.21.5+cuda12.4",
        h + ("Using network Socket" if scenario == "comm_bound" else "Using network IB"),
    ]
    for r in range(max(ranks - 1, 0)):
        lines.append(h + f"Channel 00/0 : {r}[{r}] -> {r + 1}[{r + 1}] via {intra}")
    if scenario == "comm_bound":
        lines.append(h + f"Channel 00/0 : {ranks - 1}[{ranks - 1}] -> {ranks}[0] [send] via NET/Socket/0")
    elif scenario != "nvlink_down":
        lines.append(h + "NVLS multicast support is available on dev 0")
    lines.append(h + "Connected all rings")
    return lines


def _hex(*key: int) -> str:
    """32 hex digits from a hash of the key (request ids, kernel ids)."""
    return "".join(f"{int((noise(*key, part) + 1.0) / 2.0 * 0xFFFFFFFF):08x}" for part in range(4))


def _uuid(*key: int) -> str:
    h = _hex(*key)
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _clock(seconds: float) -> str:
    """tqdm's elapsed / remaining time: mm:ss, or h:mm:ss from an hour on."""
    m, sec = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m:02d}:{sec:02d}"


def tqdm_line(desc: str, n: int, total: int, elapsed: float) -> str:
    """One refresh of a tqdm bar, as tqdm writes it (its rate: items a second, or seconds an item)."""
    share = min(n / total, 1.0)
    cells = share * 10
    bar = "\u2588" * int(cells)
    if int(cells) < 10:
        bar += " \u258f\u258e\u258d\u258c\u258b\u258a\u2589"[int((cells - int(cells)) * 8)]
        bar = bar.ljust(10)
    if n == 0 or elapsed <= 0:
        return f"{desc}: {share:4.0%}|{bar}| {n}/{total} [00:00<?, ?it/s]"
    rate = n / elapsed
    speed = f"{rate:5.2f}it/s" if rate >= 1 else f"{1 / rate:5.2f}s/it"
    return (
        f"{desc}: {share:4.0%}|{bar}| {n}/{total} [{_clock(elapsed)}<{_clock((total - n) / rate)}, {speed}]"
    )


def _vllm(t: float, where: str, text: str) -> str:
    return f"INFO {datetime.fromtimestamp(t, UTC).strftime('%m-%d %H:%M:%S')} [{where}] {text}"


def _serving_boot(w: Serving) -> list[tuple[float, str, str]]:
    """The server's start-up lines: (seconds after the onset, stream, text; "" where: uvicorn's own)."""
    load = SERVE_LOAD_S[1] - SERVE_LOAD_S[0]
    return [
        (0.5, "__init__.py:244", "Automatically detected platform cuda."),
        (1.5, "api_server.py:1395", f"vLLM API server version {VLLM_VERSION}"),
        (
            2.5,
            "core.py:455",
            f"Initializing a V1 LLM engine (v{VLLM_VERSION}) with config: model='{VLLM_MODEL}', "
            f"dtype=torch.bfloat16, max_seq_len={MAX_MODEL_LEN}, tensor_parallel_size=1, "
            f"data_parallel_size={len(w.ranks)}, gpu_memory_utilization=0.9, enable_prefix_caching=True",
        ),
        (SERVE_LOAD_S[0], "gpu_model_runner.py:1595", f"Starting to load model {VLLM_MODEL}..."),
        (
            SERVE_LOAD_S[1],
            "gpu_model_runner.py:1624",
            f"Model loading took {SERVE_WEIGHTS_BYTES / GiB:.2f} GiB and {load:.2f} seconds",
        ),
        (SERVE_KV_S - 0.1, "gpu_worker.py:227", f"Available KV cache memory: {w.kv_bytes / GiB:.2f} GiB"),
        (SERVE_KV_S, "kv_cache_utils.py:715", f"GPU KV cache size: {w.kv_tokens:,} tokens"),
        (
            SERVE_KV_S,
            "kv_cache_utils.py:719",
            f"Maximum concurrency for {MAX_MODEL_LEN:,} tokens per request: "
            f"{w.kv_tokens / MAX_MODEL_LEN:.2f}x",
        ),
        (
            SERVE_GRAPHS_S,
            "gpu_model_runner.py:2048",
            f"Graph capturing finished in {SERVE_GRAPHS_S - SERVE_KV_S:.0f} secs, took 0.53 GiB",
        ),
        (
            SERVE_GRAPHS_S + 0.5,
            "core.py:171",
            "init engine (profile, create kv cache, warmup model) took "
            f"{SERVE_GRAPHS_S - SERVE_LOAD_S[1]:.2f} seconds",
        ),
        (SERVE_READY_S - 1.0, "api_server.py:1457", "Starting vLLM API server on http://0.0.0.0:8000"),
        (SERVE_READY_S - 0.5, "", "INFO:     Started server process [1]"),
        (SERVE_READY_S - 0.4, "", "INFO:     Waiting for application startup."),
        (SERVE_READY_S - 0.1, "", "INFO:     Application startup complete."),
    ]


def _ticks(begin: float, first: float, every: float, a: float, b: float) -> list[float]:
    """The times begin + first + k * every (k >= 0) in (a, b]."""
    k = max(0, int((a - begin - first) // every))
    out = []
    while (at := begin + first + k * every) <= b:
        if at > a:
            out.append(at)
        k += 1
    return out


def serving_lines(w: Serving, a: float, b: float) -> list[Event]:
    """What the vLLM server prints in (a, b]: start-up, per engine its stats every 5 s and per request
    uvicorn's access line (or, starved, vLLM's line for a request whose client gave up)."""
    out: list[Event] = []
    for at, where, text in _serving_boot(w):
        if a < w.begin + at <= b:
            line = _vllm(w.begin + at, where, text) if where else text
            out.append((w.begin + at, "stderr" if not where else "stdout", line))
    first = STATS_EVERY_S * -(-SERVE_READY_S // STATS_EVERY_S)  # the first 5 s mark with the server up
    for t in _ticks(w.begin, first, STATS_EVERY_S, a, b):
        out += [(t, "stdout", _stats_line(w, engine, g, t)) for engine, g in enumerate(w.ranks)]
    for g in w.ranks:
        requests = w.engines[g]
        out += [(r.end, "stdout", _access_line(g, r)) for r in requests.runs_between(a, b) if r.end <= b]
        out += [
            (r.left, "stdout", _vllm(r.left, "async_llm.py:273", f"Aborted request cmpl-{_hex(g, r.id)}."))
            for r in requests.gave_up(a, b)
        ]
    return sorted(out)


def _stats_line(w: Serving, engine: int, g: int, t: float) -> str:
    prompt, generated = w.throughput(g, t - STATS_EVERY_S, t)
    running, waiting = w.queue(g, t)
    return _vllm(
        t,
        "loggers.py:118",
        f"Engine {engine:03d}: Avg prompt throughput: {prompt:.1f} tokens/s, Avg generation throughput: "
        f"{generated:.1f} tokens/s, Running: {running} reqs, Waiting: {waiting} reqs, GPU KV cache usage: "
        f"{100 * w.kv_usage(g, t):.1f}%, Prefix cache hit rate: 0.0%",
    )


def _access_line(g: int, r: Request) -> str:
    host = 10 + int(_uniform_key(g, r.id, 1) * 30)
    port = 32768 + int(_uniform_key(g, r.id, 2) * 28000)
    return f'INFO:     10.0.3.{host}:{port} - "POST /v1/completions HTTP/1.1" 200 OK'


def _uniform_key(*key: int) -> float:
    return (noise(0xAC, *key) + 1.0) / 2.0


def evaluation_lines(w: Evaluation, a: float, b: float) -> list[Event]:
    """Rank 0's tqdm bar (every few seconds while it advances) and its line at each subset's end."""
    g = w.ranks[0]
    ready = w.begin + EVAL_READY_S
    load = EVAL_LOAD_S[1] - EVAL_LOAD_S[0]
    fixed = [
        (w.begin + EVAL_LOAD_S[0], tqdm_line("Loading checkpoint shards", 0, 4, 0.0)),
        (w.begin + EVAL_LOAD_S[1], tqdm_line("Loading checkpoint shards", 4, 4, load)),
        (ready, tqdm_line("Evaluating", 0, EVAL_TOTAL_BATCHES, 0.0)),
    ]
    out: list[Event] = [(t, "stderr", text) for t, text in fixed if a < t <= b]
    cycles = w.ranks_cycles[g]
    for t in _ticks(ready, EVAL_BAR_EVERY_S, EVAL_BAR_EVERY_S, a, b):
        if cycles.busy(t):
            done = w.batches(g, t) % EVAL_TOTAL_BATCHES
            out.append((t, "stderr", tqdm_line("Evaluating", done, EVAL_TOTAL_BATCHES, t - ready)))
    for t, k in cycles.pauses_between(a, b):
        samples = int((cycles.pauses[k] - cycles.starts[k]) * EVAL_BATCHES_S) * EVAL_BATCH_SIZE
        accuracy = 0.55 + 0.3 * (noise(0xACC, k) + 1.0) / 2.0
        text = (
            f"INFO:evaluate:subset {k + 1} scored: accuracy={accuracy:.4f} over {samples:,} samples; "
            f"loading subset {k + 2}"
        )
        out.append((t, "stdout", text))
    return sorted(out)


def pipeline_lines(w: Pipeline, a: float, b: float) -> list[Event]:
    """accelerate loading the shards onto the GPUs in turn, then the generation's bar, a batch at a time."""
    out: list[Event] = []
    per_shard = len(w.ranks) * PIPE_SHARD_LOAD_S / PIPE_SHARDS
    for k in range(0, PIPE_SHARDS + 1, 5):
        t = w.begin + max(0.5, k * per_shard - 0.1)  # the last shard's line just before the first token
        if a < t <= b:
            out.append((t, "stderr", tqdm_line("Loading checkpoint shards", k, PIPE_SHARDS, k * per_shard)))
    batch_s = PIPE_BATCH_TOKENS * w.period
    for t in _ticks(w.generating, 0.0, batch_s, a, b):
        done = round((t - w.generating) / batch_s)
        out.append(
            (t, "stderr", tqdm_line("Generating", done % PIPE_BATCHES, PIPE_BATCHES, t - w.generating))
        )
        out.append((t, "stderr", "Setting `pad_token_id` to `eos_token_id`:128001 for open-end generation."))
    return sorted(out)


def _jupyter(t: float, text: str) -> str:
    stamp = datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    return f"[I {stamp} ServerApp] {text}"


def notebook_lines(w: Notebook, a: float, b: float) -> list[Event]:
    """The Jupyter server: its start, the kernel's, and an autosave after cells changed the notebook."""
    kernel = _uuid(0x7E, int(w.begin))
    fixed = [
        (0.2, "Jupyter Server 2.14.2 is running at:"),
        (0.2, "http://127.0.0.1:8888/lab"),
        (0.3, "Use Control-C to stop this server and shut down all kernels (twice to skip confirmation)."),
        (NB_KERNEL_S, f"Kernel started: {kernel}"),
        (NB_KERNEL_S + 0.4, f"Connecting to kernel {kernel}."),
    ]
    out: list[Event] = [(w.begin + x, "stderr", _jupyter(w.begin + x, text)) for x, text in fixed]
    out = [e for e in out if a < e[0] <= b]
    cells = w.cells
    for t in _ticks(w.begin + NB_KERNEL_S, AUTOSAVE_S, AUTOSAVE_S, a, b):
        n = cells.begun(t)
        changed = n and (cells.ends[n - 1] > t - AUTOSAVE_S)  # a cell ran (or runs) since the last save
        if changed:
            out.append((t, "stderr", _jupyter(t, f"Saving file at {NOTEBOOK}")))
    return out


def workload_lines(model: NodeModel, work: Workload, a: float, b: float) -> list[Event]:
    """What a workload's pod prints in (a, b], under the model's lock (the events are made as needed)."""
    with model.lock:
        if isinstance(work, Serving):
            return serving_lines(work, a, b)
        if isinstance(work, Evaluation):
            return evaluation_lines(work, a, b)
        if isinstance(work, Pipeline):
            return pipeline_lines(work, a, b)
        if isinstance(work, Notebook):
            return notebook_lines(work, a, b)
    return []


class SimPodLogs:
    def __init__(self, model: NodeModel, pods: list[SimPod], root: Path) -> None:
        self.model = model
        self.root = root
        self._files: list[tuple[SimPod, Path]] = []
        for pod in pods:
            directory = root / f"{pod.namespace}_{pod.name}_{pod.uid}" / pod.container
            directory.mkdir(parents=True, exist_ok=True)
            self._files.append((pod, directory / "0.log"))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = time.time()
        self._bus_error_written = False
        self._watchdog_written = False
        self._last_t: float | None = None  # the end of the last window written (workloads' lines)

    def start(self) -> SimPodLogs:
        now = time.time()
        scenario = self.model.scenario_at(now).name
        work = self.model.workload(self.model.clock())
        if work is not None:  # what the workload printed since it began (the log file's head)
            self._last_t = self.model.clock()
            self._write_workload(work, work.begin - 1e-6, self._last_t)
        for i, (pod, path) in enumerate(self._files):
            if work is not None and i == 0:
                continue
            ranks = len(next(iter(pod.devices.values()), []))
            with path.open("a") as f:
                f.writelines(cri(now, line) for line in nccl_init(scenario, ranks))
        self._thread = threading.Thread(target=self._run, name="sim-podlogs", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(LINE_EVERY_S):
            self.write(time.time())

    def lines_at(self, t: float, since: float | None = None, pod: int = 0) -> list[tuple[str, str]]:
        """(stream, text) lines the job of pod ``pod`` prints in the second ending at t (a workload's pod:
        in (since, t])."""
        sc, x = self.model.segment(t)
        faulty = x >= sc.onset_s
        if sc.name in WORKLOADS and faulty and pod == 0:
            work = self.model.workload(t)
            if work is not None:
                a = t - LINE_EVERY_S if since is None else since
                return [(stream, text) for _, stream, text in workload_lines(self.model, work, a, t)]
        step = int((t - self._started) / LINE_EVERY_S)
        if sc.name == "comm_hang" and faulty:
            if sc.logs == "flow":
                return [("stdout", 'INFO:     10.0.0.5:41234 - "POST /v1/completions HTTP/1.1" 200 OK')]
            if x >= sc.onset_s + WATCHDOG_S and not self._watchdog_written:
                self._watchdog_written = True  # PyTorch's NCCL watchdog ends the job
                return [("stderr", WATCHDOG)]
            return []  # hung: the log stops
        if sc.name == "shm_exhaustion" and x >= sc.onset_s + sc.fill_s:
            if self._bus_error_written:
                return []
            self._bus_error_written = True
            return [
                (
                    "stderr",
                    "RuntimeError: DataLoader worker (pid 4242) is killed by signal: Bus error. It is "
                    "possible that dataloader's workers are out of shared memory.",
                )
            ]
        if sc.name == "idle_allocated" and faulty:
            return []
        out = [("stdout", f"step {step} | loss {2.5 - step * 1e-4:.4f}")]
        if step % LOSS_EVERY == 0:
            out.append(
                ("stdout", f"{{'loss': {2.5 - step * 1e-4:.4f}, 'learning_rate': 5e-05, 'epoch': 0.01}}")
            )
        return out

    def write(self, t: float) -> None:
        since = self._last_t if self._last_t is not None and self._last_t < t else t - LINE_EVERY_S
        self._last_t = t
        work = self.model.workload(t) if self.model.scenario_at(t).name in WORKLOADS else None
        if work is not None:  # its pod prints the workload's lines at their times; a second pod trains
            self._write_workload(work, since, t)
            for i, (_, path) in enumerate(self._files[1:], start=1):
                self._append(path, t, self.lines_at(t, since, pod=i))
            return
        lines = self.lines_at(t)
        if not lines:
            return
        for _, path in self._files:
            self._append(path, t, lines)

    def _write_workload(self, work: Workload, a: float, b: float) -> None:
        events = workload_lines(self.model, work, a, b)
        if events:
            with self._files[0][1].open("a") as f:
                f.writelines(cri(at, text, stream) for at, stream, text in events)

    @staticmethod
    def _append(path: Path, t: float, lines: list[tuple[str, str]]) -> None:
        if lines:
            with path.open("a") as f:
                f.writelines(cri(t, text, stream) for stream, text in lines)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
