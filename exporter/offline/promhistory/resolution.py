"""What a coarse step can show, kind by kind.

A Prometheus keeps one sample per scrape (15-60 s) of values that are instants (utilization, power,
memory, clocks) or short averages (dcgm-exporter's profiling fields). Replay holds each for its step; the
kinds whose evidence lasts minutes survive that, the kinds that live in the seconds between samples do
not, and replay says so (``silent``) rather than guess. Measured on the labelled example traces
(docs/diagnose.md's agreement table; tests/test_replay_prometheus_agreement.py keeps it true).
"""

from __future__ import annotations

from exporter.analysis.kinds import KINDS

# the finest step a live exporter's samples reach: at or under it every kind is judged as live
FINE_STEP_S = 2.0
# the coarsest step each kind is judged at, and what it cannot see past it. The others hold for minutes
# (a hang, reserved GPUs doing nothing, heat, the power cap, /dev/shm filling, links down) and are judged
# at any step replay takes.
LIMITS: dict[str, tuple[float, str]] = {
    "comm_bound": (
        FINE_STEP_S,
        "needs samples under {fine:g} s: at a {step:g} s step, ranks waiting in NCCL for a starved peer read "
        "as slow collectives (the second-by-second alignment that tells them apart is gone)",
    ),
}


def silenced(step: float) -> dict[str, str]:
    """The kinds a ``step``-second sampling cannot show, each with why."""
    return {
        kind: why.format(fine=finest, step=step)
        for kind, (finest, why) in LIMITS.items()
        if kind in KINDS and step > finest
    }


# The causes of a kind a coarse step cannot tell from something benign, each with the finest step it is
# judged at and why: the kind itself stays judged on its other causes.
CAUSE_LIMITS: dict[tuple[str, str], tuple[float, str]] = {
    ("comm_hang", "peer_not_in_collective"): (
        FINE_STEP_S,
        "comm_hang is judged only when every rank is stuck (all_ranks): ranks pinned in a collective while "
        "one rank is elsewhere (peer_not_in_collective) read alike, at a {step:g} s step, for a hang and "
        "for a long checkpoint write, whose bursts of progress every few seconds fall between the samples",
    ),
}


def unjudged_causes(step: float) -> dict[tuple[str, str], str]:
    """The (kind, cause) pairs a ``step``-second sampling cannot tell apart, each with why."""
    return {
        pair: why.format(fine=finest, step=step)
        for pair, (finest, why) in CAUSE_LIMITS.items()
        if pair[0] in KINDS and step > finest
    }
