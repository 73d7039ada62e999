"""The analysis' pace and evidence: how often it steps and judges, what one evidence window holds, the
hysteresis of a verdict's score.
"""

from __future__ import annotations

from .registry import _t

# ---- analysis --------------------------------------------------------------------------------------

EVAL_INTERVAL = _t(
    "analysis.eval_interval_seconds",
    1.0,
    "seconds",
    "The analysis steps every second, live and on the virtual clock of a replay: each GPU's time ledger "
    "takes every second as it passes.",
)
VERDICT_INTERVAL = _t(
    "analysis.verdict_interval_seconds",
    3.0,
    "seconds",
    "Verdicts are judged every third step: their evidence spans 30 s and their alerts hold for 1-5 "
    "minutes, so a 3 s step moves a page by 1-3 s (measured over the example traces against judging "
    "every step: no page lost, none added, none false; every 5 s let one more hold fall under 90 %), "
    "while judging is the larger half of the analysis' CPU at 1 s sampling. A GPU that comes or goes, "
    "or the end of a trace, is judged at once.",
)
EVIDENCE_WINDOW = _t(
    "analysis.evidence_window_seconds",
    30.0,
    "seconds",
    "Half a minute holds 10-30 training steps and, at 0.2-1.5 s sampling, 20-150 samples: enough to see "
    "a busy/idle rhythm, short enough to detect within a minute. The exported idle fraction is the "
    "detectors' own over this window, so the dashboard's starvation line and the detector read one number. "
    "Sharp below (fragile): a window a tenth shorter weighs single waits of a loader-bound run more (a real "
    "object-detection run at batch 96, waits of many seconds), and its final pass after the loss has "
    "ended is paged as a second loss.",
)
WINDOW_POINTS_PER_SECOND = _t(
    "analysis.window_max_points_per_second",
    100.0,
    "count",
    "A window holds at most 100 points per second of its span (3,000 for the 30 s evidence window): the "
    "fastest collection is 20 a second, NVML keeps at most 6 utilization samples a second and "
    "nvidia-smi -lms 10 logs 100. More are rows that share their times (a log whose rows all carry one "
    "timestamp): the oldest are dropped, so memory stays bounded whatever a trace's times do.",
)
SCORE_ENTER = _t(
    "analysis.score_enter",
    0.5,
    "ratio",
    "A verdict's evidence must reach this score to start counting. Sharp below (fragile) by design: evidence "
    "that only suggests a cause is capped just under it (at 0.45), so a line a tenth lower lets that "
    "evidence start verdicts alone.",
)
SCORE_EXIT = _t(
    "analysis.score_exit",
    0.3,
    "ratio",
    "...and must fall below this one to start resolving: the gap is the hysteresis that stops flapping.",
)
