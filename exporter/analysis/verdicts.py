"""Verdicts with hysteresis: evidence must reach the enter score and hold for ``fire_after`` seconds to
fire; it resolves after staying below the exit score for ``resolve_after`` seconds. Pure state steps."""

from __future__ import annotations

from dataclasses import dataclass

from exporter.thresholds import (
    HANG_FIRE,
    HANG_RESOLVE,
    NVLINK_FIRE,
    NVLINK_RESOLVE,
    POWER_FIRE,
    POWER_RESOLVE,
    SCORE_ENTER,
    SCORE_EXIT,
    SHM_RESOLVE,
    SHM_RESOLVE_RATIO,
    SHM_WARNING,
    STARVATION_FIRE,
    STARVATION_RESOLVE,
    THERMAL_FIRE,
    THERMAL_RESOLVE,
)


@dataclass(frozen=True)
class Timing:
    enter: float
    exit: float
    fire_after: float
    resolve_after: float


TIMINGS: dict[str, Timing] = {
    "data_starvation": Timing(
        SCORE_ENTER.value, SCORE_EXIT.value, STARVATION_FIRE.value, STARVATION_RESOLVE.value
    ),
    "comm_hang": Timing(SCORE_ENTER.value, SCORE_EXIT.value, HANG_FIRE.value, HANG_RESOLVE.value),
    "thermal_throttle": Timing(
        SCORE_ENTER.value, SCORE_EXIT.value, THERMAL_FIRE.value, THERMAL_RESOLVE.value
    ),
    "power_throttle": Timing(SCORE_ENTER.value, SCORE_EXIT.value, POWER_FIRE.value, POWER_RESOLVE.value),
    # the score is the fill ratio: fire at the warning line, resolve below the resolve line
    "shm_exhaustion": Timing(SHM_WARNING.value, SHM_RESOLVE_RATIO.value, 0.0, SHM_RESOLVE.value),
    # the score is idle time over IDLE_AFTER: it fires when that is reached, resolves on the first work
    "idle_allocated": Timing(1.0, 0.999, 0.0, 0.0),
    "nvlink_degraded": Timing(SCORE_ENTER.value, SCORE_EXIT.value, NVLINK_FIRE.value, NVLINK_RESOLVE.value),
}


@dataclass
class Track:
    """One verdict kind on one GPU."""

    firing: bool = False
    pending_since: float | None = None
    clearing_since: float | None = None
    cause: str = ""
    score: float = 0.0


def step(
    track: Track, score: float, cause: str, t: float, timing: Timing, fire_after: float | None = None
) -> str:
    """Advance one track to time t. Returns "firing" or "resolved" when the verdict changes, else ""."""
    track.score = score
    hold = timing.fire_after if fire_after is None else fire_after
    if not track.firing:
        line = timing.exit if track.pending_since is not None else timing.enter
        if score < line:
            track.pending_since = None
            return ""
        if track.pending_since is None:
            track.pending_since = t
        if t - track.pending_since < hold:
            return ""
        track.firing, track.clearing_since, track.cause = True, None, cause
        return "firing"
    if score >= timing.exit:
        track.clearing_since = None
        if track.cause in ("", "unknown") and cause and score >= timing.enter:
            track.cause = cause  # the cause stays what it was when it fired, unless it was not known then
        return ""
    if track.clearing_since is None:
        track.clearing_since = t
    if t - track.clearing_since < timing.resolve_after:
        return ""
    track.firing, track.pending_since, track.clearing_since = False, None, None
    return "resolved"
