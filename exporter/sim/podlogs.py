"""The simulated pods' container logs, in the kubelet's layout and the CRI format, so that the real pod-log
source follows them as it follows a node's: ``<root>/<namespace>_<pod>_<uid>/<container>/0.log``.

Each training pod prints its NCCL_DEBUG=INFO init (transports as the scenario has them) and then a line
a second while its job runs: a step counter and, every few steps, HF Trainer's loss dict. A hung job
(``comm_hang``) stops printing at the onset, as a real one does; with ``logs=flow`` it keeps printing
request lines instead: the idle tensor-parallel server whose NVML picture is the same as a hang's.
A job killed by a full /dev/shm prints PyTorch's Bus error once; a hung one, PyTorch's watchdog timeout
after ten minutes. ``nvlink_down`` sets its channels up via SHM, ``comm_bound`` over sockets between
nodes (on a node with an EFA device).
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from pathlib import Path

from exporter.sim.kubelet import SimPod
from exporter.sim.physics import NodeModel

LINE_EVERY_S = 1.0
LOSS_EVERY = 5  # steps between loss dicts
NCCL = "{host}:{pid}:{pid} [{rank}] NCCL INFO "
WATCHDOG_S = 600.0  # PyTorch's default NCCL timeout
WATCHDOG = (
    "[rank0]:[E ProcessGroupNCCL.cpp:563] [Rank 0] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=4711, OpType=ALLREDUCE, NumelIn=1, Timeout(ms)=600000) ran for 600043 milliseconds"
)


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

    def start(self) -> SimPodLogs:
        now = time.time()
        scenario = self.model.scenario_at(now).name
        for pod, path in self._files:
            ranks = len(next(iter(pod.devices.values()), []))
            with path.open("a") as f:
                f.writelines(cri(now, line) for line in nccl_init(scenario, ranks))
        self._thread = threading.Thread(target=self._run, name="sim-podlogs", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(LINE_EVERY_S):
            self.write(time.time())

    def lines_at(self, t: float) -> list[tuple[str, str]]:
        """(stream, text) lines the job prints in the second ending at t."""
        sc, x = self.model.segment(t)
        faulty = x >= sc.onset_s
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
        lines = self.lines_at(t)
        if not lines:
            return
        for _, path in self._files:
            with path.open("a") as f:
                f.writelines(cri(t, text, stream) for stream, text in lines)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
