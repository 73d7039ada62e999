"""Replay: a pause in a trace, the report's sections, the command line, the physical bounds of a trace
cell.
"""

from __future__ import annotations

from .registry import _t

# replay: a pause in a trace
TRACE_GAP_PERIODS = _t(
    "replay.gap_periods",
    300.0,
    "count",
    "A trace that pauses for more than 300 sample periods of the analysis (5 minutes at 1 s) has outlived "
    "the ledger's window, the longest of the analysis: nothing before the pause can count after it, so "
    "replay starts a new segment there and reports the gap instead of evaluating the silence second by "
    "second (a 30-day gap took 7 minutes)."
    " Dead on every set: no example pauses for five minutes (tests/faults/test_replay_input.py feeds a "
    "30-day gap).",
)
# replay --report: which GPUs share one section
REPORT_ALIKE_SHARE = _t(
    "replay.report_alike_share",
    0.05,
    "ratio",
    "The report draws GPUs with the same board, the same verdicts (kind and cause) and every ledger state's "
    "share of their time within 5 points of each other as one section: in the example traces the ranks of "
    "one data-parallel job differ by a point or two (where each sample falls in the step), while a starved "
    "or straggling rank differs from its peers by ten points or more and keeps a section of its own.",
)

# the command line
CLI_SUGGESTION_SIMILARITY = _t(
    "cli.suggestion_similarity",
    0.8,
    "ratio",
    "A mistyped flag or command is answered with the one it resembles when their similarity (difflib's "
    "ratio) is at least 0.8: a swapped or dropped letter in a short flag (--reprot, --jsno, --gpu) still "
    "scores over 0.8, while unrelated short flags sharing a few letters (--out and --port: 0.73) do not.",
)

# replay: the physical bounds of a trace cell. A value outside is a corrupt or mis-scaled cell (1e30 MiB of
# memory, bytes in a MiB column, a counter gone negative): it is read as missing, never fed to the
# detectors, and counted per column (one line each, ``clipped_values`` in the summary).
TRACE_TEMP_MIN = _t(
    "replay.bound.temperature_min_celsius",
    -40.0,
    "celsius",
    "No GPU is stored, let alone run, below -40 °C (the industrial storage limit).",
)
TRACE_TEMP_MAX = _t(
    "replay.bound.temperature_max_celsius",
    150.0,
    "celsius",
    "Every GPU shuts down well below 150 °C (slowdown near 90, shutdown near 100 on data-center boards).",
)
TRACE_POWER_MAX = _t(
    "replay.bound.power_max_watts",
    5000.0,
    "watts",
    "No board draws more than 5 kW: that is a whole 8-GPU tray (one B200 draws 1 kW); a limit or a draw "
    "above is a mis-scaled cell (milliwatts in a W column).",
)
TRACE_CLOCK_MAX = _t(
    "replay.bound.clock_max_hertz",
    1e10,
    "hertz",
    "No GPU clocks above a few GHz (an H100's SM clock tops at 1.98 GHz); 10 GHz and beyond is a cell in "
    "Hz read as MHz.",
)
TRACE_GPU_MEMORY_MAX = _t(
    "replay.bound.gpu_memory_max_bytes",
    float(4 << 40),
    "bytes",
    "The largest GPUs hold 288 GB (B300); 4 TiB is over ten times that. Above it a memory.used or "
    "memory.total cell is corrupt or in the wrong unit (bytes in a MiB column).",
)
TRACE_HOST_MEMORY_MAX = _t(
    "replay.bound.host_memory_max_bytes",
    float(64 << 40),
    "bytes",
    "/dev/shm lives in the node's memory, and the largest single machines hold 32 TiB: a shm cell above "
    "64 TiB is corrupt.",
)
TRACE_NVLINK_MAX = _t(
    "replay.bound.nvlink_max_bytes_per_second",
    1e13,
    "bytes_per_second",
    "NVLink 5 moves 900 GB/s each way per GPU (18 links); 10 TB/s one way is beyond any GPU's links.",
)
TRACE_PCIE_MAX = _t(
    "replay.bound.pcie_max_bytes_per_second",
    1e12,
    "bytes_per_second",
    "A PCIe 6.0 x16 link moves 128 GB/s each way; 1 TB/s is beyond any GPU's host link.",
)
TRACE_DISK_MAX = _t(
    "replay.bound.disk_read_max_bytes_per_second",
    1e12,
    "bytes_per_second",
    "A node's NVMe drives together read a few hundred GB/s at most (16 Gen5 drives at 14 GB/s); 1 TB/s is "
    "beyond any node.",
)
TRACE_LINKS_MAX = _t(
    "replay.bound.nvlinks_max",
    64.0,
    "count",
    "NVML knows at most 18 NVLinks per GPU (NVML_NVLINK_MAX_LINKS); 64 leaves room for boards to come. "
    "More links up or expected is a corrupt cell.",
)
TRACE_PEERS_MAX = _t(
    "replay.bound.p2p_peers_max",
    1023.0,
    "count",
    "A GPU's peers are the other GPUs of its node, and a trace holds at most 1,024 GPUs: more failing "
    "peer pairs than that is a corrupt cell.",
)
TRACE_COUNTER_MAX = _t(
    "replay.bound.counter_max",
    float(1 << 64),
    "count",
    "NVML's error counters (ECC, NVLink) are 64-bit and never negative: a count outside 0..2^64 is a "
    "corrupt cell.",
)
TRACE_REQUESTS_MAX = _t(
    "replay.bound.requests_max",
    1e7,
    "count",
    "An inference server's running or waiting requests, from its log: ten million in one server's queue "
    "is a corrupt cell, not a load.",
)
TRACE_SILENCE_MAX = _t(
    "replay.bound.log_silence_max_seconds",
    10 * 366 * 86400.0,
    "seconds",
    "A job's log silence is time since its last line: a container silent for more than ten years is a "
    "corrupt cell, not a hang.",
)
# ---- replay of an experiment tracker's run (MLflow, Weights & Biases) ------------------------------------
TRACKER_RATE_DROP = _t(
    "replay.tracker.step_rate_drop",
    0.8,
    "ratio",
    "A run's own step counter confirms a starvation when its steps per second during the episode fall "
    "below 80 % of the rate before it: a data-parallel step waits for its slowest rank, so a loader that "
    "keeps the GPUs waiting for a fifth of the time or more shows in the rate, while the jitter of a "
    "healthy loop's logged rate (a few percent between logging intervals) does not reach it.",
)
TRACKER_MAX_POINTS = _t(
    "replay.tracker.max_points",
    5_000_000.0,
    "count",
    "The most metric points read from one tracker run (every GPU's system metrics and the run's own): two "
    "weeks of an 8-GPU run's five GPU metrics at MLflow's 10 s are about 4.8 million. Past five million the "
    "run is refused in one line rather than read into memory without bound (a few hundred MB at most).",
)
TRACKER_REQUEST_TIMEOUT = _t(
    "replay.tracker.request_timeout_seconds",
    30.0,
    "seconds",
    "One request to an MLflow tracking server (a run, a metric's history) answers in well under a second "
    "on a server that works; one that takes half a minute is down or overloaded, said in one line rather "
    "than retried with backoff for minutes.",
)

# replay --prometheus: the run's budgets, checked before the work
PROMETHEUS_FUTURE_MARGIN = _t(
    "replay.prometheus.future_margin_seconds",
    300.0,
    "seconds",
    "--to may lie at most 5 minutes past this machine's clock: no sample is written in the future, so "
    "a range past now reads only empty steps (a year ahead was thousands of queries of nothing). Five "
    "minutes is the lookback of a Prometheus query, well past the seconds of skew NTP leaves between "
    "this machine's clock and the server's.",
)
PROMETHEUS_MAX_DURATION = _t(
    "replay.prometheus.max_duration_seconds",
    3600.0,
    "seconds",
    "A replay --prometheus run gives up reading after an hour (--max-duration): a week of a 100-node "
    "fleet is about 10,000 queries, a few minutes at the tens of milliseconds a Prometheus takes for "
    "one node's chunk, so an hour is over ten times that, while a server whose every answer comes just "
    "under the 60 s request deadline would otherwise hold the run for days.",
)
