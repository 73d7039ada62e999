"""replay --prometheus's roll-up: where each namespace's GPU time went, what of it was lost and what that
cost, with each of its jobs, and how the history was read (its step, the causes the step cannot tell).

Each pod's GPUs on a node are replayed as one job, named ``namespace/job (pod)`` when kube-state-metrics
names its job, else ``namespace/pod``; GPUs no pod holds are ``node (no pod)``. The roll-up joins a job's
pods (a job spread over nodes is one line) and a namespace's jobs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from exporter.analysis.ledger import LOST_STATES
from exporter.policy.cost import Prices

NO_NAMESPACE = "(no pod)"
SECONDS_PER_HOUR = 3600.0
# a state's share of the lost time is named on the summary line from this share up
NAMED_SHARE = 0.05


class ReplayResult(Protocol):
    """What the roll-up reads of replay's result (replay's summary calls ``lines``: no import back)."""

    job_ledger: dict[str, dict[str, float]]
    job_cost: dict[str, dict[str, float]]
    job_throttle_lost: dict[str, float]
    prices: Prices | None
    fleet: dict[str, object] | None


@dataclass
class Tally:
    """One namespace's or one job's GPU time (seconds per ledger state), cost and verdict episodes."""

    seconds: dict[str, float] = field(default_factory=dict)
    cost: dict[str, float] = field(default_factory=dict)
    verdicts: dict[str, int] = field(default_factory=dict)
    lost_s: dict[str, float] = field(default_factory=dict)  # state -> the seconds of it lost

    def add(
        self,
        seconds: dict[str, float],
        cost: dict[str, float],
        verdicts: dict[str, int],
        throttle_lost: float | None = None,
    ) -> None:
        """One replayed job's; ``throttle_lost``: the share of its throttled seconds the clock lost (None:
        not known, all of them)."""
        for into, more in ((self.seconds, seconds), (self.cost, cost)):
            for key, value in more.items():
                into[key] = into.get(key, 0.0) + value
        for kind, count in verdicts.items():
            self.verdicts[kind] = self.verdicts.get(kind, 0) + count
        for state in LOST_STATES:
            lost = seconds.get(state, 0.0)
            if state == "throttled" and throttle_lost is not None:
                lost = min(lost, throttle_lost)  # throttled time computes: lost is the clock taken
            self.lost_s[state] = self.lost_s.get(state, 0.0) + lost

    def record(self, priced: bool) -> dict[str, object]:
        # the hours counted are the held ones (a GPU no job holds is no one's hour): only they are priced
        held = sum(s for state, s in self.seconds.items() if state != "free")
        lost = {s: v for s, v in self.lost_s.items() if v > 0}
        out: dict[str, object] = {
            "gpu_hours": round(held / SECONDS_PER_HOUR, 3),
            "lost_gpu_hours": round(sum(lost.values()) / SECONDS_PER_HOUR, 3),
            "lost_share": round(sum(lost.values()) / held, 3) if held > 0 else 0.0,
            "lost_by_state": {s: round(v / SECONDS_PER_HOUR, 3) for s, v in sorted(lost.items())},
            "verdicts": dict(sorted(self.verdicts.items())),
            "free_gpu_hours": round(self.seconds.get("free", 0.0) / SECONDS_PER_HOUR, 3),
        }
        if priced:
            out["cost"] = round(sum(v for s, v in self.cost.items() if s != "free"), 2)
            out["lost_cost"] = round(
                sum(self.cost.get(s, 0.0) * _share(v, self.seconds.get(s)) for s, v in lost.items()), 2
            )
        return out


def _share(part: float, whole: float | None) -> float:
    return part / whole if whole else 0.0


def namespace_of(job: str) -> str:
    return NO_NAMESPACE if job.endswith(f" {NO_NAMESPACE}") else job.split("/", 1)[0]


def job_of(job: str) -> str:
    """A replayed job's name without its pod: the job its pods belong to."""
    if job.endswith(f" {NO_NAMESPACE}"):
        return job
    return job.split("/", 1)[-1].split(" (", 1)[0]


def rollup(result: ReplayResult, verdicts: dict[str, dict[str, int]]) -> dict[str, dict[str, object]]:
    """Per namespace, its tally and its jobs' (``verdicts``: replayed job -> kind -> episodes)."""
    spaces: dict[str, tuple[Tally, dict[str, Tally]]] = {}
    for job, seconds in result.job_ledger.items():
        space, jobs = spaces.setdefault(namespace_of(job), (Tally(), {}))
        cost, kinds = result.job_cost.get(job, {}), verdicts.get(job, {})
        throttle_lost = result.job_throttle_lost.get(job)
        space.add(seconds, cost, kinds, throttle_lost)
        jobs.setdefault(job_of(job), Tally()).add(seconds, cost, kinds, throttle_lost)
    priced = result.prices is not None
    ordered = sorted(spaces.items(), key=lambda kv: -sum(kv[1][0].cost.values() or kv[1][0].seconds.values()))
    return {
        name: {
            **space.record(priced),
            "jobs": {
                job: tally.record(priced) for job, tally in sorted(jobs.items(), key=lambda kv: -_lost(kv[1]))
            },
        }
        for name, (space, jobs) in ordered
    }


def _lost(t: Tally) -> float:
    return sum(t.lost_s.values())


def lines(result: ReplayResult) -> list[str]:
    """The text summary's part: how the history was read, then each namespace and its jobs."""
    fleet = result.fleet or {}
    out = []
    read = fleet.get("read")
    if isinstance(read, dict):
        line = f"read at a {read['step_s']:g} s step"
        if "queries" in read:
            line += f": {read['queries']} queries, {read['samples'] / 1e6:.2f} M samples"
        out.append(line)
        out += [f"  {line}" for line in workload_lines(read)]
        if read.get("read_back_nodes"):
            out.append(
                f"  gpu-bottleneck-exporter's own ledger, verdicts and classes read back for "
                f"{read['read_back_nodes']} node(s), as it judged them each second (--recompute: judge "
                "them again at the step)"
            )
    for why in dict(fleet.get("unjudged") or {}).values():
        out.append(f"  at this step {why}")
    out += [f"  {note}" for note in fleet.get("notes") or ()]  # type: ignore[attr-defined]
    spaces = fleet.get("namespaces")
    if not isinstance(spaces, dict) or not spaces:
        return out
    currency = result.prices.currency if result.prices else ""
    out.append(
        "by namespace (GPU-hours its jobs were on GPUs and of them lost, what the loss cost; its jobs below):"
    )
    for name, space in spaces.items():
        out.append(f"  namespace {name}: {_line(space, currency)}")
        for job, tally in space["jobs"].items():
            out.append(f"    job {job}: {_line(tally, currency)}")
    return out


def workload_lines(read: dict[str, object]) -> list[str]:
    """Which labels named the workload each GPU was charged to, as discovery found them."""
    named = read.get("workload_labels")
    if not isinstance(named, dict):
        return []
    if not named:
        return ["no series named a pod: every GPU is charged to its node (no pod)"]
    ways = "; ".join(f"{by}, on {n} series" for by, n in named.items())
    return [f"the workload (namespace/pod) named by {ways}"]


def _line(r: dict[str, object], currency: str) -> str:
    lost = r["lost_by_state"]
    assert isinstance(lost, dict)
    total = sum(lost.values())
    named = [
        f"{s} {h:.1f}" for s, h in sorted(lost.items(), key=lambda kv: -kv[1]) if h >= NAMED_SHARE * total
    ]
    text = f"{r['gpu_hours']:.1f} GPU-h, lost {r['lost_gpu_hours']:.1f} ({r['lost_share']:.0%})"
    text += f": {', '.join(named)}" if named else ""
    if "cost" in r:
        text += f"; cost {r['cost']:.2f} {currency}, lost {r['lost_cost']:.2f}"
    free = r.get("free_gpu_hours")
    if isinstance(free, float) and free >= 0.05:  # shown as it rounds: from 0.1
        text += f"; {free:.1f} GPU-h free (no job on them: neither counted nor priced)"
    verdicts = r["verdicts"]
    if isinstance(verdicts, dict) and verdicts:
        text += "; verdicts " + ", ".join(f"{k} {n}" for k, n in verdicts.items())
    return text
