"""``replay --report``: one self-contained HTML page of a replayed trace.

On top, a summary per GPU (its verdicts with times and causes, the share of each ledger state) and per job;
then per group of GPUs that behave alike (see ``alike_groups``: the ranks of one job are usually one section,
a GPU unlike the others a section of its own) a chart over time of utilization, SM activity, power against the
board's default limit (with the limit line), temperature and SM clock, the verdict episodes as coloured bands
and the ledger's state of each second as a band under the chart. The chart library (uPlot, MIT) and the page's
script are inlined: the file opens offline. Long traces are reduced for the page: each series keeps its
minimum and maximum per time bucket (so a starving loader's 100 -> 0 -> 100 rhythm stays visible), the ledger
band the state that took most of each bucket.
"""

from __future__ import annotations

import html
import json
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path

from exporter.analysis.kinds import KINDS
from exporter.analysis.ledger import STATE_MEANING, STATES
from exporter.offline.files import write_atomically
from exporter.offline.promhistory.rollup import workload_lines
from exporter.offline.replay import (
    EPISODES_LISTED,
    Episode,
    ReplayResult,
    _gpu_list,
    _gpu_order,
    _lasting,
    dated,
    episode_groups,
    group_line,
    peak_text,
    unpaged_losses,
    unsure_lines,
    workload_summary,
)
from exporter.offline.traces import TraceRow, gap_seconds
from exporter.policy.thresholds import REPORT_ALIKE_SHARE

# The one place the report's colours live. Grafana's named colours (what the dashboards use for KINDS)...
NAMED_COLOURS: dict[str, str] = {
    "green": "#73BF69",
    "dark-green": "#37872D",
    "red": "#F2495C",
    "dark-red": "#C4162A",
    "light-red": "#FF7383",
    "orange": "#FF9830",
    "dark-orange": "#FA6400",
    "yellow": "#FADE2A",
    "blue": "#5794F2",
    "purple": "#B877D9",
    "pink": "#E76FB5",
    "grey": "#A0A0A0",
}
# ...the ledger states...
STATE_COLOURS: dict[str, str] = {
    "computing": NAMED_COLOURS["green"],
    "input_wait": NAMED_COLOURS["red"],
    "checkpoint": NAMED_COLOURS["dark-orange"],
    "comm_wait": NAMED_COLOURS["pink"],
    "stalled": NAMED_COLOURS["dark-red"],
    "throttled": NAMED_COLOURS["orange"],
    "idle": NAMED_COLOURS["blue"],
    "free": NAMED_COLOURS["grey"],
}
# ...the verdict bands (each kind's dashboard colour)...
KIND_COLOURS: dict[str, str] = {name: NAMED_COLOURS.get(k.colour, "#888888") for name, k in KINDS.items()}
# ...and the chart's lines.
SERIES: tuple[tuple[str, str, str], ...] = (  # key, legend, colour
    ("util", "utilization %", "#1F60C4"),
    ("sm", "SM active %", "#37872D"),
    ("power", "power % of TDP", "#E0752D"),
    ("limit", "power limit % of TDP", "#8F3BB8"),
    ("temp", "temperature °C", "#C4162A"),
    ("clock", "SM clock % of max", "#6E6E6E"),
)
MAX_POINTS = 2000  # per series per GPU on the page
ASSETS = ("uPlot.min.css", "report.css", "uPlot.iife.min.js", "report.js")


def _pct(value: float | None, of: float | None) -> float | None:
    if value is None or not of:
        return None
    return 100.0 * value / of


@dataclass
class _Gpu:
    name: str = ""
    tdp_w: float | None = None  # the board's default power limit (or the limit, without it)
    rows: list[tuple[float, tuple[float | None, ...]]] = field(default_factory=list)
    ticks: list[tuple[float, int]] = field(default_factory=list)  # (t, state index)


class ReportData:
    """Collects what the page shows while ``replay`` runs: pass ``on_row`` and ``on_tick`` to it."""

    def __init__(self) -> None:
        self.gpus: dict[str, _Gpu] = {}

    def _gpu(self, gpu: str) -> _Gpu:
        return self.gpus.setdefault(gpu, _Gpu())

    def on_row(self, row: TraceRow) -> None:
        p, g = row.point, self._gpu(row.gpu)
        g.name = g.name or row.name
        tdp = p.power_default_w or p.power_limit_w
        if tdp:
            g.tdp_w = max(g.tdp_w or 0.0, tdp)
        values = (
            _pct(p.util, 1.0),
            _pct(p.sm_active, 1.0),
            _pct(p.power_w, tdp),
            _pct(p.power_limit_w, tdp),
            p.temp_c,
            _pct(p.sm_clock_hz, p.sm_clock_max_hz),
        )
        g.rows.append((row.t, values))

    def on_tick(self, t: float, gpu: str, state: str) -> None:
        self._gpu(gpu).ticks.append((t, STATES.index(state)))

    def hooks(self) -> dict[str, object]:
        return {"on_row": self.on_row, "on_tick": self.on_tick}


# ---- reduction for the page ---------------------------------------------------------------------


def reduce_series(
    rows: list[tuple[float, tuple[float | None, ...]]],
    seconds: float,
    max_points: int = MAX_POINTS,
    gap_s: float = math.inf,
) -> tuple[list[float], list[list[float | None]]]:
    """Times and series for the chart: the rows as they are when there are few (a silence longer than
    ``gap_s`` broken by an empty slot, so that no line is drawn across it), else two slots per time
    bucket holding each series' minimum and maximum in the order they occurred (None: no value)."""
    width = len(rows[0][1]) if rows else 0
    if len(rows) <= max_points:
        xs: list[float] = []
        series: list[list[float | None]] = [[] for _ in range(width)]
        for k, (t, values) in enumerate(rows):
            if k and t - rows[k - 1][0] > gap_s:
                xs.append((t + rows[k - 1][0]) / 2)
                for column in series:
                    column.append(None)
            xs.append(t)
            for column, v in zip(series, values, strict=True):
                column.append(v)
        return xs, series
    buckets = max_points // 2
    span = max(seconds, rows[-1][0], 1e-9) / buckets
    # per bucket and series: (t of min, min, t of max, max)
    low: list[list[tuple[float, float] | None]] = [[None] * width for _ in range(buckets)]
    high: list[list[tuple[float, float] | None]] = [[None] * width for _ in range(buckets)]
    for t, values in rows:
        b = min(buckets - 1, int(t / span))
        lo, hi = low[b], high[b]
        for i, v in enumerate(values):
            if v is None:
                continue
            if lo[i] is None or v < lo[i][1]:  # type: ignore[index]
                lo[i] = (t, v)
            if hi[i] is None or v > hi[i][1]:  # type: ignore[index]
                hi[i] = (t, v)
    xs = []
    series = [[] for _ in range(width)]
    for b in range(buckets):
        xs += [(b + 0.25) * span, (b + 0.75) * span]
        for i in range(width):
            lo, hi = low[b][i], high[b][i]
            if lo is None or hi is None:
                series[i] += [None, None]
            else:
                series[i] += [lo[1], hi[1]] if lo[0] <= hi[0] else [hi[1], lo[1]]
    return xs, series


def ledger_runs(
    ticks: list[tuple[float, int]], step: float = 1.0, max_buckets: int = MAX_POINTS
) -> list[list[float]]:
    """The ledger band as runs [start, end, state index]: each tick covers the second before it; with
    more ticks than ``max_buckets``, each bucket shows the state that took most of it."""
    ticks = sorted(ticks)
    if not ticks:
        return []
    cells: list[tuple[float, float, int]] = [(t - step, t, s) for t, s in ticks]
    if len(ticks) > max_buckets:
        end = ticks[-1][0]
        width = end / max_buckets
        votes: dict[int, Counter[int]] = {}
        for t, s in ticks:
            votes.setdefault(min(max_buckets - 1, int((t - step / 2) / width)), Counter())[s] += 1
        cells = [(b * width, (b + 1) * width, c.most_common(1)[0][0]) for b, c in sorted(votes.items())]
    runs: list[list[float]] = []
    for start, end, s in cells:
        if runs and runs[-1][2] == s and abs(runs[-1][1] - start) < 1e-6:
            runs[-1][1] = end
        else:
            runs.append([start, end, s])
    return [[round(a, 2), round(b, 2), s] for a, b, s in runs]


def _round(values: list[float | None], digits: int = 1) -> list[float | None]:
    return [None if v is None or not math.isfinite(v) else round(v, digits) for v in values]


# ---- GPUs alike ---------------------------------------------------------------------------------


def gpu_ranges(gpus: Iterable[str]) -> str:
    """GPU indices as a person writes them: '0-3, 5-7' (a run of three or more as a range)."""
    ordered = sorted(set(gpus), key=_gpu_order)
    parts: list[str] = []
    run: list[int] = []

    def close() -> None:
        if len(run) >= 3:
            parts.append(f"{run[0]}-{run[-1]}")
        else:
            parts.extend(str(i) for i in run)
        run.clear()

    for gpu in ordered:
        if gpu.isdigit() and run and int(gpu) == run[-1] + 1:
            run.append(int(gpu))
            continue
        close()
        if gpu.isdigit():
            run.append(int(gpu))
        else:
            parts.append(gpu)
    close()
    return ", ".join(parts)


def _shares(states: dict[str, float]) -> dict[str, float]:
    total = sum(states.values())
    return {s: (v / total if total > 0 else 0.0) for s, v in states.items()}


def alike_groups(result: ReplayResult, data: ReportData) -> list[list[str]]:
    """The GPUs in groups that behave alike: the same board, the same verdicts (kind and cause) and every
    ledger state's share of their time within REPORT_ALIKE_SHARE of every other member's. Each GPU joins
    the first group it is alike to, in index order; a GPU unlike all others is a group of its own."""
    verdicts: dict[str, set[tuple[str, str]]] = {}
    for e in result.episodes:
        verdicts.setdefault(e.gpu, set()).add((e.kind, e.cause))
    tolerance = REPORT_ALIKE_SHARE.value + 1e-9  # shares are sums of floats
    groups: list[list[str]] = []
    profiles: dict[str, tuple[str, frozenset[tuple[str, str]], dict[str, float]]] = {}
    for gpu in sorted(data.gpus, key=_gpu_order):
        profiles[gpu] = (
            data.gpus[gpu].name,
            frozenset(verdicts.get(gpu, ())),
            _shares(result.ledger.get(gpu, {})),
        )

    def alike(a: str, b: str) -> bool:
        (name_a, kinds_a, shares_a), (name_b, kinds_b, shares_b) = profiles[a], profiles[b]
        return (
            name_a == name_b
            and kinds_a == kinds_b
            and all(abs(shares_a.get(s, 0.0) - shares_b.get(s, 0.0)) <= tolerance for s in STATES)
        )

    for gpu in profiles:
        group = next((g for g in groups if all(alike(gpu, other) for other in g)), None)
        if group is None:
            groups.append([gpu])
        else:
            group.append(gpu)
    return groups


# ---- the page ----------------------------------------------------------------------------------


def _clock(result: ReplayResult, t: float) -> str:
    first = result.stats.first_timestamp
    return "" if first is None else datetime.fromtimestamp(first + t, tz=UTC).strftime("%H:%M:%S")


def _when(result: ReplayResult, t: float) -> str:
    """``t`` s and its time of day; its date and time (UTC) where the trace spans days."""
    first = result.stats.first_timestamp
    if first is not None and dated(result):
        return datetime.fromtimestamp(first + t, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")
    clock = _clock(result, t)
    return f"{t:.0f} s" + (f" ({clock})" if clock else "")


def _chip(kind: str) -> str:
    label = KINDS[kind].label if kind in KINDS else kind
    colour = KIND_COLOURS.get(kind, "#888888")
    return (
        f'<span class="chip" style="background:{colour}" title="{html.escape(kind)}">'
        f"{html.escape(label)}</span>"
    )


def _verdict(result: ReplayResult, e: Episode) -> str:
    end = e.end if e.end is not None else result.seconds
    until = _when(result, e.end) if e.end is not None else "the end"
    text = f"from {_when(result, e.start)} to {until}, {_lasting(end - e.start, dated(result))}"
    verdict = f"verdict from {_when(result, e.fired_at)}"
    if e.resolved is not None:
        verdict += f" to {_when(result, e.resolved)}"
    text += f' <span class="dim">({verdict})</span>{peak_text(e.peak)}'
    if e.cause:
        text += f", cause <b>{html.escape(e.cause)}</b>"
    if e.kind in KINDS and KINDS[e.kind].holds_peers_back and e.related:
        text += f"; GPUs {html.escape(_gpu_list(list(e.related)))} wait for it in NCCL"
    return f"<div>{_chip(e.kind)} {text}</div>"


def _verdicts(result: ReplayResult, episodes: list[Episode]) -> str:
    """A GPU's episodes of one kind: each, or (more than EPISODES_LISTED: a history of days) one line
    with their count and the longest, every one of them in a list opened on a click."""
    if len(episodes) <= EPISODES_LISTED:
        return "".join(_verdict(result, e) for e in episodes)
    every = "".join(_verdict(result, e) for e in episodes)
    return (
        f"<div>{_chip(episodes[0].kind)} {html.escape(group_line(result, episodes))}</div>"
        f'<details class="episodes"><summary>all {len(episodes)} episodes</summary>{every}</details>'
    )


def _shares_cells(states: dict[str, float], shown: list[str]) -> str:
    total = sum(states.values())
    cells = []
    for s in shown:
        share = states.get(s, 0.0) / total if total > 0 else 0.0
        cells.append(f'<td class="num">{share:.0%}</td>' if share >= 0.005 else '<td class="num dim">-</td>')
    bar = "".join(
        f'<span style="width:{100 * v / total:.2f}%;background:{STATE_COLOURS[s]}" '
        f'title="{s} {v / total:.1%} ({v:.0f} s)"></span>'
        for s, v in states.items()
        if total > 0 and v / total >= 0.001
    )
    return "".join(cells) + f'<td class="seconds num">{total:.0f} s</td><td><div class="bar">{bar}</div></td>'


def _class_cell(w: dict[str, object] | None) -> str:
    """The class the GPU's time was judged as, and what decided it (its title)."""
    if w is None:
        return ""
    decided = w["source"] != "default"
    why = f"{w['source']}: {w['evidence']}" if decided else str(w["evidence"])
    name = html.escape(str(w["class"]))
    said = f"judged as {name}" if decided else f"{name} (undecided)"  # booked so, nothing decided it
    return f'<div class="dim small" title="{html.escape(why)}">{said}</div>'


def _quiet(result: ReplayResult) -> list[str]:
    """The GPUs without a verdict."""
    paged = {e.gpu for e in result.episodes}
    return [g for g in result.stats.gpus if g not in paged]


def _summary(result: ReplayResult, data: ReportData) -> str:
    ledgers = [*result.ledger.values(), *result.job_ledger.values()]
    shown = [s for s in STATES if any(states.get(s, 0.0) > 0.5 for states in ledgers)] or ["computing"]
    head = "".join(
        f'<th class="num" title="{html.escape(STATE_MEANING[s])}">'
        f'<span class="swatch" style="background:{STATE_COLOURS[s]}"></span>{s}</th>'
        for s in shown
    )
    by_gpu: dict[str, list[Episode]] = {}
    for e in result.episodes:
        by_gpu.setdefault(e.gpu, []).append(e)
    rows = []
    classes = workload_summary(result)
    groups = episode_groups(result)
    for gpu in sorted(set(result.stats.gpus) | set(result.ledger), key=_gpu_order):
        verdicts = "".join(_verdicts(result, kind) for kind in groups.get(gpu, [])) or (
            '<span class="dim">none</span>'
        )
        name = data.gpus[gpu].name if gpu in data.gpus else result.stats.names.get(gpu, "")
        rows.append(
            f'<tr><td><a href="#gpu-{html.escape(gpu)}">GPU {html.escape(gpu)}</a>'
            f'<div class="dim small">{html.escape(name)}</div>{_class_cell(classes.get(gpu))}</td>'
            f'<td class="verdicts">{verdicts}</td>'
            + _shares_cells(result.ledger.get(gpu, {}), shown)
            + "</tr>"
        )
    jobs = []
    for job, states in result.job_ledger.items():
        title = "all GPUs (one job: no pod labels in a trace)" if job == "node" else f"job {job}"
        text = (
            "".join(
                f"<div>{_chip(str(j['kind']))} on GPUs {html.escape(_gpu_list(list(j['gpus'])))} "  # type: ignore[call-overload]
                f"from {_when(result, float(j['t']))} ({html.escape(str(j['cause']))})</div>"  # type: ignore[arg-type]
                for j in result.jobs
            )
            or '<span class="dim">-</span>'
        )
        jobs.append(
            f'<tr><td>{html.escape(title)}</td><td class="verdicts">{text}</td>'
            + _shares_cells(states, shown)
            + "</tr>"
        )
    table_head = f"<tr><th>GPU</th><th>verdicts</th>{head}<th>observed</th><th>where the time went</th></tr>"
    silent = ""
    if result.silent:
        silent = (
            '<p class="dim">Silent (inputs missing from this trace): '
            + "; ".join(
                f"{html.escape(k)} {html.escape(why)}"
                for k, why in sorted(result.silent.items(), key=lambda kv: list(KINDS).index(kv[0]))
            )
            + "</p>"
        )
    said = [*unpaged_losses(result, _quiet(result)), *unsure_lines(result)]
    if said:  # what no page stood on, and what would decide it: as the text summary says it
        silent += (
            '<h3>Not paged</h3><ul class="notpaged">'
            + "".join(f"<li>{html.escape(line.strip())}</li>" for line in said)
            + "</ul>"
        )
    job_head = table_head.replace("<th>GPU</th>", "<th>job</th>").replace(
        "<th>verdicts</th>", "<th>job events</th>"
    )
    # a history's roll-up by namespace is what a person came for: it comes first
    return (
        _namespaces(result) + f'<h2>Per GPU</h2><table class="summary">{table_head}{"".join(rows)}</table>'
        f'<h2>Per job</h2><table class="summary">{job_head}{"".join(jobs)}</table>{silent}'
        + _tracked_run(result)
    )


def _tracked_run(result: ReplayResult) -> str:
    """A tracker's run: its name, its step, and what its own progress said across each episode."""
    if result.tracker is None:
        return ""
    from exporter.offline.trackers.text import lines

    head, *rest = lines(result)
    return (
        f'<h2>Tracked run</h2><p>{html.escape(head.removeprefix("run: "))}</p><ul class="notpaged">'
        + "".join(f"<li>{html.escape(line.strip())}</li>" for line in rest)
        + "</ul>"
    )


def _namespaces(result: ReplayResult) -> str:
    """replay --prometheus: each namespace's GPU-hours, what was lost and what that cost, its jobs below."""
    spaces = (result.fleet or {}).get("namespaces")
    if not isinstance(spaces, dict) or not spaces:
        return ""
    priced = result.prices is not None
    money = (
        f'<th class="num">cost ({html.escape(result.prices.currency)})</th><th class="num">lost</th>'
        if result.prices
        else ""
    )

    def row(name: str, r: dict, cls: str) -> str:  # type: ignore[type-arg]
        lost = ", ".join(f"{html.escape(s)} {h:.1f}" for s, h in r["lost_by_state"].items() if h >= 0.05)
        verdicts = ", ".join(f"{_chip(k)} {n}" for k, n in r["verdicts"].items())
        cost = (
            f'<td class="num">{r["cost"]:.2f}</td><td class="num">{r["lost_cost"]:.2f}</td>' if priced else ""
        )
        return (
            f'<tr class="{cls}"><td>{html.escape(name)}</td><td class="num">{r["gpu_hours"]:.1f}</td>'
            f'<td class="num">{r["lost_gpu_hours"]:.1f} ({r["lost_share"]:.0%})</td><td>{lost}</td>{cost}'
            f'<td class="verdicts">{verdicts or "-"}</td></tr>'
        )

    rows = []
    for name, space in spaces.items():
        rows.append(row(f"namespace {name}", space, "namespace"))
        rows += [row(f"job {job}", tally, "dim") for job, tally in space["jobs"].items()]
    head = (
        '<tr><th>namespace / job</th><th class="num">GPU-hours</th><th class="num">lost</th>'
        f"<th>lost to</th>{money}<th>verdicts</th></tr>"
    )
    read = (result.fleet or {}).get("read")
    said = list(workload_lines(read)) if isinstance(read, dict) else []
    said += [str(note) for note in (result.fleet or {}).get("notes") or ()]  # type: ignore[attr-defined]
    notes = "".join(f'<p class="dim small">{html.escape(line)}</p>' for line in said)
    return f'<h2 id="namespaces">By namespace</h2><table class="summary">{head}{"".join(rows)}</table>{notes}'


def _legend() -> str:
    states = "".join(
        f'<span class="key" title="{html.escape(STATE_MEANING[s])}">'
        f'<span class="swatch" style="background:{STATE_COLOURS[s]}"></span>{s}</span>'
        for s in STATES
    )
    kinds = "".join(
        f'<span class="key" title="{html.escape(k.meaning)}">'
        f'<span class="swatch" style="background:{KIND_COLOURS[name]}"></span>{html.escape(k.label)}</span>'
        for name, k in KINDS.items()
    )
    return (
        f'<div class="legend"><b>ledger band</b> (state of each second): {states}</div>'
        f'<div class="legend"><b>verdict bands</b>: {kinds}</div>'
    )


def page_data(result: ReplayResult, data: ReportData, max_points: int = MAX_POINTS) -> dict[str, object]:
    """What the page's script draws: a chart per group of GPUs alike (its first GPU's), reduced to at
    most ``max_points`` per series."""
    gpus = []
    for group in alike_groups(result, data):
        gpu, g = group[0], data.gpus[group[0]]
        gap_s = result.stats.gap_s or gap_seconds()
        xs, series = reduce_series(g.rows, result.seconds, max_points, gap_s)
        present = [i for i in range(len(SERIES)) if any(v is not None for v in series[i])] if series else []
        note = ""
        if len(group) > 1:
            note = (
                f"{len(group)} GPUs alike (the same verdicts, each ledger state's share within "
                f"{REPORT_ALIKE_SHARE.value:.0%} of the others'): the chart shows GPU {gpu}"
            )
        gpus.append(
            {
                "gpu": gpu,
                "gpus": group,
                "label": ("GPUs " if len(group) > 1 else "GPU ") + gpu_ranges(group),
                "note": note,
                "name": g.name,
                "tdp": g.tdp_w,
                "x": _round(xs, 2),
                "series": [[SERIES[i][0], _round(series[i])] for i in present],
                "ledger": ledger_runs(g.ticks, max_buckets=max_points),
                "episodes": [
                    {
                        "kind": e.kind,
                        "start": round(e.start, 1),  # when its loss began and ended: the band
                        "end": round(e.end, 1) if e.end is not None else None,
                        "fired": round(e.fired_at, 1),
                    }
                    for e in result.episodes
                    if e.gpu == gpu
                ],
            }
        )
    return {
        "seconds": round(result.seconds, 1),
        "start": result.stats.first_timestamp,
        "dated": dated(result),  # the axis and the times read by date: the trace spans days
        "states": list(STATES),
        "stateColours": STATE_COLOURS,
        "kinds": {name: {"label": k.label, "colour": KIND_COLOURS[name]} for name, k in KINDS.items()},
        "series": {key: {"label": label, "colour": colour} for key, label, colour in SERIES},
        "gpus": gpus,
    }


def _asset(name: str) -> str:
    return (resources.files("exporter.offline") / "report_assets" / name).read_text(encoding="utf-8")


def _script_json(value: object) -> str:
    """JSON safe inside <script> whatever a name holds: no '<' at all (so neither '</script' nor
    '<!--' with '<script', which puts the parser in a state where the page's scripts never run),
    nor '>' or '&'; within JSON they only occur inside strings, where the escapes read the same."""
    text = json.dumps(value, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def render(result: ReplayResult, data: ReportData, max_points: int = MAX_POINTS) -> str:
    s = result.stats
    trace = html.escape(result.path.name)
    start = ""
    if s.first_timestamp is not None:
        start = ", from " + datetime.fromtimestamp(s.first_timestamp, tz=UTC).strftime(
            "%Y-%m-%d %H:%M:%S UTC"
        )
    cut = ""
    if s.cut_after_line is not None:
        cut = (
            f'<p class="cut" id="cut">The file is cut short (its gzip stream ends early): replayed up to '
            f"line {s.cut_after_line}, {result.seconds:.0f} s into the trace; the rest is missing.</p>"
        )
    css = _asset("uPlot.min.css") + "\n" + _asset("report.css")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{trace}: GPU bottleneck replay</title>
<style>{css}</style>
</head><body>
<header><h1>{trace}</h1>
<p>{len(s.gpus)} GPU(s), {_span(result)}, {s.rows} rows{html.escape(start)}.
Replayed by gpu-bottleneck-exporter: the live analysis on a virtual clock.</p>{cut}</header>
<section id="summary">{_summary(result, data)}</section>
<section id="charts"><h2>Over time</h2>{_legend()}
<p class="dim small">Lines: each series' minimum and maximum per time bucket when the trace is long.
Drag to zoom, double-click to reset. Power is a share of the board's default limit (TDP).</p>
<div id="gpus"></div></section>
<script id="report-data" type="application/json">{_script_json(page_data(result, data, max_points))}</script>
<script>{_asset("uPlot.iife.min.js")}</script>
<script>{_asset("report.js")}</script>
</body></html>
"""


def _span(result: ReplayResult) -> str:
    """The time the samples cover: in seconds, or a range of days in days and hours."""
    if dated(result):
        return f"{_lasting(result.sampled_seconds or result.seconds, True)} of samples over " + _lasting(
            result.seconds, True
        )
    return f"{result.seconds:.1f} s of samples"


def write_report(path: str | Path, result: ReplayResult, data: ReportData) -> int:
    """Write the page whole or not at all (a full disk leaves the previous page); returns its size in
    bytes."""
    return write_atomically(path, render(result, data))
