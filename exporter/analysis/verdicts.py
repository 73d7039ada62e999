"""Verdicts with hysteresis: evidence must reach the enter score and hold for ``fire_after`` seconds to
fire; it resolves after staying below the exit score for ``resolve_after`` seconds. Pure state steps."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Timing:
    enter: float  # evidence must reach this score to start counting...
    exit: float  # ...and fall below this one to start resolving
    fire_after: float  # seconds at or above enter before the verdict fires
    resolve_after: float  # seconds below exit before it resolves


@dataclass
class Track:
    """One verdict kind on one GPU."""

    firing: bool = False
    pending_since: float | None = None
    clearing_since: float | None = None
    cause: str = ""
    score: float = 0.0
    since: float | None = None  # when the loss of its episode began (the engine reads it from the ledger)
    # it fired on evidence that ends with its condition (a stopped rank): it resolves when that ends,
    # unless evidence of its own (a lasting loss) has since reached the enter score
    with_condition: bool = False


def step(
    track: Track,
    score: float,
    cause: str,
    t: float,
    timing: Timing,
    fire_after: float | None = None,
    resolve_after: float | None = None,
) -> str:
    """Advance one track to time t. Returns "firing" or "resolved" when the verdict changes, else "".
    ``fire_after`` and ``resolve_after`` stand for the timing's own where given."""
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
    if t - track.clearing_since < (timing.resolve_after if resolve_after is None else resolve_after):
        return ""
    track.firing, track.pending_since, track.clearing_since = False, None, None
    track.with_condition = False
    return "resolved"
