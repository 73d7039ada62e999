"""The text summary's lines for a tracker's run (the rest of the summary is any replay's)."""

from __future__ import annotations

from typing import Any

from exporter.policy.thresholds import PROGRESS_SILENCE


def lines(result: Any) -> list[str]:
    """The run, its step and what its progress said: the text summary's lines."""
    info = result.tracker
    name = f"{info['run']!r} " if info["run"] else ""
    ident = f"(id {info['run_id']}) " if info["run_id"] else ""
    out = [
        f"run: {info['tracker']} run {name}{ident}from its {info['kept']}; system metrics every "
        f"{info['step_s']:g} s, judged at that step (each sample stands for its interval)"
    ]
    if info["progress_key"]:
        out.append(
            f"  progress: the run's {info['progress_key']}; no move for {PROGRESS_SILENCE.value:.0f} s "
            "confirms a hang, as a pod's log does"
        )
    for e in info["episodes"]:
        out.append(f"  GPU {e['gpu']}: {e['kind']} began {e['began']}: {e['progress']}")
    for pair, why in info["unjudged"].items():
        out.append(f"  not judged at this step: {pair}: {why}")
    return out
