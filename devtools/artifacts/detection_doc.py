"""docs/detection.md: the ledger, how each verdict follows from it, and worked examples. The tables and
every number come from the ledger's states, the verdict registry and the threshold table."""

from __future__ import annotations

from exporter.analysis.kinds import KINDS, in_scope
from exporter.analysis.ledger import FAMILIES, STATE_MEANING, STATES
from exporter.analysis.workload import CLASS_MEANING, IDLE_GAPS
from exporter.policy import thresholds as th


def _pct(t: th.Threshold) -> str:
    return f"{t.value * 100:g} %"


def _s(t: th.Threshold) -> str:
    return f"{t.value:g} s"


def _ledger() -> list[str]:
    return [
        "## The time ledger",
        "",
        "Every second of every GPU goes to exactly one state, decided from that second's samples and from "
        "the other GPUs of its job. The exporter counts them in `gpu_time_seconds_total{state}` (per GPU, "
        "with its pod's labels); `replay` prints them per GPU and per job. The states sum to the time "
        "observed (seconds with no sample, such as a lost GPU, are not counted).",
        "",
        "| state | meaning |",
        "|---|---|",
        *[f"| `{state}` | {STATE_MEANING[state]} |" for state in STATES],
        "",
        "How a second is split:",
        "",
        "- **Utilization is kernel time.** A driver sample of `u` says a kernel was resident for `u` of its "
        f"period. Below {_pct(th.UTIL_IDLE_LINE)} the sample is waiting time; up to "
        f"{_pct(th.LEDGER_BUSY_UTIL)} its no-kernel part `1 - u` is waiting; from "
        f"{_pct(th.LEDGER_STEADY_UTIL)} up the GPU counts as wholly working (the gaps inside are launch "
        "overhead: healthy H100 jobs train at 84-91 %); in between, the waiting part fades out. So a GPU "
        "at 10-30 % for minutes is waiting 70-90 % of its time, whatever its rhythm.",
        "- **A collective or compute.** Of the resident time, a sample is a collective when fewer than "
        f"{_pct(th.LEDGER_COMM_SM)} of the SMs are active per unit of utilization (GPM). Without GPM, a GPU "
        f"resident the whole second is in a collective when its memory controller is under "
        f"{_pct(th.LEDGER_COMM_MEM_UTIL)} busy. Without either, and only when the job has other GPUs, power "
        "decides through the GPU's *power envelope*: from its idle floor (the lowest draw it showed with no "
        "kernel, else the board table's idle draw) to its ceiling (the power limit, else the board table's "
        f"TDP, else its busiest draw raised to {th.POWER_FLOOR_TO_CEILING.value:g} times the floor). The "
        "share of that headroom drawn per unit of the second's utilization reads as a collective below "
        f"{_pct(th.LEDGER_COMM_POWER_LOW)} and as compute above {_pct(th.LEDGER_COMM_POWER_HIGH)}, split "
        "in between: a GPU at 78 % utilization drawing 84 W of a 230 W board that idles at 57 W spins, one "
        "at 100 % drawing 150 W of an H100 that idles at 70 W too. `replay` prints each GPU's envelope "
        "and what set it. A sample under half resident is never called a collective.",
        "- **Throttled.** Compute time with thermal clock-event reasons, or with the power cap holding "
        f"clocks more than {100 - th.LEDGER_THROTTLE_CLOCK.value * 100:g} % under their maximum.",
        "- **Quiet.** A collective is quiet when NVLink and PCIe carry under "
        f"{th.HANG_TRAFFIC.value / 1e6:g} MB/s (or the trace has no traffic columns).",
        "",
        "Then the second's context decides what its waiting is. A second is *stopped* when the GPU did "
        f"under {_pct(th.UTIL_IDLE_LINE)} work and moved no data. Stopped runs up to "
        f"{_s(th.STARVATION_PAUSE)} are step-level waits (`input_wait`, `comm_wait`); a longer run is held "
        "back that long (the counters lag by at most this much) and judged as a whole:",
        "",
        f"- in start-up, waiting is `idle`: until the job has worked in {th.LEDGER_STARTUP_COMPUTE.value:g} "
        f"separate seconds, or held the GPU {_s(th.LEDGER_STARTUP_WALL)} with its work coming in "
        f"{th.STARVATION_GAPS.value:g} or more separate bursts (a GPU running kernels only in short "
        "bursts is waiting for its input, not starting), and while its memory grows by "
        f"{th.LEDGER_LOAD_GROWTH.value / (1 << 30):g} GiB within {_s(th.EVIDENCE_WINDOW)} (a model loading); "
        f"past {_s(th.IDLE_AFTER)} too. Step-level gaps are waits as soon as work comes in bursts;",
        "- every GPU of a multi-GPU job stopped together, all inside a quiet collective: `stalled`;",
        "- every GPU of a multi-GPU job stopped together, someone with no kernel: `checkpoint` (those in a "
        "collective wait for it: `comm_wait`), except on a rank with no kernel that is not the job's first "
        "(its lowest index, where a synchronous save runs) while others wait for it in a collective: it "
        "stopped on its own, `input_wait`;",
        "- otherwise a GPU with no kernel is `input_wait` (its peers wait for it) and one in a collective "
        "`comm_wait`.",
        "",
        "A GPU under the idle memory line with no kernel, or with only a desktop's rendering on it (under "
        f"the busy line at a draw within {_pct(th.FLOOR_DRAW)} of its power envelope's headroom above the "
        "idle floor), is `free`, and the next job on it starts afresh. "
        "Live, the GPUs of one pod are one job (from the kubelet); GPUs no pod is known to hold, and every "
        "GPU of a replayed log, are taken as one job.",
        "",
    ]


def _coverage() -> list[str]:
    families = ", ".join(
        f"`{name}` ({' + '.join(f'`{s}`' for s in states)})" for name, states in FAMILIES.items()
    )
    rows = []
    for k in KINDS.values():
        p = k.policy
        rows.append(
            f"| `{k.name}` | {f'`{k.family}`' if k.family else '-'} | {k.timing.fire_after:g} s | "
            f"{k.timing.resolve_after:g} s | [{k.alert}](runbooks/{k.alert}.md) | {p.for_text} | "
            f"{p.severity.value} | {', '.join(f'`{c}`' for c in k.causes) or '-'} | {k.meaning} |"
        )
    return [
        "## From the ledger to verdicts: the coverage rule",
        "",
        f"The ledger's families are {families}. **A GPU a job holds that loses "
        f"{_pct(th.COVERAGE_SHARE)} of the last {th.LEDGER_WINDOW.value / 60:g} minutes, or "
        f"{_pct(th.COVERAGE_FAST_SHARE)} of the last {th.LEDGER_FAST_WINDOW.value / 60:g}, to one family "
        "carries that family's verdict**, whatever shape the loss has. It keeps it until the five-minute "
        f"share falls under {_pct(th.COVERAGE_EXIT)} and the two-minute one under "
        f"{_pct(th.COVERAGE_FAST_EXIT)}, or until two minutes lose under {_pct(th.COVERAGE_CLEAR)} (the "
        "condition has ended). A verdict holds while its condition lasts: it does not drop out between two "
        "checkpoints or two slow bursts. A single long pause (one save, one evaluation) counts in the "
        "two-minute window only as input time, not as a checkpoint: only repeated pauses page fast.",
        "",
        "Faster evidence comes from the shapes the detectors know: the busy/idle rhythm of a starving "
        f"loader (at least {th.STARVATION_GAPS.value:g} gaps in {_s(th.EVIDENCE_WINDOW)}, with the ledger's "
        f"waiting share above {_pct(th.STARVATION_IDLE_FRACTION)}), {_pct(th.RECENT_WAIT_SHARE)} of the "
        "last half-minute in step-level waits, a pinned and quiet collective, thermal reasons, the power "
        "cap. The evidence of a kind is the strongest of its shape and its coverage, from 0 to 1 "
        "(`gpu_bottleneck_score`, exported with `--detail scores`); it must reach "
        f"{th.SCORE_ENTER.value:g} and hold for the kind's fire "
        f"time to fire, and stay under {th.SCORE_EXIT.value:g} for its resolve time to resolve.",
        "",
        "| kind | family | fires after | resolves after | alert | `for` | severity | causes | meaning |",
        "|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        "Every kind is one entry of the registry (`exporter/analysis/kinds.py`): its detector, timing, alert "
        "and dashboard code. The alert rules, dashboards and this table are generated from it.",
        "",
    ]


def _shared() -> list[str]:
    pod = ", ".join(f"`{name}`" for name in in_scope("pod"))
    gpu = ", ".join(f"`{name}`" for name in in_scope("gpu"))
    return [
        "## A GPU shared by pods (time-slicing, MPS)",
        "",
        "When the kubelet gives one GPU to two or more pods (the device plugin's time-slicing replicas, "
        "`<uuid>::<n>`, or MPS) and the driver reports per-process utilization, each pod's share of the GPU "
        "is judged on its own. Its processes are placed in their pods through the host's "
        "`/proc/PID/cgroup` (the processes source: it needs the node's PID namespace); each processes read "
        "(every `--slow-interval`, 10 s by default) gives each pod a point: its processes' SM time since "
        "the last read, divided by its share of the GPU (1/N for N pods) and capped at 1 (how much of its "
        "own slice it uses), and the memory they hold. Its ledger books each second at that share "
        "(`gpu_pod_time_seconds_total`), so the pods' seconds sum to the GPU's wall time and the cost "
        "follows them; the GPU keeps its own ledger (`gpu_time_seconds_total`).",
        "",
        f"The kinds whose loss is a pod's ({pod}) are judged on each pod's share and not on the GPU: a "
        "starving pod pages once, with its `namespace` and `pod`, and an idle shared GPU does not page "
        "twice. "
        f"The GPU's own kinds ({gpu}) stay on the GPU.",
        "",
        "What a pod's share cannot show: power, clocks, temperatures and links belong to the whole GPU (a "
        "pod's point has none, so nothing is judged of them per pod); per-process utilization comes once a "
        "slow interval as a mean, so a pod's rhythm within it (the busy/idle alternation of a starving "
        "loader) is not seen, only its shares of time; and a pod that uses more than its slice shows a full "
        "slice (the time it takes from the others is theirs to lose). A GPU whose driver gives no "
        "per-process utilization, or whose processes the host's `/proc` cannot place, is judged as one GPU.",
        "",
        "Under MPS the pods' processes are the MPS server's clients: the driver lists them apart "
        "(`nvmlDeviceGetMPSComputeRunningProcesses`, `kind` `mps` under `--detail processes`) and, from "
        "Volta on, samples each client's utilization apart, so the split is the same as under "
        "time-slicing (the simulator's `mps` scenario). A driver that books the clients' kernels to the "
        "server instead (MPS before Volta) gives no pod any SM time, and every pod would read idle: once "
        "the server is seen with SM time of its own, the GPU is judged as one GPU while the exporter runs. "
        "The server itself, `nvidia-cuda-mps-server`, holds a context on "
        "each GPU it serves and is listed as a compute process of no pod: it is the node's daemon, not "
        "memory nobody owns. It is recognised by its command (the first word of its command line, any "
        "path, or the kernel's name `nvidia-cuda-mps` where the command line is empty), on the host or in "
        "the device plugin's MPS daemon pod, and is never reported as `gpu_memory_unowned_bytes`; its "
        "memory counts in `gpu_pod_process_memory_bytes` under its daemon's pod, or under none on the "
        "host.",
        "",
    ]


def _mig() -> list[str]:
    pod = ", ".join(f"`{name}`" for name in in_scope("pod"))
    return [
        "## A GPU in MIG mode",
        "",
        "Each MIG instance (a GPU instance with its compute instance) of a GPU in MIG mode is judged as an "
        "entity of its own, in the job of the pod the kubelet gives it to (the device plugin names it by its "
        "MIG UUID). The instances are listed at each slow read; at each collection each one gets a point: "
        "its SM activity since the last collection from GPM (`nvmlGpmMigSampleGet`, Hopper and later) and "
        "its memory in use. Its ledger books each second at its compute slices' share of the GPU (a "
        "3g.40gb instance 3/7 of an H100's), so when every slice is given out the instances' seconds sum "
        "to the GPU's wall time and the cost follows them: `gpu_mig_time_seconds_total` with `mig_instance` "
        "(the GPU instance id), `mig_profile`, and the `namespace` and `pod` holding it (none for a free "
        "instance).",
        "",
        f"The kinds whose loss is a pod's ({pod}) are judged on each instance and not on the GPU: a "
        "starving instance pages with its `mig_instance`, `namespace` and `pod`, and a busy instance beside "
        "it hides nothing. The GPU keeps its own kinds and its own ledger; the driver gives no "
        "utilization of a GPU in MIG mode, so the GPU's ledger takes its instances' SM activity weighted by "
        "their slices, and `gpu_utilization_ratio` is absent for it (the raw utilization rules stay silent).",
        "",
        "What cannot be seen per instance: the driver gives no utilization (samples or rates) for an "
        "instance, nor per-process utilization in MIG mode, so without GPM (before Hopper) an instance has "
        "its memory only, and the kinds that need utilization say so in the missing inputs instead of "
        "guessing. Power, temperatures, clocks, clock-event reasons, PCIe and NVLink are the GPU's: an "
        "instance's point has none, so a heat or power verdict stays the GPU's and names no instance.",
        "",
        "A GPU instance split into several compute instances (a 4g.40gb into two 2c.4g.40gb, the "
        "simulator's `mig_compute_h100`) has a MIG device, a UUID and possibly a pod per compute instance: "
        "each is an entity of its own (`<gpu>/mig<gpu instance>.<compute instance>`) whose series carry "
        "`mig_compute_instance` beside `mig_instance` (a GPU instance with one compute instance, the usual "
        "layout, has no such label), and its ledger books its own compute slices' share (2/7 of an H100 for "
        "a 2c.4g.40gb). Its memory and its GPM metrics are the GPU instance's: the driver measures no "
        "compute instance apart. So a compute instance no pod holds is taken to run nothing and hold "
        "nothing, and the held ones are each given the GPU instance's SM activity spread over their slices "
        "(their mean) and its memory in use: one held compute instance is seen exactly; of two held ones, "
        "which one computes is not seen, and a verdict on one of them is their GPU instance's.",
        "",
    ]


def _kinds() -> list[str]:
    lines = ["## The verdicts", ""]
    for k in KINDS.values():
        if k.doc:  # "" when another kind's paragraph covers it
            lines += [k.doc, ""]
    return lines


def _workloads() -> list[str]:
    return [
        "## The workload class: what idle time means",
        "",
        "A GPU with no kernel is not always waiting for something. Each job gets a class, and its GPUs' "
        "idle time is booked and judged by it (`gpu_workload_class{workload,source}`; replay's `workload:` "
        "lines):",
        "",
        "| class | what it is |",
        "|---|---|",
        *[f"| `{name}` | {meaning} |" for name, meaning in CLASS_MEANING.items()],
        "",
        "A class silences a verdict only on positive evidence of that class, and every verdict it "
        "silences is said (replay's `not paged` lines, `--json`'s `unsure`, the report). The class comes "
        "from what the job says of itself, strongest first: `replay --workload`; the pod's "
        "log (vLLM's engine stats `Running: N reqs, Waiting: M reqs`, SGLang's batches, TGI and Triton "
        "start-up lines, completions requests, Jupyter's server; progress lines and NCCL's init for "
        f"training), once {th.WORKLOAD_LOG_LINES.value:g} of its lines say the same class "
        "(`workload.log_lines`): one line proves nothing (a training job's request logger, an echoed "
        "line) and a log's class settles, so that is the bound: a job that logs "
        f"{th.WORKLOAD_LOG_LINES.value:g} completions requests is judged a server; a push to "
        "`/v1/progress` never sets a class; what its processes run (`ollama`, `tritonserver`, "
        "`text-generation-launcher`, `torchrun`, `jupyter-lab`...: live from the GPU processes' command "
        "lines where `processOwners` is on, in replay from the processes a log's process table names, "
        "`nvidia-smi` screens, never the file's name); the image its container was started from, read "
        "from the container runtime's bundle files (containerd's `io.kubernetes.cri.image-name`, CRI-O's "
        "`io.kubernetes.cri-o.ImageName` annotation; the chart mounts them already, `containerRuntime`), "
        "by the words of its repository path and never its registry host or tag (`vllm/vllm-openai`, "
        "`nvcr.io/nvidia/tritonserver`, `ghcr.io/huggingface/text-generation-inference`, "
        "`lmsysorg/sglang`, `ollama/ollama` and `nvcr.io/nim/...` are servers, `quay.io/jupyter/"
        "scipy-notebook` a notebook, an image named `...-trainer` or `finetune-...` training; a "
        "framework's own image, `pytorch/pytorch`, `nvcr.io/nvidia/pytorch` or `nvcr.io/nvidia/nemo`, "
        "says nothing: it trains, serves and runs notebooks alike); its pod and container names (`vllm`, "
        "`triton`, `jupyter`, `eval`, `train`...). What runs outranks what was shipped, and what was "
        "shipped outranks what the pod is called. A pipeline's turns are physics and outrank a name or a "
        "log. Otherwise the shape decides. Memory reserved and flat is no evidence on its own: a training "
        "job holds its memory as flat. A **server** holds "
        f"{_pct(th.SERVING_RESERVED)} or more of its framebuffer, unchanged within "
        f"{_pct(th.SERVING_FLAT)}, and either went quiet (idle for more than {_s(th.SERVING_QUIET)}) "
        f"{th.SERVING_CYCLES.value:g} times while holding it, at intervals or for lengths varying by "
        f"{_pct(th.INTERACTIVE_IRREGULAR)} or more and not at whole multiples of one period (requests "
        "arrive; a loop's saves come alike), or reserved it within the record and went quiet within "
        f"{_s(th.SERVING_PENDING)} (a KV cache waiting for its first request); until then its quiet time "
        "is not called starvation. A GPU that stops while another GPU of its job sits in a collective "
        "waiting is a **rank** of their job, whatever its memory: it is judged as training, paged as the "
        "rank its peers wait for, and its peers' time is a wait for it. One quiet stretch after minutes "
        "of flat-out work is a job that stopped, not a server. A **pipeline** is "
        f"{th.PIPELINE_MIN_STAGES.value:g} or more GPUs of one job whose utilizations sum to "
        f"{th.PIPELINE_TURNS_SUM.value:g}-{th.PIPELINE_TURNS_SUM_MAX.value:g} of one GPU, steadily "
        f"(coefficient of variation under {th.PIPELINE_TURNS_CV.value:g}), each under "
        f"{_pct(th.PIPELINE_STAGE_MAX)}, over {_s(th.PIPELINE_HOLD)}, and where samples are fine enough, "
        f"busy together with another GPU in no more than {_pct(th.PIPELINE_TOGETHER)} of their busy "
        "samples (ranks compute at the same moments, stages in turn); a **notebook** (`interactive`) is a "
        "GPU alone in its job whose stretches without work, each longer than "
        f"{_s(th.STARVATION_PAUSE)}, hold {_pct(th.INTERACTIVE_IDLE_SHARE)} or more of its time since "
        f"the first of them, {th.INTERACTIVE_STRETCHES.value:g} of them within "
        f"{_s(th.INTERACTIVE_WINDOW)}, their lengths or the cycles between them varying by "
        f"{_pct(th.INTERACTIVE_IRREGULAR)} or more (a person's cells and thinking; a training loop's "
        "saves come alike, and mark it as a loop). A second under the busy line at a draw within "
        f"{_pct(th.FLOOR_DRAW)} of the power envelope's headroom above the idle floor counts as without "
        f"work once the job's work has drawn {_pct(th.LIFTED_DRAW)} of it: a card that drives a display "
        "shows its desktop's rendering as 10-45 % utilization at a few watts over idle between the bursts "
        "that draw the board's power, while a loop starved by its host never lifts its draw that far. "
        "Anything else is judged as training. A trace without "
        "`memory.total` shows a server's reservation only where the board's name states its memory "
        "(`A100-SXM4-80GB`); otherwise replay says in its `workload:` line that it could not.",
        "",
        f"For {', '.join(f'`{c}`' for c in sorted(IDLE_GAPS))} the no-kernel time is idle capacity (the "
        "ledger's `idle`), never `data_starvation`: a server waiting for requests, a notebook waiting for "
        "its user, a stage waiting for its turn. A server whose own log says requests are waiting (a load "
        f"line under {_s(th.SERVER_LOAD_FRESH)} old) while the GPU has no kernel *is* starved: its gaps are "
        "`input_wait` and the cause comes from the node (`cpu` for a tokenizer or scheduler short of "
        "cores). While a GPU may still turn out to be a server (reserved, for its first "
        f"{_s(th.SERVING_PENDING)}), a pipeline stage, or a notebook (stretches without work hold most of "
        "its time, too few yet to tell), no starvation verdict starts. A GPU with no peer "
        "that works or waits in a collective has no collective to wait in: memory-bound work (LLM decode, "
        "busy at 40-70 % of its power) is computing.",
        "",
        "**Pages only for losses that matter.** A starvation verdict starts only while "
        f"{_pct(th.STARVATION_SUSTAINED)} of the last half minute went to step-sized waits that recur "
        f"across it ({th.STARVATION_GAPS.value:g} gaps or more, in both its halves), or "
        f"{_pct(th.STARVATION_SUSTAINED)} of the last two minutes went to input waits and, under "
        f"{_pct(th.STARVATION_HEAVY)}, {_pct(th.STARVATION_SUSTAINED)} of the last five too: an evaluation "
        "at 86 % with a pause every minute or two, or a minute at half speed while it loads a subset, "
        "pages nothing; a job losing a third of its time in step-sized waits pages within about a minute "
        "and a half. A verdict whose loss no longer meets either resolves instead of riding the share it "
        "left behind.",
        "",
    ]


EXAMPLES = """## Worked examples (the labelled traces in `examples/traces`)

**Input, host-bound offload** (`offload_starvation_h100x8`, 10 Hz): from 120 s every H100 sits at 0-12 %
utilization with short bursts, about 25 % of its power limit, PCIe carrying ~20 GB/s. There is no clean
rhythm, but every sample's no-kernel time is waiting: the ledger gives each GPU ~71 % `input_wait`. Half of
the last half-minute waiting fires `data_starvation` 27-32 s after the onset, cause `host_transfer` (the
PCIe line), and the coverage rule holds it to the end of the trace.

**Input, checkpoints** (`checkpoint_stall_h100x8`): from 200 s every GPU stops together for ~35 s of every
50 s. Each pause outlasts the pause allowance with every GPU of the job stopped: `checkpoint`, 54 % of
the wall time. The second pause within two minutes fires `data_starvation` with cause `checkpoint` on all
eight GPUs at 268 s; between pauses the five-minute share keeps it on.

**Communication** (`comm_bound_h100x8`): from 200 s each step spends ~1.2 s in an all-reduce over sockets
(utilization 100 %, SM activity ~12 %, NVLink quiet, PCIe busy). The ledger gives ~49 % `comm_wait`;
`comm_bound` fires on every GPU at ~255 s. Without GPM (nvidia-smi columns only) the memory controller,
quiet during the collective, tells the same.

**Communication, a starved peer** (`starvation_h100x8`): only GPU 3 waits for its input (34 %
`input_wait`); its seven peers spend the same 34 % in `comm_wait`, waiting for it in NCCL. GPU 3 gets
`data_starvation`; the peers get nothing, because the rank they wait for is the problem.

**Stall** (`hang_h100x8`): at 300 s every rank sits in a collective at ~120 W with nothing moving. After
the pause allowance the whole run is `stalled`; `comm_hang` (`all_ranks`) fires at ~375 s on every GPU.

**Throttling** (`thermal_h100x8`, `power_cap_h100x8`): GPU 5 computes with thermal reasons active (77 %
`throttled`, all of it for heat): `thermal_throttle` at ~227 s. Every GPU capped at 450 W of 700 W with
the clocks held at 85 %: `throttled` 99 %, `power_throttle` (`cap_below_default`) after 31 s.

**Idle and start-up** (`idle_h100x8`, `startup_healthy_h100x8`): memory held with no kernel from the start
is `idle`; `idle_allocated` fires at 300 s. A healthy job that loads its model for 110 s (memory growing
at 0 %) then trains at 88-91 % spends 18 % `idle` and 81 % `computing`: no verdict.

"""

REPLAY = """## Reading a replay

```
$ gpu-bottleneck-exporter replay examples/traces/starvation_h100x8.csv.gz
examples/traces/starvation_h100x8.csv.gz: 8 GPU(s), 899.8 s of samples, 36000 rows, from 2026-03-01 10:30:53
  GPU 3: data_starvation from 240 s (10:34:53) to the end, 660 s; verdict from 274 s (10:35:27), peak score 1.00, cause cpu; GPUs 0, 1, 2, 4, 5, 6, 7 wait for it in NCCL
  GPU 0, 1, 2, 4, 5, 6, 7: no verdict
  silent (inputs missing from this trace): nvlink_degraded needs NVLink link state, P2P status or fabric state
where the time went:
  GPU 0 (899 s): computing 66%, comm_wait 34%
  ...
  GPU 3 (899 s): computing 66%, input_wait 34%
  all GPUs (7192 s): computing 66%, input_wait 5%, comm_wait 30%
```

An episode is told by when its loss happened: it starts when the loss began and ends when it stopped,
and the verdict's own firing and resolving (after its hold, and after its resolve time) come beside them.
The loss began with the first lossy second after the last half-minute that lost under
[`coverage.clear_share`](thresholds.md#coverage) of its
time to the verdict's share of the ledger (the coverage rule's own test that a condition has ended),
together with the lossy seconds just before it that belong to it (the excursion of the loss's cumulative
excess over that share that is alive there); it stopped with its last lossy second before the evidence
cleared, read the same way backwards. A starving loader's episode starts at its first wait, an idle GPU's
at its last kernel (the detector times it), and a verdict that is no loss of time (a link down, a filling
shm volume) starts when its evidence reached the enter score. A verdict still on when the trace ends says
when its loss stopped if its evidence window has cleared since.

`--json` prints one JSON object per line: a `verdict` line each time a verdict fires or resolves (`t` in
seconds since the first sample and `time` on the wall clock; `since` when its loss began and, resolved,
`until` when it stopped, each with its `_time`), a `job` line when several GPUs hang together, and a final
`summary` with the verdict episodes (`start` and `end` of the loss, `fired` and `resolved` of the verdict,
each also as `*_time`) and the ledger per GPU (`ledger`) and per job (`job_ledger`), in seconds. Wall-clock
times are RFC 3339 in UTC (`start_time` is the trace's first sample); a log without times has none (null)
unless `--start` places it. Logs without
an `index` column: rows sharing the first timestamp are taken as one sample of every GPU, or give
`--gpus N`. A detector whose inputs are missing stays silent and the summary says so. A `.gz` log cut short
(a copy or an upload that stopped) is replayed up to its last complete line; a line on stderr, the
summary's `cut_after_line` and the report say where it ends.

`--report PATH` also writes one self-contained HTML page (it opens offline): the summary, then a chart
over time per group of GPUs that behave alike (the same verdicts and every ledger state's share within
[`replay.report_alike_share`](thresholds.md#replay) of each other), so the seven waiting ranks of a job are
one section and the starved one another. The path is checked before the replay starts.

For CI, `--fail-on` makes the exit status say whether a verdict fired: `--fail-on any`, a severity
(`critical`, `warning` or `info`: that severity and the more serious ones, as the alert rules rank the
verdicts), verdict kinds, or a comma-separated mix (`--fail-on critical,data_starvation`). When a verdict it
names fired anywhere in the trace, replay prints the summary as usual, one line naming the verdicts and
GPUs on stderr, and exits with status 3; a kind named that the trace lacks the inputs for is said on
stderr (it cannot fire). Other exit statuses: 0 replayed, 2 a bad flag or a file with no readable rows,
1 the report could not be written.

```
$ gpu-bottleneck-exporter replay examples/traces/starvation_h100x8.csv.gz --fail-on warning > /dev/null
gpu-bottleneck-exporter: --fail-on: data_starvation fired on GPU 3 (exit status 3)
```

## Detection quality

`make bench-detection` (`python bench/detection.py`) replays every labelled trace in `examples/traces` and
judges verdicts as pages: episodes detected, paged (the verdict held unbroken for its alert's `for`), the
share of each episode the verdict held, time to detect, to page and to resolve, the onset error (when the
episode says its loss began, minus the label's start) and the end error, false verdicts and false pages, the
ledger's error against each trace's `ledger_truth`, and the same table for a naive baseline (the classic
threshold table as plain alert rules over 15-second scrapes).

### By signal level

Most teams keep plain logs, so the bench judges every labelled trace three ways: with all its columns; cut
to the plain `nvidia-smi --query-gpu` columns (timestamp, index, name, `utilization.gpu` and `.memory`,
`memory.used` and `.total`, `power.draw` and `.limit`, `temperature.gpu`, `clocks.sm`: no clock-event
reasons, no `clocks.max.sm`, no default limit, no GPM, traffic or host columns, no server or log
signals); and cut to `utilization.gpu` with `memory.used` and `.total` only. It prints pages, false pages
and the onset error per level and class, and the pages each lower level loses. A lower level never adds a
false page (the bench fails if it does): where the signals left cannot tell a loss from benign work, the
time stays in the ledger and replay says what column would decide. Without a clock-reason column, a power
cap is read from the draw at the enforced limit, that limit under the board's default (from its name)
and the SM clock far under the board's maximum (its board's, from the name, or the highest it showed
under load).

What a lower level cannot tell, and so does not page (the missing column in brackets):

| loss | plain columns | utilization and memory only |
|---|---|---|
| `/dev/shm` filling (`shm_exhaustion`) | not seen (`host.shm.*`) | not seen |
| a server whose requests queue while its GPU idles (`data_starvation` on a server) | not told from idle capacity (the server's own log) | likewise |
| a power cap on a log without the board's name, default limit or `clocks.max.sm` | its clocks read as full (a name or `clocks.max.sm`) | no power at all (`power.draw`) |
| a hang, comm-bound steps, thermal throttling, any power cap | paged | not told from compute (`power.draw`, `temperature.gpu`, `clocks.sm`) |
| a lone GPU whose dips never empty (a kernel part of the time) | paged on its power | not told from a lighter phase of work (`power.draw`) |
"""  # noqa: E501


def render() -> str:
    head = [
        "# How the exporter decides why a GPU is not working",
        "",
        "<!-- generated by `make artifacts` from devtools/artifacts/detection_doc.py, the verdict registry "
        "and the threshold table; do not edit -->",
        "",
        f"The analysis steps every {_s(th.EVAL_INTERVAL)}, live on the exporter's samples and on the virtual "
        "clock of `gpu-bottleneck-exporter replay TRACE.csv` (an nvidia-smi log, or what `record` wrote): "
        "the same code, the same verdicts. The time ledger takes every second; the verdicts are judged every "
        f"{_s(th.VERDICT_INTERVAL)}. It keeps every driver utilization and power sample (not one value per "
        "scrape) and the node's I/O wait, busiest core, pressure stall information and `/dev/shm`. Every "
        "number below lives in the [threshold table](thresholds.md) with its reason.",
        "",
    ]
    body = head + _ledger() + _coverage() + _kinds() + _shared() + _mig() + _workloads()
    return "\n".join(body) + "\n" + EXAMPLES + REPLAY + _stopped_rank()


def _stopped_rank() -> str:
    """How soon a rank that stops pages, from the numbers that decide it."""
    window, share = th.LEDGER_WINDOW.value, th.COVERAGE_SHARE.value
    evidence = window * share
    fire = th.STARVATION_FIRE.value
    alert = th.ALERT_POLICIES["GpuDataStarvation"].for_.value
    stop = th.RANK_STOP.value
    return (
        "\n### How soon a stopped rank pages\n\n"
        "A rank that stops while its peers wait in a collective looks, for as long as it lasts, exactly like "
        "rank 0 writing a checkpoint while the others wait at a barrier: one GPU idle at its idle power, the "
        "others pinned in the collective. No column of a plain log tells the two apart (a save's copies and "
        "disk writes show only on the host). What tells them apart is *which* rank stopped: a "
        "synchronous save runs on the job's first rank (rank 0, by the convention of `torch.save` behind a "
        "barrier and of every trainer's main process), so the first GPU of the job is the one place a save "
        "can be.\n\n"
        f"- **Any other rank** that has been off its kernels for {stop:g} s "
        "([`starvation.rank_stop_seconds`](thresholds.md#starvation)), in two samples or more, while the "
        "rest of its job waits for it, has stopped: `data_starvation` fires at once with "
        '`cause="stopped"`, its loss dated from the stop and the waiting ranks named beside it, and '
        "the alert's `for` "
        f"([`alert.GpuDataStarvation.for_seconds`](thresholds.md#alert)) makes the page {stop + alert:g} s "
        "after the stop. Where nothing else holds the verdict, it ends with the stop: a stop shorter than "
        f"{stop + alert:g} s never stays on for the alert's minute, so it does not page.\n"
        "- **The job's first rank** is judged by the length of its stop: a single pause is forgiven in the "
        f"two-minute share, and the verdict comes when the pause holds {share:.0%} of "
        f"{window / 60:g} minutes ([`coverage.share`](thresholds.md#coverage)), about {evidence:g} s into "
        f"it, confirmed for {fire:g} s, so the page comes about {evidence + fire + alert:g} s after the "
        "stop. A shorter pause (a synchronous save of tens of gigabytes) makes no verdict, and replay says "
        "what it saw: `data_starvation not paged`, the job's first rank, and that its log tells a save from "
        "a stop. Paging it sooner would page every save longer than half a minute on every healthy job that "
        "checkpoints synchronously: an alert people mute.\n\n"
        "Which GPU is the job's first is its lowest index among the GPUs of its pod (live) or of the job's "
        "GPUs that stop or wait together (a log). A job that writes its checkpoint from another rank, or "
        "whose rank 0 does not sit on its lowest-index GPU, has its saves paged as stops of that rank when "
        f"they last over {stop + alert:g} s.\n"
    )
