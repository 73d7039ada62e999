"""Grafana dashboards, built as code with grafana-foundation-sdk into ``dashboards/*.json``.

Three dashboards answer "which GPUs are starving, why, and since when": the fleet overview, one node
and its GPUs, and one job (pod) across nodes. Threshold steps and reference lines come from the
threshold table; verdict codes, texts and colours from the verdict registry (``analysis/kinds.py``); the
"where GPU time goes" panels from the time ledger (``gpu_time_seconds_total{state}``, ``analysis/ledger.py``);
every query runs on the ``$datasource`` variable; every panel has a unit and a description.

Each dashboard is data: a list of panel specs (``Spec``: kind, title, description, queries, size) and rows,
drawn by one function (``draw``, laid out by ``lay_out``); only panels no kind describes (tables with their
own transformations, the heatmap, a repeated panel) are ``Custom`` builders.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from devtools.artifacts import cost_rules
from devtools.artifacts import recording as rec
from devtools.artifacts.ledger_queries import LEDGER_METRIC, ledger_rates, ledger_share
from exporter.analysis.kinds import KINDS, in_scope
from exporter.analysis.ledger import STATES
from exporter.policy import thresholds as th

# the SDK marks classic dashboards deprecated in favour of v2, which Grafana's sidecar does not load yet
warnings.filterwarnings("ignore", category=DeprecationWarning, module="grafana_foundation_sdk")

from grafana_foundation_sdk.builders import (  # noqa: E402
    bargauge,
    heatmap,
    prometheus,
    stat,
    statetimeline,
    table,
    timeseries,
)
from grafana_foundation_sdk.builders import common as cb  # noqa: E402
from grafana_foundation_sdk.builders import dashboard as db  # noqa: E402
from grafana_foundation_sdk.cog.encoder import JSONEncoder  # noqa: E402
from grafana_foundation_sdk.models import common as cm  # noqa: E402
from grafana_foundation_sdk.models import dashboard as dm  # noqa: E402
from grafana_foundation_sdk.models import heatmap as hm  # noqa: E402
from grafana_foundation_sdk.models import prometheus as pm  # noqa: E402

DS = dm.DataSourceRef(type_val="prometheus", uid="${datasource}")
TAGS = ["gpu", "gpu-bottleneck-exporter"]


class Code(NamedTuple):
    """One value a state timeline can show: its number, the label value it stands for, text and colour."""

    value: int
    name: str
    text: str
    colour: str


def _verdict_codes() -> tuple[Code, ...]:
    """Code 0 is ok; every kind of the registry takes its rank, so the highest code is the most serious."""
    ranked = sorted(KINDS.values(), key=lambda k: k.rank)
    ranks = [k.rank for k in ranked]
    if ranks[0] < 1 or len(set(ranks)) != len(ranks):
        raise ValueError(f"verdict ranks must be distinct and at least 1: {ranks}")
    return (Code(0, "", "ok", "green"), *(Code(k.rank, k.name, k.label, k.colour) for k in ranked))


# verdicts as one code per GPU, most serious highest: a state timeline shows the worst one
VERDICT_CODES: tuple[Code, ...] = _verdict_codes()

# the ledger's states, the one place that names and colours them on every dashboard (legend text,
# series colour, state timeline value); the timeline's code is the state's position in ledger.STATES
LEDGER_STYLE: dict[str, tuple[str, str]] = {
    "computing": ("computing", "green"),
    "input_wait": ("input wait", "red"),
    "comm_wait": ("comm wait", "light-red"),
    "stalled": ("stalled", "dark-red"),
    "checkpoint": ("checkpoint", "dark-orange"),
    "throttled": ("throttled", "orange"),
    "idle": ("idle", "blue"),
    "free": ("free", "gray"),  # no job holds the GPU (a CSS colour name, which Grafana accepts)
}
LEDGER_CODES: tuple[Code, ...] = tuple(
    Code(i, state, *LEDGER_STYLE[state]) for i, state in enumerate(STATES, start=1)
)

# the fleet's verdict counters: one stat per ledger family (the time a kind of verdict loses), its kinds
# read from the registry; kinds of any other family (shm, NVLink: no time lost by themselves) are counted
# together, so a new kind is always counted somewhere
FAMILY_STATS: dict[str, tuple[str, str]] = {
    "input": ("Starving GPUs", "GPUs waiting for their input data (or for a checkpoint) now."),
    "stall": ("Hung GPUs", "GPUs stuck in a collective now."),
    "comm": ("Comm-bound GPUs", "GPUs whose steps are dominated by slow collectives now."),
    "throttle": ("Throttled GPUs", "GPUs held down by heat or a lowered power cap."),
    "idle": (
        "Idle allocated GPUs",
        f"GPUs holding memory without work for {th.IDLE_AFTER.value / 60:g} minutes or more.",
    ),
}


def verdict_stats() -> list[tuple[str, str, tuple[str, ...]]]:
    """(title, description, kinds) of each fleet stat that counts GPUs by verdict, every kind in one."""
    found = [
        (title, desc, tuple(k.name for k in KINDS.values() if k.family == family))
        for family, (title, desc) in FAMILY_STATS.items()
    ]
    rest = [k for k in KINDS.values() if k.family not in FAMILY_STATS]
    if rest:
        found.append(
            (
                "Other verdicts",
                "GPUs with a verdict that loses no GPU time by itself, now: "
                + ", ".join(k.label for k in rest)
                + ".",
                tuple(k.name for k in rest),
            )
        )
    return [stat_ for stat_ in found if stat_[2]]


def verdict_code(selector: str, by: str) -> str:
    """The most serious verdict per ``by`` group as a number (see VERDICT_CODES), 0 when none holds."""
    terms = [f'gpu_bottleneck{{kind="{c.name}"{selector}}} * {c.value}' for c in VERDICT_CODES if c.name]
    return f"max by ({by}) ({' or '.join(reversed(terms))})"


def recorded_verdict_code(selector: str, by: str) -> str:
    """The same code, from the recording rules' per-GPU worst verdict (its codes are the registry's ranks,
    as VERDICT_CODES)."""
    return f"max by ({by}) ({rec.WORST}{{{selector}}})"


def code_mappings(codes: tuple[Code, ...]) -> list[dm.ValueMap]:
    return [
        dm.ValueMap(
            options={
                str(c.value): dm.ValueMappingResult(text=c.text, color=c.colour, index=i)
                for i, c in enumerate(codes)
            }
        )
    ]


def state_share(selector: str, states: str, by: str) -> str:
    """Per ``by`` group, the share of the held GPUs' time in the ledger states matching the regex
    ``states`` (free time, no job holding the GPU, is left out of both sides)."""
    part = ledger_rates(f'{selector}, state=~"{states}"', by)
    held = ledger_rates(f'{selector}, state!="free"', by)
    return f"{part} / {held}"


def time_lost(selector: str, by: str) -> str:
    """Per ``by`` group, the share of the held GPUs' time not spent computing: what the verdict scores
    were read for, without the per-kind score series."""
    return state_share(selector, LOSS_STATES, by)


def recorded_share(record: str, selector: str) -> str:
    """The share of each ledger state over everything ``selector`` picks, from a recorded rate (the
    recording rules' per-node or per-pod seconds per second in each state)."""
    return (
        f"sum by (state) ({record}{{{selector}}}) / ignoring (state) group_left sum ({record}{{{selector}}})"
    )


def ledger_hours(selector: str) -> str:
    """GPU-hours in each state over the dashboard's range, largest first."""
    return f"sort_desc(sum by (state) (increase({LEDGER_METRIC}{{{selector}}}[$__range])) / 3600)"


LOSS_STATES = "input_wait|comm_wait|stalled|checkpoint|throttled|idle"  # held time not spent computing
# Grafana's unit for the threshold table's currency (the chart swaps it for cost.currency's)
CURRENCY_UNIT = f"currency{th.COST_CURRENCY.value}"


def lost_cost(selector: str) -> str:
    """What the lost states' GPU time cost over the dashboard's range, per state (the cause), largest
    first: each GPU's seconds in the state times the price of a GPU-hour of its model."""
    price = " ".join(cost_rules.GPU_PRICE.split())
    lost = f'{LEDGER_METRIC}{{{selector}, state=~"{cost_rules.LOST}"}}'
    priced = f"increase({lost}[$__range])\n  * on (instance, gpu) group_left (currency) ({price})"
    return f"sort_desc(sum by (state, currency) ({priced}) / 3600)"


def recorded_cost(selector: str, by: str, lost: bool = True) -> str:
    """Per ``by`` group, what the GPU time costs per hour (the lost states' only when ``lost``), from the
    recorded per-pod cost rates."""
    states = f', state=~"{cost_rules.LOST}"' if lost else ""
    return f"sum by ({by}) ({cost_rules.POD}{{{selector}{states}}})"


def ledger_code(selector: str, by: str) -> str:
    """Per ``by`` group, the code (see LEDGER_CODES) of the state that held most of each interval, or,
    where the interval lost the coverage share or more (the line at which a verdict always says so), of
    its largest loss: a GPU that computes 55 % and waits for input 45 % reads input wait, as its verdict
    does. The states whose rate equals the group's largest get their code from a constant vector per
    state label."""
    codes = " or ".join(
        f'label_replace(vector({c.value}), "state", "{c.name}", "", "")' for c in LEDGER_CODES
    )

    def largest_code(rates: str) -> str:
        largest = f"({rates} > 0) == on ({by}) group_left max by ({by}) ({rates})"
        return f"max by ({by}) (({largest}) * 0 + on (state) group_left () ({codes}))"

    losses = ledger_rates(f'{selector}, state=~"{LOSS_STATES}"', f"{by}, state")
    lossy = f"{state_share(selector, LOSS_STATES, by)} >= {th.COVERAGE_SHARE.value:g}"
    everything = ledger_rates(selector, f"{by}, state")
    return f"({largest_code(losses)} and on ({by}) ({lossy})) or {largest_code(everything)}"


def steps(*pairs: tuple[float, str], base: str = "green") -> db.ThresholdsConfig:
    """Absolute threshold steps: a base colour, then (value, colour) from the threshold table."""
    return (
        db.ThresholdsConfig()
        .mode(dm.ThresholdsMode.ABSOLUTE)
        .steps([dm.Threshold(value=None, color=base), *(dm.Threshold(value=v, color=c) for v, c in pairs)])
    )


def line(threshold: th.Threshold, color: str = "orange") -> db.ThresholdsConfig:
    """One reference line at a threshold table value."""
    return steps((threshold.value, color), base="transparent")


def shm_lines() -> db.ThresholdsConfig:
    """Warning, critical and full: the alert levels and the point where workers die."""
    levels = ((th.SHM_WARNING, "orange"), (th.SHM_CRITICAL, "red"), (th.SHM_FULL, "dark-red"))
    return steps(*((t.value, color) for t, color in levels), base="transparent")


def query(expr: str, legend: str = "", ref: str = "A", instant: bool = False, fmt: str | None = None):
    q = prometheus.Dataquery().expr(expr).ref_id(ref).datasource(DS).legend_format(legend or "__auto")
    q = q.instant() if instant else q.range()
    if fmt == "table":
        q = q.format(pm.PromQueryFormat.TABLE)
    elif fmt == "heatmap":
        q = q.format(pm.PromQueryFormat.HEATMAP)
    return q


@dataclass
class Board:
    """Collects panels with sizes; numbers them; the SDK flows them across the grid."""

    builder: db.Dashboard
    next_id: int = 1

    def add(self, panel, w: int, h: int) -> None:
        self.builder.with_panel(
            panel.id(self.next_id).grid_pos(dm.GridPos(h=h, w=w, x=0, y=0)).datasource(DS)
        )
        self.next_id += 1

    def row(self, title: str) -> None:
        self.builder.with_row(db.Row(title).id(self.next_id))
        self.next_id += 1


def _series(
    title: str,
    unit: str,
    description: str,
    *queries,
    min_: float | None = None,
    max_: float | None = None,
    lines: db.ThresholdsConfig | None = None,
) -> timeseries.Panel:
    p = (
        timeseries.Panel()
        .title(title)
        .description(description)
        .unit(unit)
        .line_width(1)
        .fill_opacity(8)
        .legend(
            cb.VizLegendOptions()
            .show_legend(True)
            .display_mode(cm.LegendDisplayMode.LIST)
            .placement(cm.LegendPlacement.BOTTOM)
        )
        .tooltip(cb.VizTooltipOptions().mode(cm.TooltipDisplayMode.MULTI).sort(cm.SortOrder.DESCENDING))
    )
    if min_ is not None:
        p = p.min(min_)
    if max_ is not None:
        p = p.max(max_)
    if lines is not None:  # reference lines at the threshold table's values
        p = p.thresholds(lines).thresholds_style(
            cb.GraphThresholdsStyleConfig().mode(cm.GraphThresholdsStyleMode.LINE)
        )
    for q in queries:
        p = p.with_target(q)
    return p


def _ratio(
    title: str, description: str, *queries, lines: db.ThresholdsConfig | None = None
) -> timeseries.Panel:
    """A share between 0 and 1, shown as a percentage."""
    return _series(title, "percentunit", description, *queries, min_=0, max_=1, lines=lines)


def _stat(title: str, description: str, expr: str, unit: str = "none", red_from: float = 1) -> stat.Panel:
    return (
        stat.Panel()
        .title(title)
        .description(description)
        .unit(unit)
        .with_target(query(expr, instant=True))
        .thresholds(steps((red_from, "red")))
        .color_mode(cm.BigValueColorMode.BACKGROUND)
        .graph_mode(cm.BigValueGraphMode.NONE)
        .reduce_options(cb.ReduceDataOptions().calcs(["lastNotNull"]))
    )


def _timeline(
    title: str, description: str, expr: str, legend: str, codes: tuple[Code, ...] | None = None
) -> statetimeline.Panel:
    """A state timeline of codes: the verdicts' unless ``codes`` says otherwise."""
    return (
        statetimeline.Panel()
        .title(title)
        .description(description)
        .unit("none")
        .with_target(query(expr, legend))
        .mappings(code_mappings(codes or VERDICT_CODES))
        .show_value(cm.VisibilityMode.NEVER)
        .merge_values(True)
        .row_height(0.8)
        .fill_opacity(80)
        .thresholds(steps())
    )


def _state_style(panel):
    """Each ledger state's series in its colour and under its text (the legend shows the label value)."""
    for state, (text, colour) in LEDGER_STYLE.items():
        panel = panel.override_by_name(
            state,
            [
                dm.DynamicConfigValue(id_val="color", value={"mode": "fixed", "fixedColor": colour}),
                dm.DynamicConfigValue(id_val="displayName", value=text),
            ],
        )
    return panel


def _shares(title: str, description: str, expr: str) -> timeseries.Panel:
    """The share of time in each ledger state, stacked: the states add up to 100 %."""
    p = (
        timeseries.Panel()
        .title(title)
        .description(description)
        .unit("percentunit")
        .min(0)
        .max(1)
        .line_width(0)
        .fill_opacity(85)
        .stacking(cb.StackingConfig().mode(cm.StackingMode.NORMAL))
        .legend(
            cb.VizLegendOptions()
            .show_legend(True)
            .display_mode(cm.LegendDisplayMode.LIST)
            .placement(cm.LegendPlacement.BOTTOM)
        )
        .tooltip(cb.VizTooltipOptions().mode(cm.TooltipDisplayMode.MULTI).sort(cm.SortOrder.DESCENDING))
        .with_target(query(expr, "{{state}}"))
    )
    return _state_style(p)


def _hours(title: str, description: str, expr: str, unit: str = "h") -> bargauge.Panel:
    """GPU-hours (or what they cost) per ledger state over the dashboard's range, one bar per state."""
    p = (
        bargauge.Panel()
        .title(title)
        .description(description)
        .unit(unit)
        .min(0)
        .decimals(1)
        .with_target(query(expr, "{{state}}", instant=True))
        .orientation(cm.VizOrientation.HORIZONTAL)
        .display_mode(cm.BarGaugeDisplayMode.BASIC)
        .show_unfilled(True)
        .reduce_options(cb.ReduceDataOptions().calcs(["lastNotNull"]))
        .thresholds(steps())
    )
    return _state_style(p)


def _variables(d: db.Dashboard, *names: tuple[str, str, bool]) -> db.Dashboard:
    d = d.with_variable(db.DatasourceVariable("datasource").label("Data source").type("prometheus"))
    for name, label_query, multi in names:
        var = (
            db.QueryVariable(name)
            .label(name.capitalize())
            .datasource(DS)
            .query(label_query)
            .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
            .sort(dm.VariableSort.ALPHABETICAL_ASC)
        )
        if multi:
            var = var.multi(True).include_all(True).all_value(".*")
        d = d.with_variable(var)
    return d


def _dashboard(uid: str, title: str, description: str) -> db.Dashboard:
    return (
        db.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags(TAGS)
        .time("now-1h", "now")
        .refresh("30s")
        .timezone("browser")
        .editable()
        .tooltip(dm.DashboardCursorSync.CROSSHAIR)
        .link(
            db.DashboardLink("GPU bottleneck dashboards")
            .type(dm.DashboardLinkType.DASHBOARDS)
            .tags(["gpu-bottleneck-exporter"])
            .as_dropdown(True)
            .include_vars(True)
            .keep_time(True)
        )
    )


# ---- panel specs: a panel as data, drawn by one function ---------------------------------------------


@dataclass(frozen=True)
class Target:
    """One query of a panel; its refId is its place in the panel (A, B, C...)."""

    expr: str
    legend: str = ""
    instant: bool = False
    fmt: str | None = None


@dataclass(frozen=True)
class Spec:
    """One panel as data: how it draws (``kind``), what it says, what it asks and its size on the grid.
    Kinds: ``series`` (lines), ``ratio`` (lines of a 0-1 share, shown in percent), ``stat`` (a number
    that turns red from 1), ``timeline`` (codes over time: the verdicts' unless ``codes``), ``shares``
    (ledger states stacked to 100 %), ``hours`` (GPU-hours per ledger state), ``cost`` (what each ledger
    state's hours cost, in the currency's unit)."""

    kind: str
    title: str
    description: str
    targets: tuple[Target, ...]
    size: tuple[int, int] = (12, 8)  # width (of 24 columns), height
    unit: str = "none"
    min_: float | None = None
    lines: db.ThresholdsConfig | None = None  # reference lines at threshold table values
    codes: tuple[Code, ...] | None = None


@dataclass(frozen=True)
class Custom:
    """A panel no kind describes (a table with its own transformations), built by ``build``."""

    build: Callable[[], object]
    size: tuple[int, int]


@dataclass(frozen=True)
class Row:
    title: str


Item = Spec | Custom | Row


def draw(spec: Spec):
    """The SDK panel of ``spec``."""
    first = spec.targets[0]
    if spec.kind == "stat":
        return _stat(spec.title, spec.description, first.expr)
    if spec.kind == "timeline":
        return _timeline(spec.title, spec.description, first.expr, first.legend, spec.codes)
    if spec.kind == "shares":
        return _shares(spec.title, spec.description, first.expr)
    if spec.kind == "hours":
        return _hours(spec.title, spec.description, first.expr)
    if spec.kind == "cost":
        return _hours(spec.title, spec.description, first.expr, CURRENCY_UNIT)
    queries = [
        query(t.expr, t.legend, ref=chr(ord("A") + i), instant=t.instant, fmt=t.fmt)
        for i, t in enumerate(spec.targets)
    ]
    if spec.kind == "ratio":
        return _ratio(spec.title, spec.description, *queries, lines=spec.lines)
    if spec.kind == "series":
        return _series(spec.title, spec.unit, spec.description, *queries, min_=spec.min_, lines=spec.lines)
    raise ValueError(f"{spec.title}: unknown panel kind {spec.kind!r}")


def lay_out(board: Board, items: list[Item]) -> None:
    """Every item onto ``board`` in order: rows, drawn specs, custom panels."""
    for item in items:
        if isinstance(item, Row):
            board.row(item.title)
        elif isinstance(item, Custom):
            board.add(item.build(), *item.size)
        else:
            board.add(draw(item), *item.size)


def target(expr: str, legend: str = "", **kw) -> tuple[Target, ...]:
    """One target, as the one-tuple a single-query spec takes."""
    return (Target(expr, legend, **kw),)


@dataclass(frozen=True)
class Scope:
    """What a dashboard's per-GPU panels select and how they tell GPUs apart: the node view's GPUs of
    one node, or the job view's GPUs of some pods across nodes."""

    sel: str  # label matchers
    by: str  # the labels that tell one GPU from another here
    legend: str  # a GPU's series name


NODE = Scope('node="$node", gpu=~"$gpu"', "gpu", "GPU {{gpu}}")
JOB = Scope('namespace="$namespace", pod=~"$pod"', "node, gpu", "{{node}} GPU {{gpu}}")


# panels the node and job views both draw, each over its own scope


def utilization(s: Scope, title: str, description: str, stats: str, legend: str) -> Spec:
    expr = f"gpu_utilization_window_ratio{{{s.sel}, stat{stats}}}"
    return Spec("ratio", title, description, target(expr, legend), lines=line(th.UTIL_SUSPICION))


def idle_share(s: Scope, title: str, description: str) -> Spec:
    expr = f"gpu_utilization_idle_fraction{{{s.sel}}}"
    return Spec("ratio", title, description, target(expr, s.legend), lines=line(th.STARVATION_IDLE_FRACTION))


def power_over_tdp(s: Scope, description: str) -> Spec:
    expr = f'gpu_power_window_watts{{{s.sel}, stat="mean"}} / ignoring (stat) gpu_power_default_limit_watts'
    return Spec("ratio", "Power over TDP", description, target(expr, s.legend), lines=line(th.POWER_LOW))


def gpu_time_lost(s: Scope, description: str, size: tuple[int, int]) -> Spec:
    return Spec("ratio", "Time lost per GPU", description, target(time_lost(s.sel, s.by), s.legend), size)


def nvlink_traffic(s: Scope, description: str, by: str, legend: str) -> Spec:
    expr = f"sum by ({by}) (rate(gpu_nvlink_traffic_bytes_total{{{s.sel}}}[$__rate_interval]))"
    return Spec("series", "NVLink traffic", description, target(expr, legend), unit="Bps", min_=0)


# ---- fleet overview ----------------------------------------------------------------------------------


def fleet() -> db.Dashboard:
    d = _variables(
        _dashboard(
            "gbe-fleet",
            "GPU bottlenecks: fleet overview",
            "How many GPUs are starving, hung, throttled or idle now, where, and since when.",
        ),
        ("node", "label_values(gpu_info, node)", True),
    )
    lay_out(Board(d), fleet_panels())
    return d


FLEET_NODES = 'node=~"$node"'


def fleet_panels() -> list[Item]:
    nodes = FLEET_NODES
    counts = [
        Spec(
            "stat",
            title,
            desc,
            target(f'sum({rec.NODE_KINDS}{{kind=~"{"|".join(kinds)}", {nodes}}}) or vector(0)'),
            (3, 4),
        )
        for title, desc, kinds in verdict_stats()
    ]
    return [
        *counts,
        Spec(
            "stat",
            "GPUs down",
            "GPUs that did not answer their last collection.",
            target(f"count(gpu_up{{{nodes}}} == 0) or vector(0)"),
            (3, 4),
        ),
        Spec(
            "stat",
            "GPU memory no pod owns",
            "GPUs whose memory a process no pod of the node owns holds (a deleted pod's process, a host "
            "process, another pod's container), or no process at all: they look allocated but do no "
            "pod's work (gpu_memory_unowned_bytes; needs the exporter's process owners, hostPID).",
            target(f"count(count by (node, gpu) (gpu_memory_unowned_bytes{{{nodes}}})) or vector(0)"),
            (3, 4),
        ),
        Spec(
            "stat",
            "Firing GPU alerts",
            "Alerts of the exporter's rules firing now.",
            target('count(ALERTS{alertstate="firing", alertname=~"Gpu.*"}) or vector(0)'),
            (3, 4),
        ),
        Row("Verdicts"),
        Spec(
            "timeline",
            "Verdict by node and GPU",
            "The most serious verdict of each GPU over time.",
            target(recorded_verdict_code(nodes, "node, gpu"), "{{node}} / GPU {{gpu}}"),
            (24, 10),
        ),
        Custom(_worst_offenders, (14, 9)),
        Custom(_input_wait_heatmap, (10, 9)),
        Custom(_firing_alerts, (24, 7)),
        Row("Utilization and power by node"),
        Spec(
            "ratio",
            "Mean GPU utilization by node",
            "Window mean of every driver sample, per node (recorded).",
            target(f"{rec.NODE_UTIL}{{{nodes}}}", "{{node}}"),
            lines=line(th.UTIL_SUSPICION),
        ),
        Spec(
            "ratio",
            "Power against TDP by node",
            "Mean power over the default power limit (recorded).",
            target(f"{rec.NODE_POWER}{{{nodes}}}", "{{node}}"),
            lines=line(th.POWER_LOW),
        ),
        Row("Where GPU time goes"),
        Spec(
            "shares",
            "Share of GPU time by state",
            "Where the selected nodes' GPU time goes, from each GPU's time ledger: computing, waiting for "
            "input, for a collective or for a checkpoint, stalled, throttled, idle while allocated, free. "
            "Stacked: the states add up to 100 %. Read from the recorded per-node rates.",
            target(recorded_share(rec.NODE_RATE, nodes)),
            (16, 8),
        ),
        Spec(
            "hours",
            "GPU-hours by state",
            "GPU-hours spent in each ledger state over the dashboard's time range, on the selected nodes.",
            target(ledger_hours(nodes)),
            (8, 8),
        ),
        Custom(_share_per_node, (8, 7)),
        Row("What the lost time cost"),
        Spec(
            "cost",
            "Cost of lost time by cause",
            "What the selected nodes' GPU time in each lost ledger state cost over the dashboard's range: "
            "each GPU's seconds in the state times the price of a GPU-hour of its model "
            "(gpu_node_price_per_hour, from the exporter's --price; examples unless set, see docs/cost.md).",
            target(lost_cost(nodes), "{{state}}", instant=True),
            (8, 8),
        ),
        Spec(
            "series",
            "Lost time cost per hour by namespace",
            "What the time the selected nodes' GPUs lose (waiting for input, in collectives, for "
            "checkpoints, stalled, throttled, idle while a job had them) costs per hour, per namespace "
            "(team). Read "
            "from the recorded per-pod cost rates.",
            target(recorded_cost(f'{nodes}, namespace!=""', "namespace"), "{{namespace}}"),
            (16, 8),
            unit=CURRENCY_UNIT,
            min_=0,
        ),
    ]


def _table() -> table.Panel:
    """A table panel; its cells say how they are drawn (Grafana's schema requires ``cellOptions``)."""
    return table.Panel().cell_options(cm.TableAutoCellOptions())


def _worst_offenders() -> table.Panel:
    """Verdicts holding now, one table row each."""
    return (
        _table()
        .title("Worst offenders")
        .description("Verdicts holding now, with their cause and the pod that holds the GPU.")
        .unit("none")
        .with_target(query('gpu_bottleneck{node=~"$node"} == 1', instant=True, fmt="table"))
        .with_transformation(
            dm.DataTransformerConfig(
                id_val="organize",
                options={
                    "excludeByName": {
                        "Time": True,
                        "__name__": True,
                        "job": True,
                        "uuid": True,
                        "instance": True,
                        "container": True,
                        "Value": True,
                    },
                    "indexByName": {
                        "node": 0,
                        "gpu": 1,
                        "namespace": 2,
                        "pod": 3,
                        "kind": 4,
                        "cause": 5,
                    },
                },
            )
        )
        .thresholds(steps())
    )


def _input_wait_heatmap() -> heatmap.Panel:
    """How many nodes lose which share of their time to input wait."""
    return (
        heatmap.Panel()
        .title("Input-wait share")
        .description("How many nodes lose which share of their GPU time waiting for input, over time.")
        .unit("percentunit")
        .with_target(query(f'{rec.NODE_SHARE}{{state="input_wait", {FLEET_NODES}}}'))
        .calculate(True)
        .color(heatmap.HeatmapColorOptions().mode(hm.HeatmapColorMode.SCHEME).scheme("Oranges").steps(32))
    )


def _firing_alerts() -> table.Panel:
    """The exporter's alerts firing now, one table row each."""
    return (
        _table()
        .title("Firing alerts")
        .description("The exporter's alerts firing now.")
        .unit("none")
        .with_target(query('ALERTS{alertstate="firing", alertname=~"Gpu.*"}', instant=True, fmt="table"))
        .with_transformation(
            dm.DataTransformerConfig(
                id_val="organize",
                options={
                    "excludeByName": {
                        "Time": True,
                        "__name__": True,
                        "Value": True,
                        "alertstate": True,
                        "job": True,
                    },
                },
            )
        )
    )


def _share_per_node() -> timeseries.Panel:
    """The ledger shares repeated once per selected node."""
    return (
        _shares(
            "Share of GPU time by state on $node",
            "The same share for each node (one panel per node, recorded): the states add up to 100 %.",
            f"{rec.NODE_SHARE}{{{FLEET_NODES}}}",
        )
        .repeat("node")
        .repeat_direction("h")
        .max_per_row(3)
    )


# ---- node and GPU detail -----------------------------------------------------------------------------


NODE_CHECK_COLOURS = {"pass": "green", "warn": "orange", "fail": "red", "skipped": "text"}


def _node_checklist() -> table.Panel:
    """The node doctor's checklist: each check's latest status and detail word (docs/doctor.md)."""
    status_map = dm.ValueMap(
        options={
            status: dm.ValueMappingResult(text=status, color=colour, index=i)
            for i, (status, colour) in enumerate(NODE_CHECK_COLOURS.items())
        }
    )
    return (
        _table()
        .title("Node checklist")
        .description(
            "The node doctor's checks as the exporter last ran them (the cheap ones every minute, P2P and "
            "the pods every five): driver, GPU count, ECC, XIDs, NVLink, fabric manager, P2P, EFA, the GPU "
            "pods' /dev/shm and NCCL variables, PCIe, host. `gpu-bottleneck-exporter doctor` in the "
            "exporter's pod prints the evidence and the fix of each; docs/doctor.md lists every detail."
        )
        .unit("none")
        .with_target(query('gpu_node_check_info{node="$node"}', instant=True, fmt="table"))
        .with_transformation(
            dm.DataTransformerConfig(
                id_val="organize",
                options={
                    "excludeByName": {
                        "Time": True,
                        "__name__": True,
                        "Value": True,
                        "job": True,
                        "instance": True,
                        "node": True,
                    },
                    "indexByName": {"check": 0, "status": 1, "detail": 2},
                },
            )
        )
        .override_by_name(
            "status",
            [
                dm.DynamicConfigValue(id_val="mappings", value=[status_map]),
                dm.DynamicConfigValue(id_val="custom.cellOptions", value={"type": "color-background"}),
            ],
        )
    )


def node() -> db.Dashboard:
    d = _variables(
        _dashboard(
            "gbe-node",
            "GPU bottlenecks: node and GPU detail",
            "One node: every signal behind the verdicts of its GPUs, against the threshold table.",
        ),
        ("node", "label_values(gpu_info, node)", False),
        ("gpu", 'label_values(gpu_info{node="$node"}, gpu)', True),
    )
    lay_out(Board(d), node_panels(NODE))
    return d


def node_panels(s: Scope) -> list[Item]:
    g, gpu = s.sel, s.legend
    here = 'node="$node"'
    return [
        Spec(
            "timeline",
            "Verdict by GPU",
            "The most serious verdict of each GPU over time.",
            target(verdict_code(f", {g}", s.by), gpu),
            (16, 7),
        ),
        gpu_time_lost(
            s,
            "Share of the time a job had each GPU not spent computing (waiting for input, a collective or a "
            "checkpoint, stalled, throttled, idle), from its time ledger. Per-kind verdict scores: "
            "--detail scores.",
            (8, 7),
        ),
        Spec(
            "timeline",
            "Where each GPU's time goes",
            "The time-ledger state that held most of each interval, per GPU: computing, input wait, comm "
            "wait, stalled, checkpoint, throttled, idle or free; where the interval lost "
            f"{100 * th.COVERAGE_SHARE.value:.0f} % or more, its largest loss (the verdicts' coverage "
            "line), so a GPU that computes 55 % and waits 45 % reads input wait, as its verdict does. "
            "The share beside it shows the mix.",
            target(ledger_code(g, s.by), gpu),
            (16, 7),
            codes=LEDGER_CODES,
        ),
        Spec(
            "shares",
            "Share of GPU time by state",
            "Where the selected GPUs' time goes, from their time ledgers. Stacked: the states add up to "
            "100 %.",
            target(ledger_share(g)),
            (8, 7),
        ),
        Custom(lambda: _workload_table(s), (24, 6)),
        Custom(lambda: _process_table(s), (24, 6)),
        Custom(lambda: _shares_table(s), (24, 6)),
        Row("Utilization"),
        utilization(
            s,
            "GPU utilization (window min / mean / max)",
            "Every driver sample of the window (the mean; min and max with --detail window); the line at "
            f"{th.UTIL_SUSPICION.value:.0%} is where suspicion starts.",
            '=~"min|mean|max"',
            f"{gpu} {{{{stat}}}}",
        ),
        idle_share(s, "Idle share of the window", "Share of driver samples below the idle line."),
        Spec(
            "ratio",
            "SM activity against utilization",
            "Utilization counts time with any kernel; SM activity (GPM) how much of the GPU works. Both are "
            "means over about a minute (utilization over the analysis window's samples): a last sample of a "
            "GPU that alternates between steps and waits would read all or nothing at the panel's step.",
            (
                Target(f"avg_over_time(gpu_sm_active_ratio{{{g}}}[$__rate_interval])", f"{gpu} SM active"),
                Target(f'gpu_utilization_window_ratio{{{g}, stat="mean"}}', f"{gpu} utilization"),
            ),
        ),
        Spec(
            "ratio",
            "Memory-copy utilization",
            "Memory controller busy time: spikes while SM activity is low mean slow host-to-device copies.",
            target(f"gpu_memory_utilization_ratio{{{g}}}", gpu),
        ),
        Row("Power and thermal"),
        Spec(
            "series",
            "Power against limit and TDP",
            "Draw, the enforced limit and the default limit (TDP).",
            (
                Target(f'gpu_power_window_watts{{{g}, stat="mean"}}', f"{gpu} mean"),
                Target(f"gpu_power_limit_watts{{{g}}}", f"{gpu} limit"),
                Target(f"gpu_power_default_limit_watts{{{g}}}", f"{gpu} TDP"),
            ),
            unit="watt",
            min_=0,
        ),
        power_over_tdp(s, "Healthy training holds near TDP; the line is the low-power line."),
        Spec(
            "series",
            "Temperature",
            f"GPU temperature, the {th.TEMP_HOT.value:g} °C hot line, and each GPU's slowdown point.",
            (
                Target(f'gpu_temperature_celsius{{{g}, sensor="gpu"}}', gpu),
                Target(f"gpu_temperature_slowdown_celsius{{{g}}}", f"{gpu} slowdown"),
            ),
            (8, 8),
            unit="celsius",
            lines=line(th.TEMP_HOT),
        ),
        Spec(
            "ratio",
            "Throttled share",
            "Share of each GPU's time its clocks were held down for heat or power, from its time ledger. "
            "The driver's clock-event reasons: --detail clocks.",
            target(state_share(g, "throttled", s.by), gpu),
            (8, 8),
        ),
        Spec(
            "series",
            "SM clock",
            "Current SM clock (the maxima and the memory clock: --detail clocks).",
            target(f'gpu_clock_hertz{{{g}, clock="sm"}}', gpu),
            (8, 8),
            unit="hertz",
        ),
        Row("Interconnect"),
        nvlink_traffic(
            s,
            "Bytes per second over all links of each GPU: a hung job moves nothing. Per link: --detail "
            "nvlink.",
            "gpu, direction",
            f"{gpu} {{{{direction}}}}",
        ),
        Spec(
            "series",
            "NVLinks up",
            "Active links of each GPU against the links it has. Per link: --detail nvlink.",
            (
                Target(f"gpu_nvlink_links_up{{{g}}}", f"{gpu} up"),
                Target(f"max(gpu_nvlink_links_expected{{{g}}})", "expected"),
            ),
            min_=0,
        ),
        Spec(
            "series",
            "NVLink errors",
            "Errors of all links and types per GPU: CRC and replay errors climb on a failing link before "
            "it goes down. Per link and type: --detail nvlink.",
            target(f"rate(gpu_nvlink_link_errors_total{{{g}}}[$__rate_interval])", gpu),
            unit="cps",
            min_=0,
        ),
        Spec(
            "series",
            "PCIe traffic",
            "PCIe bytes per second: host-to-device copies of the input pipeline.",
            target(f"rate(gpu_pcie_bytes_total{{{g}}}[$__rate_interval])", f"{gpu} {{{{direction}}}}"),
            unit="Bps",
            min_=0,
        ),
        Spec(
            "stat",
            "NVLinks down",
            "Links reported inactive on the selected GPUs.",
            target(f"sum(gpu_nvlink_links_expected{{{g}}} - gpu_nvlink_links_up{{{g}}}) or vector(0)"),
            (6, 6),
        ),
        Spec(
            "stat",
            "P2P pairs not OK",
            "GPU pair and capability combinations whose peer-to-peer status is not OK.",
            target(f"sum(gpu_p2p_failing_pairs{{{g}}}) or vector(0)"),
            (6, 6),
        ),
        Custom(lambda: _fabric_state(s), (12, 6)),
        Row("Node"),
        Spec(
            "ratio",
            "Shared memory used",
            "/dev/shm and pods' memory-backed volumes; lines at the warning and critical levels and at full.",
            (
                Target(
                    f'gpu_node_shm_used_bytes{{{here}, pod=""}} / gpu_node_shm_size_bytes{{{here}, pod=""}}',
                    "{{mountpoint}}",
                ),
                Target(
                    f'gpu_node_shm_used_bytes{{{here}, pod!=""}}'
                    f' / gpu_node_shm_size_bytes{{{here}, pod!=""}}',
                    "{{namespace}}/{{pod}} {{volume}}",
                ),
            ),
            lines=shm_lines(),
        ),
        Spec(
            "ratio",
            "I/O wait and busiest core",
            "Node I/O wait share and the busiest core's busy share.",
            (
                Target(f"gpu_node_cpu_iowait_ratio{{{here}}}", "I/O wait"),
                Target(f"gpu_node_cpu_core_busy_max_ratio{{{here}}}", "busiest core"),
            ),
            lines=steps((th.IOWAIT_HIGH.value, "orange"), (th.CORE_PINNED.value, "red"), base="transparent"),
        ),
        Spec(
            "ratio",
            "Pressure stall information",
            "Share of time some task stalled (avg10).",
            target(f"gpu_node_pressure_ratio{{{here}}}", "{{resource}}"),
            lines=line(th.PSI_IO_HIGH),
        ),
        Spec(
            "series",
            "Disk reads",
            "Bytes read per second from each block device.",
            target(f"rate(gpu_node_disk_read_bytes_total{{{here}}}[$__rate_interval])", "{{device}}"),
            unit="Bps",
            min_=0,
        ),
        Row("Node checks"),
        Custom(_node_checklist, (24, 9)),
        Row("Exporter"),
        Spec(
            "series",
            "Collection duration",
            "How long the last collection of each source took, failed or not.",
            target(f"gpu_exporter_source_duration_seconds{{{here}}}", "{{source}}"),
            (8, 7),
            unit="s",
            min_=0,
        ),
        Spec(
            "series",
            "Collection errors",
            "Errors per second by source and error name.",
            target(
                f"sum by (source, error) (rate(gpu_exporter_collect_errors_total{{{here}}}"
                "[$__rate_interval]))",
                "{{source}} {{error}}",
            ),
            (8, 7),
            unit="cps",
            min_=0,
        ),
        Spec(
            "series",
            "Age of the last collection",
            "Seconds since each source last collected successfully.",
            target(f"time() - gpu_exporter_last_collect_timestamp_seconds{{{here}}}", "{{source}}"),
            (8, 7),
            unit="s",
            min_=0,
            lines=line(th.COLLECT_STALE, "red"),
        ),
    ]


def _fabric_state(s: Scope) -> statetimeline.Panel:
    """NVSwitch fabric registration per GPU: two states, not the verdict codes."""
    return (
        statetimeline.Panel()
        .title("Fabric state")
        .description("NVSwitch fabric registration per GPU.")
        .unit("none")
        .with_target(query(f"gpu_fabric_registered{{{s.sel}}}", s.legend))
        .mappings(
            [
                dm.ValueMap(
                    options={
                        "0": dm.ValueMappingResult(text="not registered", color="red", index=0),
                        "1": dm.ValueMappingResult(text="registered", color="green", index=1),
                    }
                )
            ]
        )
        .show_value(cm.VisibilityMode.NEVER)
        .thresholds(steps())
    )


# ---- job view ----------------------------------------------------------------------------------------


def job() -> db.Dashboard:
    d = _variables(
        _dashboard(
            "gbe-job",
            "GPU bottlenecks: job view",
            "The GPUs of one pod across nodes, side by side: the rank that starves against the ranks "
            "that wait.",
        ),
        ("namespace", "label_values(gpu_pod_info, namespace)", False),
        ("pod", 'label_values(gpu_pod_info{namespace="$namespace"}, pod)', True),
    )
    lay_out(Board(d), job_panels(JOB))
    return d


def job_panels(s: Scope) -> list[Item]:
    p = s.sel
    return [
        Custom(lambda: _job_gpus(s), (10, 9)),
        Spec(
            "timeline",
            "Verdict by GPU",
            "The most serious verdict of each GPU of the job over time.",
            target(recorded_verdict_code(p, "pod, node, gpu"), "{{pod}} {{node}} / GPU {{gpu}}"),
            (14, 9),
        ),
        Custom(lambda: _workload_table(s), (24, 6)),
        Custom(lambda: _shares_table(s), (24, 6)),
        Spec(
            "shares",
            "Where the job's GPU time goes",
            "The share of the selected pods' GPU time in each ledger state: computing, waiting for input, "
            "for a collective or for a checkpoint, stalled, throttled, idle. Stacked: the states add up to "
            "100 %. Read from the recorded per-pod rates.",
            target(recorded_share(rec.POD_RATE, p)),
            (16, 8),
        ),
        Spec(
            "hours",
            "Job GPU-hours by state",
            "GPU-hours the selected pods spent in each ledger state over the dashboard's time range.",
            target(ledger_hours(p)),
            (8, 8),
        ),
        utilization(
            s,
            "Utilization",
            "Window mean per GPU: a starved rank dips, its peers stay pinned.",
            '="mean"',
            s.legend,
        ),
        idle_share(s, "Idle share", "Share of samples with no kernel: only a starved rank has any."),
        power_over_tdp(s, "Mean power over the default limit, per GPU."),
        Spec(
            "ratio",
            "SM activity",
            "Mean over about a minute per GPU: a last sample of a rank that alternates between steps and "
            "waits would read all or nothing.",
            target(f"avg_over_time(gpu_sm_active_ratio{{{p}}}[$__rate_interval])", s.legend),
        ),
        gpu_time_lost(
            s,
            "Share of each GPU's time not spent computing, from its time ledger: the starving rank loses "
            "it to input wait, the others to waiting in collectives.",
            (12, 8),
        ),
        nvlink_traffic(s, "All links per GPU: a hung job moves nothing.", s.by, s.legend),
        Spec(
            "ratio",
            "Pod shared memory used",
            "The pods' /dev/shm and memory-backed volumes.",
            target(
                f"gpu_node_shm_used_bytes{{{p}}} / gpu_node_shm_size_bytes{{{p}}}",
                "{{namespace}}/{{pod}} {{volume}}",
            ),
            (24, 7),
            lines=shm_lines(),
        ),
        Row("What the lost time cost"),
        Spec(
            "cost",
            "What the job's lost time cost",
            "What the selected pods' GPU time in each lost ledger state cost over the dashboard's range, "
            "priced by each GPU's model (gpu_node_price_per_hour, from the exporter's --price; examples "
            "unless set, see docs/cost.md).",
            target(lost_cost(p), "{{state}}", instant=True),
            (8, 8),
        ),
        Spec(
            "series",
            "Job cost per hour by state",
            "What the selected pods' GPUs cost per hour in each ledger state, computing included: the "
            "lost states are the part a fix would save. Read from the recorded per-pod cost rates.",
            target(recorded_cost(p, "state", lost=False), "{{state}}"),
            (16, 8),
            unit=CURRENCY_UNIT,
            min_=0,
        ),
    ]


def _instant_table(
    title: str, description: str, expr: str, unit: str, hidden: tuple[str, ...], rename: dict[str, str]
) -> table.Panel:
    """One row per series of an instant query, its labels as columns (``hidden`` ones left out)."""
    return (
        _table()
        .title(title)
        .description(description)
        .unit(unit)
        .with_target(query(expr, instant=True, fmt="table"))
        .with_transformation(
            dm.DataTransformerConfig(
                id_val="organize",
                options={
                    "excludeByName": dict.fromkeys(("Time", "__name__", "job", "instance", *hidden), True),
                    "renameByName": rename,
                },
            )
        )
    )


def _job_gpus(s: Scope) -> table.Panel:
    """Every GPU the selected pods hold, as a table."""
    return _instant_table(
        "GPUs of the job",
        "Every GPU the selected pods hold, where, and how busy.",
        f'gpu_utilization_window_ratio{{{s.sel}, stat="mean"}}',
        "percentunit",
        ("stat",),
        {"Value": "utilization (window mean)"},
    )


def _workload_table(s: Scope) -> table.Panel:
    """The class each GPU's time is judged as, and what decided it."""
    return _instant_table(
        "Workload class",
        "What each GPU's time is judged as, and what decided it: training (idle time is waiting for "
        "input or peers), serving (an inference server: idle time is idle capacity unless requests "
        "wait), batch, evaluation, interactive (a notebook), pipeline (the GPUs of a layer-split "
        "model take turns). Source: the pod's log, its processes, its container's image, its name, the "
        "telemetry's shape, or default.",
        f"gpu_workload_class{{{s.sel}}}",
        "none",
        ("uuid", "Value"),
        {},
    )


def _process_table(s: Scope) -> table.Panel:
    """Each pod's processes and memory per GPU, and the memory nobody owns with what is known of it."""
    pods = f'label_replace(gpu_pod_process_memory_bytes{{{s.sel}}}, "owner", "pod", "", "")'
    nobody = f'label_replace(gpu_memory_unowned_bytes{{{s.sel}}}, "owner", "nobody", "", "")'
    return _instant_table(
        "Processes and owners",
        "The GPU memory each pod's processes hold (owner pod), and memory no pod of the node owns (owner "
        "nobody, the reason says why: pod_gone, a deleted pod's process still running, its last pod named; "
        "other_pod, a pod not given this GPU; host, no container; no_process, memory with no process), "
        "with the process's pid, command and container. Needs the exporter's process owners (hostPID); "
        "--detail processes adds one series per process.",
        f"{pods} or {nobody}",
        "bytes",
        ("uuid",),
        {"Value": "memory"},
    )


SHARE_METRICS = ("gpu_pod_time_seconds_total", "gpu_mig_time_seconds_total")  # a pod's share, an instance
SHARE_BY = "node, gpu, namespace, pod, mig_instance, mig_compute_instance, mig_profile"


def shares_lost(selector: str) -> str:
    """Per pod sharing a GPU (time-slicing, MPS) and per MIG instance, the share of its held time over
    the dashboard's range not spent computing (free time, an instance no pod holds, left out)."""

    def seconds(metric: str, states: str) -> str:
        return f"sum by ({SHARE_BY}) (increase({metric}{{{selector}, {states}}}[$__range]))"

    losses, held = f'state=~"{LOSS_STATES}"', 'state!="free"'
    # an entity that lost nothing has no series of a lost state: 0, not a missing row
    lost = [f"{seconds(m, losses)} / {seconds(m, held)}\nor {seconds(m, held)} * 0" for m in SHARE_METRICS]
    return "\nor\n".join(f"({q})" for q in lost)


def _pod_kinds() -> str:
    """The kinds a shared GPU's pods and a MIG GPU's instances are judged for (their registry scope)."""
    return " and ".join(in_scope("pod"))


def _shares_table(s: Scope) -> table.Panel:
    """Each pod's share of a shared GPU and each MIG instance: the part of its time it lost."""
    return _instant_table(
        "Shared GPUs: each pod's and MIG instance's time",
        "On a GPU pods share (time-slicing replicas, MPS), each pod's own ledger; on a GPU in MIG mode, "
        "each instance's (mig_instance, mig_compute_instance where a GPU instance is split, mig_profile, the "
        "pod using it): the share of its time in use over "
        "the dashboard's range not spent computing (waiting for input, stalled, idle...). The verdicts "
        f"{_pod_kinds()} are judged on these, not on the whole GPU. Empty where no "
        "GPU is shared or in MIG mode; a time-sliced pod's share needs the exporter's process owners "
        "(hostPID).",
        shares_lost(s.sel),
        "percentunit",
        (),
        {"Value": "time lost"},
    )


DASHBOARDS: dict[str, Callable[[], db.Dashboard]] = {
    "dashboards/gpu-bottleneck-fleet.json": fleet,
    "dashboards/gpu-bottleneck-node.json": node,
    "dashboards/gpu-bottleneck-job.json": job,
}


def to_json(board: db.Dashboard) -> str:
    built = json.loads(json.dumps(board.build(), cls=JSONEncoder))
    return json.dumps(grafana_schema_clean(built), indent=2, sort_keys=False) + "\n"


def grafana_schema_clean(board: dict) -> dict:
    """Leave out the SDK's defaults that Grafana's own dashboard schema (12.0 to 13.2, checked in
    tests/test_dashboards_grafana_schema.py) does not know: the ``auto`` fields of an interval variable
    on other variables (dropped from the schema in 12.0), a table footer that is off anyway (dropped in
    12.2), and a link's ``placement`` (new in 12.3; older releases show the link where they always did).
    Each is what Grafana does without the key."""
    for variable in board.get("templating", {}).get("list", []):
        if variable.get("type") != "interval":
            for key in ("auto", "auto_min", "auto_count"):
                variable.pop(key, None)
    for link in board.get("links", []):
        link.pop("placement", None)
    for panel in _all_panels(board.get("panels", [])):
        options = panel.get("options") or {}
        if panel.get("type") == "table" and not (options.get("footer") or {}).get("show"):
            options.pop("footer", None)
    return board


def _all_panels(panels: list[dict]) -> list[dict]:
    return [q for p in panels for q in (p, *_all_panels(p.get("panels", [])))]


def renderer(path: str) -> Callable[[], str]:
    return lambda: to_json(DASHBOARDS[path]())
