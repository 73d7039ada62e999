"""Jobs across nodes: the recording rules and the job alerts (evaluated in Prometheus)."""

from __future__ import annotations

from .registry import _t

# ---- jobs across nodes: the recording rules and the job alerts (evaluated in Prometheus) ---------------
RULES_RATE_WINDOW = _t(
    "rules.rate_window_seconds",
    300.0,
    "seconds",
    "The recording rules read the time ledger over five minutes: long enough to hold many training steps "
    "(and a slow one's rhythm), short enough that a straggler shows within one alert `for`.",
)
HOLDUP_SHARE = _t(
    "job.holdup_share",
    0.10,
    "ratio",
    "A GPU off-kernel (its rank on the host: loading data, saving, logging) while other GPUs of its job "
    "wait for it in a collective holds the job back; one that does so a tenth of its held time is named as "
    "the rank to look at. Rank 0's routine logging and rare saves stay under it.",
)
STRAGGLER_LOST = _t(
    "job.straggler_lost_ratio",
    0.25,
    "ratio",
    "A pod whose GPUs lose a quarter of their time to input wait or throttling is slowing its job: a "
    "healthy rank loses a few percent between steps.",
)
STRAGGLER_PEERS_WAIT = _t(
    "job.straggler_peers_comm_wait_ratio",
    0.25,
    "ratio",
    "...while the job's GPUs in its other pods spend a quarter of their time waiting in collectives: they "
    "wait for the slow one (healthy collectives take about 15 % of a step, and count as computing).",
)
JOB_HANG_STALLED = _t(
    "job.hang_stalled_ratio",
    0.8,
    "ratio",
    "A job hangs when its GPUs spend 80 % of their time stalled in a collective (util pinned, no "
    "traffic); the rest of the window may still hold the steps before it hung.",
)
JOB_HANG_OUTSIDE = _t(
    "job.hang_outside_ratio",
    0.2,
    "ratio",
    "In a hung job, a pod whose GPUs are stalled less than a fifth of the time is not in the collective "
    "its peers wait in: the rank to blame (crashed loader, stuck host code).",
)
