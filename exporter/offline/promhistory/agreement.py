"""How a coarse step's verdicts compare with the 1-second replay of the same trace, kind by kind.

A trace is scraped in-process as an exporter would have been (each GPU's latest sample every ``step``
seconds, only the attributes the scheme carries, the host's latest values) and replayed at that step by
the reader's own code (``history.replay_nodes``); the same comparison through a real Prometheus and
VictoriaMetrics is tests/e2e/test_replay_prometheus.py's. ``python -m
exporter.offline.promhistory.agreement TRACE... --step 15 --step 30`` prints one line per trace and step.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from exporter.analysis.points import HostPoint
from exporter.offline.promhistory import export, names
from exporter.offline.promhistory.history import Gpu, Node, replay_nodes
from exporter.offline.promhistory.resolution import silenced
from exporter.offline.replay import Episode, ReplayResult, replay
from exporter.offline.traces import TraceReader, TraceRow

Kinds = dict[str, set[str]]  # kind -> the GPUs with an episode of it
Episodes = dict[tuple[str, str], list[Episode]]  # (GPU, kind) -> its episodes, in order


ANY_GPU = "*"  # in a labels file's kinds: the labels accept the kind on every GPU


@dataclass
class Compared:
    trace: str
    step: float
    fine: Kinds
    coarse: Kinds
    labelled: Kinds
    silent: set[str] = field(default_factory=set)
    fine_episodes: Episodes = field(default_factory=dict)
    coarse_episodes: Episodes = field(default_factory=dict)

    def agreed(self) -> dict[str, bool]:
        """Per kind the 1-second replay gave (and the step can show): found on its GPUs at the step (a
        verdict on more GPUs is ``false`` where the labels do not accept it)."""
        return {k: gpus <= self.coarse.get(k, set()) for k, gpus in self.fine.items() if k not in self.silent}

    def matched(self) -> list[tuple[list[Episode], list[Episode]]]:
        """Each GPU's kind the 1-second replay gave (and the step can show) that the step gave too: the
        episodes of both."""
        return [
            (fine, self.coarse_episodes[key])
            for key, fine in sorted(self.fine_episodes.items())
            if key[1] not in self.silent and key in self.coarse_episodes
        ]

    def fragments(self) -> tuple[int, int]:
        """The episodes the step gave and the 1-second replay gave, on the GPUs' kinds both gave."""
        pairs = self.matched()
        return sum(len(c) for _, c in pairs), sum(len(f) for f, _ in pairs)

    def onset_errors(self) -> list[float]:
        """Seconds the step's first episode began after the 1-second replay's (negative: before)."""
        return [c[0].start - f[0].start for f, c in self.matched()]

    def causes_agreed(self) -> tuple[int, int]:
        """Of the GPUs' kinds both gave, how many name the 1-second replay's cause in every episode."""
        pairs = self.matched()
        return sum(all(e.cause == f[0].cause for e in c) for f, c in pairs), len(pairs)

    def false(self) -> Kinds:
        """Verdicts at the step that neither the 1-second replay nor the trace's labels give."""
        out: Kinds = {}
        for kind, gpus in self.coarse.items():
            accepted = self.fine.get(kind, set()) | self.labelled.get(kind, set())
            extra = set() if ANY_GPU in accepted else gpus - accepted
            if extra:
                out[kind] = extra
        return out


def sampled(rows: Iterable[TraceRow], step: float, scheme: str = names.DCGM_LEGACY) -> Node:
    """The trace's GPUs and host as a Prometheus would hold them at ``step`` (times from 0); a gap in the
    trace (TRACE_GAP_PERIODS) is a hole in the history, not its last row repeated."""
    attrs = {s.attr for s in export.writers(scheme)}
    gpus: dict[str, Gpu] = {}
    host: dict[str, dict[float, float]] = {}
    last: dict[str, TraceRow] = {}
    last_host: HostPoint | None = None
    at = 0.0

    def scrape(t: float) -> None:
        for ident, row in last.items():
            gpu = gpus.setdefault(ident, Gpu("node", ident, row.name))
            gpu.pods[t] = "ml/trace"
            for attr in attrs:
                value = getattr(row.point, attr, None)
                if value is not None:
                    gpu.values.setdefault(attr, {})[t] = float(value)
        if last_host is not None:
            for attr in names.HOST_SERIES:
                value = getattr(last_host, attr, None)
                if value is not None:
                    host.setdefault(attr, {})[t] = float(value)

    segment = 0
    for row in rows:
        if row.segment != segment:  # a gap in the trace: nothing was scraped while nothing was logged
            last.clear()
            segment = row.segment
        while row.t > at:
            if last:
                scrape(at)
            at += step
        last[row.gpu] = row
        last_host = row.host or last_host
    if last:
        scrape(at)
    return gpus, host


def compare(path: Path, step: float, fine: ReplayResult | None = None) -> Compared:
    fine = fine or replay(path, prices=None)
    node = sampled(TraceReader(path), step)
    coarse = replay_nodes([node], {}, step, 0.0, f"sampled at {step:g} s", path, prices=None)
    return Compared(
        path.name,
        step,
        kinds_of(fine),
        kinds_of(coarse),
        labelled(path),
        set(silenced(step)),
        episodes_of(fine),
        episodes_of(coarse),
    )


def episodes_of(result: ReplayResult) -> Episodes:
    out: Episodes = {}
    for e in sorted(result.episodes, key=lambda e: e.start):
        out.setdefault((e.gpu.rsplit("/", 1)[-1], e.kind), []).append(e)
    return out


def kinds_of(result: ReplayResult) -> Kinds:
    out: Kinds = {}
    for e in result.episodes:
        out.setdefault(e.kind, set()).add(e.gpu.rsplit("/", 1)[-1])
    return out


def labelled(path: Path) -> Kinds:
    """The kinds the trace's labels file gives each GPU (none without one)."""
    labels = path.with_name(path.name.removesuffix(".gz").removesuffix(".csv") + ".labels.json")
    if not labels.exists():
        return {}
    doc = json.loads(labels.read_text())
    out: Kinds = {}
    for label in doc.get("labels", []):
        for kind in label.get("kinds", [label.get("kind")]):
            out.setdefault(str(kind), set()).add(str(label["gpu"]))
    for kind in doc.get("ignore_kinds", []):  # a kind the labels accept on any GPU (a benign look-alike)
        out.setdefault(str(kind), set()).add(ANY_GPU)
    return out


def record(c: Compared) -> dict[str, object]:
    """One trace at one step, as a JSON line."""
    made, fine = c.fragments()
    agreed, pairs = c.causes_agreed()
    return {
        "trace": c.trace,
        "step": c.step,
        "fine": {k: sorted(v) for k, v in c.fine.items()},
        "coarse": {k: sorted(v) for k, v in c.coarse.items()},
        "agreed": c.agreed(),
        "false": {k: sorted(v) for k, v in c.false().items()},
        "episodes": {"step": made, "one_second": fine},
        "onset_error_s": [round(e, 1) for e in c.onset_errors()],
        "causes_agreed": [agreed, pairs],
    }


def table(compared: list[Compared]) -> list[str]:
    """Per step, over every trace: episodes per 1-second episode, the onset error (median and worst),
    the causes agreed and the false verdicts (docs/diagnose.md's figures)."""
    head = "| step | episodes per 1 s one | onset error: median (worst) | causes agreed | false verdicts |"
    lines = [head, "|---|---|---|---|---|"]
    for step in sorted({c.step for c in compared}):
        at = [c for c in compared if c.step == step]
        made = sum(c.fragments()[0] for c in at)
        fine = sum(c.fragments()[1] for c in at)
        errors = [e for c in at for e in c.onset_errors()]
        agreed = sum(c.causes_agreed()[0] for c in at)
        pairs = sum(c.causes_agreed()[1] for c in at)
        false = sum(len(gpus) for c in at for gpus in c.false().values())
        onset = f"{statistics.median(errors):+.0f} s ({max(errors, key=abs):+.0f} s)" if errors else "-"
        ratio = f"{made / fine:.2f} ({made} / {fine})" if fine else "-"
        lines.append(f"| {step:g} s | {ratio} | {onset} | {agreed} of {pairs} | {false} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="+", type=Path)
    parser.add_argument("--step", type=float, action="append")
    parser.add_argument("--table", action="store_true", help="end with the figures per step, as a table")
    args = parser.parse_args(argv)
    compared = []
    for path in args.traces:
        fine = replay(path, prices=None)
        for step in args.step or [15.0, 30.0]:
            c = compare(path, step, fine)
            compared.append(c)
            print(json.dumps(record(c)), flush=True)
    if args.table:
        print("\n".join(table(compared)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
