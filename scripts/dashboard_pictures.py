"""Pictures of the three Grafana dashboards for the README, made without a Grafana server.

    python scripts/dashboard_pictures.py [--seconds 240] [--node node-a] [--out docs/img] [--keep-html DIR]

Starts a simulated fleet (four 2-GPU simulated exporters, each a different scenario) behind a real
Prometheus with the demo's copy of the alert rules (every `for` shortened to 30 s), lets it run, then for
each dashboard in dashboards/*.json takes a handful of panels and evaluates each panel's own
``targets[].expr``, read from the dashboard JSON as it is, against that Prometheus (query_range over the
run; instant queries at its end). Grafana's variables are substituted: ``$node``/``$gpu``/``$pod`` with
``.*`` where the variable allows All (the node view takes one node, the job view the first namespace),
``$__rate_interval`` with 1m, ``$__range`` with the run's length and ``$__interval`` with the step.

Each dashboard becomes one self-contained HTML page (uPlot inlined from exporter/offline/report_assets) that
says plainly it is not Grafana, and headless Chromium screenshots it into
docs/img/dashboard-{fleet,node,job}.png (pngquant shrinks them when installed), each recorded in
docs/img/pictures.json with the hash of the dashboard JSON it was drawn from (tests/test_pictures.py
fails once that changes). Needs Prometheus, Alertmanager and Chromium on PATH.
"""

from __future__ import annotations

import argparse
import html
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from devtools.artifacts import alerts
from scripts import picture_sources
from scripts.demo import DEMO_FOR  # the demo's copy of the rules, so that alerts fire within the run
from scripts.stack import HEADLESS_CHROMIUM, REPO, PrometheusApi, simulated_fleet

FLEET = {
    "node-a": "data_starvation:gpus=1",
    "node-b": "comm_hang:onset=20",
    "node-c": "comm_bound",
    "node-d": "thermal_throttle:gpus=1",
}
RATE_INTERVAL = "1m"
BANNER = (
    "Not Grafana: these panels are drawn from the dashboard's own queries against a real Prometheus "
    "scraping simulated GPU nodes (scripts/dashboard_pictures.py)"
)

# dashboard file -> (picture name, panel titles to draw in this order, window height in px)
PICTURES: dict[str, tuple[str, list[str], int]] = {
    "gpu-bottleneck-fleet.json": (
        "fleet",
        [
            "Starving GPUs",
            "Hung GPUs",
            "Comm-bound GPUs",
            "Throttled GPUs",
            "Idle allocated GPUs",
            "Other verdicts",
            "GPUs down",
            "Firing GPU alerts",
            "Verdict by node and GPU",
            "Share of GPU time by state",
            "GPU-hours by state",
            "Mean GPU utilization by node",
            "Power against TDP by node",
        ],
        1130,
    ),
    "gpu-bottleneck-node.json": (
        "node",
        [
            "NVLinks down",
            "P2P pairs not OK",
            "Verdict by GPU",
            "Where each GPU's time goes",
            "Share of GPU time by state",
            "GPU utilization (window min / mean / max)",
            "SM activity against utilization",
            "Power against limit and TDP",
            "Power over TDP",
            "Temperature",
        ],
        1440,
    ),
    "gpu-bottleneck-job.json": (
        "job",
        [
            "Verdict by GPU",
            "Where the job's GPU time goes",
            "Job GPU-hours by state",
            "Utilization",
            "Power over TDP",
        ],
        1100,
    ),
}

# Grafana's named colours (dark theme) and its classic palette for series without an override
COLOURS = {
    "green": "#73BF69",
    "red": "#F2495C",
    "light-red": "#FF7383",
    "dark-red": "#C4162A",
    "orange": "#FF9830",
    "dark-orange": "#FA6400",
    "yellow": "#FADE2A",
    "blue": "#5794F2",
    "purple": "#B877D9",
    "gray": "#8E8E8E",
}
PALETTE = [
    "#73BF69",
    "#F2CC0C",
    "#8AB8FF",
    "#FF780A",
    "#F2495C",
    "#5794F2",
    "#B877D9",
    "#705DA0",
    "#37872D",
    "#FADE2A",
    "#447EBC",
    "#C15C17",
]
PANEL_BG = (0x18, 0x1B, 0x1F)


def colour(name: str) -> str:
    return COLOURS.get(name, name)


def solid(hex_colour: str, opacity: float) -> str:
    """The colour at ``opacity`` over the panel's background, as an opaque colour (stacked areas)."""
    rgb = [int(hex_colour[i : i + 2], 16) for i in (1, 3, 5)]
    mixed = [round(c * opacity + b * (1 - opacity)) for c, b in zip(rgb, PANEL_BG, strict=True)]
    return "#" + "".join(f"{c:02x}" for c in mixed)


# ---------------------------------------------------------------------------------------------- queries


def panels_of(dashboard: dict) -> list[dict]:
    out = []
    for panel in dashboard["panels"]:
        out.append(panel)
        out.extend(panel.get("panels", []))
    return out


def variables(dashboard: dict, api: PrometheusApi, node: str, window: float, step: float) -> dict[str, str]:
    """Values for the dashboard's variables and Grafana's own: All -> ``.*``; otherwise a label value."""
    values = {"__rate_interval": RATE_INTERVAL, "__range": f"{round(window)}s", "__interval": f"{step:g}s"}
    for var in dashboard.get("templating", {}).get("list", []):
        name = var["name"]
        if var.get("type") != "query":
            continue
        if var.get("includeAll"):
            values[name] = ".*"
            continue
        m = re.fullmatch(r"label_values\((?:(.*),\s*)?(\w+)\)", var["query"].strip())
        if not m:
            raise ValueError(f"cannot evaluate variable {name}: {var['query']!r}")
        match = substitute(m.group(1), values) if m.group(1) else None
        found = sorted(api.label_values(m.group(2), match))
        if not found:
            raise RuntimeError(f"no values for ${name} ({var['query']})")
        values[name] = node if name == "node" and node in found else found[0]
    return values


def substitute(text: str, values: dict[str, str]) -> str:
    # longest names first: $__range must not be taken for a $__rate_interval prefix and the like
    for name in sorted(values, key=len, reverse=True):
        text = text.replace("${" + name + "}", values[name]).replace("$" + name, values[name])
    return text


def legend(fmt: str | None, metric: dict[str, str]) -> str:
    if not fmt or fmt == "__auto":
        shown = {k: v for k, v in metric.items() if k != "__name__"}
        return "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(shown.items())) + "}" if shown else "value"
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: metric.get(m.group(1), ""), fmt)


def evaluate(panel: dict, api: PrometheusApi, values: dict[str, str], start: float, end: float, step: float):
    """[(legend, raw metric labels, [value or None per step])] for a range panel, or [(legend, labels,
    value)] for an instant one: each target's own expression with the variables substituted."""
    grid = [start + i * step for i in range(int((end - start) // step) + 1)]
    out = []
    for target in panel.get("targets", []):
        expr = substitute(target["expr"], values)
        if target.get("instant"):
            for r in api.call("query", query=expr, time=end)["result"]:
                out.append(
                    (legend(target.get("legendFormat"), r["metric"]), r["metric"], float(r["value"][1]))
                )
            continue
        result = api.call("query_range", query=expr, start=start, end=end, step=step)["result"]
        for r in result:
            by_t = {round(float(t), 3): float(v) for t, v in r["values"]}
            row = [by_t.get(round(t, 3)) for t in grid]
            out.append((legend(target.get("legendFormat"), r["metric"]), r["metric"], row))
    return grid, out


# ------------------------------------------------------------------------------------------- rendering


def fmt_value(value: float, unit: str, decimals: int | None = None) -> str:
    if unit == "percentunit":
        return f"{value * 100:.{1 if decimals is None else decimals}f} %"
    if unit == "h":
        d = 1 if decimals is None else decimals
        if value and round(value, d) == 0:
            d = 3
        return f"{value:.{d}f} h"
    if unit == "watt":
        return f"{value:.0f} W"
    if unit == "celsius":
        return f"{value:.0f} °C"
    return f"{value:g}"


def mapping_of(panel: dict) -> dict[str, dict]:
    out = {}
    for m in panel.get("fieldConfig", {}).get("defaults", {}).get("mappings", []):
        if m.get("type") == "value":
            out.update(m["options"])
    return out


def overrides_of(panel: dict) -> dict[str, tuple[str | None, str | None]]:
    """series name -> (fixed colour, display name) from the panel's byName overrides."""
    out = {}
    for o in panel.get("fieldConfig", {}).get("overrides", []):
        if o.get("matcher", {}).get("id") != "byName":
            continue
        col = name = None
        for prop in o.get("properties", []):
            if prop["id"] == "color":
                col = colour(prop["value"].get("fixedColor", ""))
            elif prop["id"] == "displayName":
                name = prop["value"]
        out[o["matcher"]["options"]] = (col, name)
    return out


def stat_html(title: str, series: list) -> str:
    value = series[0][2] if series else None
    shown = "No data" if value is None else f"{value:g}"
    tone = "ok" if not value else "bad"
    return (
        f'<div class="stat {tone}"><div class="t">{html.escape(title)}</div>'
        f'<div class="v">{shown}</div></div>'
    )


def clock(t: float) -> str:
    return datetime.fromtimestamp(t, tz=UTC).strftime("%H:%M:%S")


def timeline_svg(panel: dict, grid: list[float], series: list, width: int = 1320) -> str:
    """A state timeline as Grafana draws it: a row per series, each run of a value in its mapping's colour."""
    mapping = mapping_of(panel)
    label_w, row_h, gap, axis_h = 190, 22, 4, 18
    plot_w = width - label_w - 10
    n = len(grid)
    rows = sorted(series, key=lambda s: s[0])
    height = len(rows) * (row_h + gap) + axis_h
    parts = [f'<svg width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg">']
    for i, (name, _labels, values) in enumerate(rows):
        y = i * (row_h + gap)
        parts.append(
            f'<text x="{label_w - 8}" y="{y + row_h / 2 + 4}" text-anchor="end" class="lbl">'
            f"{html.escape(name)}</text>"
        )
        j = 0
        while j < n:
            v = values[j]
            k = j
            while k + 1 < n and values[k + 1] == v:
                k += 1
            if v is not None:
                m = mapping.get(str(int(v)), {})
                x0 = label_w + plot_w * j / n
                x1 = label_w + plot_w * (k + 1) / n
                fill = colour(m.get("color", "#8E8E8E"))
                parts.append(
                    f'<rect x="{x0:.1f}" y="{y}" width="{x1 - x0:.1f}" height="{row_h}" fill="{fill}" '
                    'fill-opacity="0.8"/>'
                )
                if x1 - x0 > 70:
                    parts.append(
                        f'<text x="{(x0 + x1) / 2:.1f}" y="{y + row_h / 2 + 4}" text-anchor="middle" '
                        f'class="in">{html.escape(m.get("text", f"{v:g}"))}</text>'
                    )
            j = k + 1
    y = len(rows) * (row_h + gap) + 13
    for f in (0, 0.25, 0.5, 0.75, 1):
        i = min(n - 1, round(f * (n - 1)))
        x = label_w + plot_w * f
        anchor = "start" if f == 0 else "end" if f == 1 else "middle"
        parts.append(f'<text x="{x:.1f}" y="{y}" text-anchor="{anchor}" class="ax">{clock(grid[i])}</text>')
    parts.append("</svg>")
    keys = "".join(
        f'<span><i style="background:{colour(m.get("color", ""))}"></i>{html.escape(m.get("text", v))}</span>'
        for v, m in sorted(mapping.items(), key=lambda kv: kv[1].get("index", 0))
    )
    return "".join(parts) + f'<div class="legend">{keys}</div>'


def bargauge_html(panel: dict, series: list) -> str:
    defaults = panel.get("fieldConfig", {}).get("defaults", {})
    unit, decimals = defaults.get("unit", ""), defaults.get("decimals")
    over = overrides_of(panel)
    top = max((s[2] for s in series), default=0) or 1
    rows = []
    for name, _labels, value in series:  # the query's own order (sort_desc)
        col, shown = over.get(name, (None, None))
        col = col or PALETTE[len(rows) % len(PALETTE)]
        rows.append(
            f'<div class="bar"><span class="n">{html.escape(shown or name)}</span>'
            f'<span class="track"><span style="width:{100 * value / top:.1f}%;background:{col}">'
            "</span></span>"
            f'<span class="val" style="color:{col}">{fmt_value(value, unit, decimals)}</span></div>'
        )
    return "".join(rows) or '<p class="dim">No data</p>'


def chart_data(panel: dict, grid: list[float], series: list) -> dict:
    defaults = panel.get("fieldConfig", {}).get("defaults", {})
    stacked = defaults.get("custom", {}).get("stacking", {}).get("mode") == "normal"
    opacity = defaults.get("custom", {}).get("fillOpacity", 85) / 100
    over = overrides_of(panel)
    order = list(over)
    if stacked:  # the overrides' order: computing at the bottom
        series = sorted(series, key=lambda s: order.index(s[0]) if s[0] in order else len(order))
    out, accum = [], [0.0] * len(grid)
    present = [any(s[2][i] is not None for s in series) for i in range(len(grid))]
    for i, (name, _labels, values) in enumerate(series):
        col, shown = over.get(name, (None, None))
        col = col or PALETTE[i % len(PALETTE)]
        if stacked:  # no stack where no series has a value yet (the first minute of a rate)
            accum = [a + (v or 0.0) for a, v in zip(accum, values, strict=True)]
            values = [a if has else None for a, has in zip(accum, present, strict=True)]
        out.append({"name": shown or name, "color": col, "fill": solid(col, opacity), "values": values})
    return {
        "unit": defaults.get("unit", ""),
        "min": defaults.get("min"),
        "max": defaults.get("max"),
        "stacked": stacked,
        "x": grid,
        "series": out,
    }


PAGE_CSS = """
body{background:#111217;color:#ccccdc;font:13px/1.35 Inter,Helvetica,Arial,sans-serif;margin:0;
 padding:14px 18px}
.banner{background:#3d2a00;border:1px solid #ff9830;color:#ffd59a;padding:10px 14px;border-radius:4px;
 font-size:14px;margin-bottom:10px}
h1{font-size:19px;font-weight:500;margin:6px 0 2px} .sub{color:#8e8e9e;margin:0 0 12px}
.grid{display:grid;grid-template-columns:repeat(24,1fr);gap:8px}
.panel{background:#181b1f;border:1px solid #2c3235;border-radius:3px;padding:6px 10px 8px;min-width:0}
.panel h2{font-size:13px;font-weight:500;margin:0 0 6px;color:#d8d9da}
.stat{text-align:center}.stat .t{font-size:12px;color:#d8d9da}.stat .v{font-size:34px;font-weight:500}
.stat.ok .v{color:#73BF69}.stat.bad .v{color:#F2495C}
.legend{display:flex;flex-wrap:wrap;gap:4px 14px;margin-top:4px;font-size:12px;color:#ccccdc}
.legend i{display:inline-block;width:14px;height:4px;margin-right:5px;vertical-align:middle;border-radius:1px}
svg .lbl{fill:#ccccdc;font-size:12px} svg .in{fill:#111;font-size:11px} svg .ax{fill:#8e8e9e;font-size:11px}
.bar{display:flex;align-items:center;gap:8px;margin:5px 0}.bar .n{width:90px;text-align:right}
.bar .track{flex:1;background:#22252b;height:18px}.bar .track span{display:block;height:18px}
.bar .val{width:70px;font-weight:500}
.dim{color:#8e8e9e}
.u-axis{color:#8e8e9e}
"""

PAGE_JS = """
(function(){
  const D = JSON.parse(document.getElementById('chart-data').textContent);
  function fmt(v, unit){
    if (v == null) return '';
    if (unit === 'percentunit') return (v*100).toFixed(0) + '%';
    if (unit === 'watt') return v.toFixed(0) + ' W';
    if (unit === 'celsius') return v.toFixed(0) + ' °C';
    if (unit === 'hertz') return (v/1e9).toFixed(2) + ' GHz';
    if (unit === 'Bps') { const k = ['B/s','kB/s','MB/s','GB/s']; let i = 0;
      while (Math.abs(v) >= 1000 && i < 3) { v /= 1000; i++; } return v.toFixed(0) + ' ' + k[i]; }
    return String(+v.toFixed(3));
  }
  for (const [id, p] of Object.entries(D)) {
    const el = document.getElementById(id);
    const series = [{}];
    const data = [p.x];
    // stacked: the top of the stack first, every lower one painted over it with an opaque fill
    const order = p.stacked ? p.series.map((_, i) => i).reverse() : p.series.map((_, i) => i);
    for (const i of order) {
      const s = p.series[i];
      series.push(p.stacked
        ? {label: s.name, stroke: s.fill, width: 0, fill: s.fill, points: {show: false}}
        : {label: s.name, stroke: s.color, width: 1.5, points: {show: false}});
      data.push(s.values);
    }
    const y = {auto: true};
    if (p.min != null || p.max != null) y.range = (u, lo, hi) =>
      [p.min != null ? p.min : Math.min(lo, 0), p.max != null ? p.max : hi * 1.05];
    else y.range = (u, lo, hi) => [Math.min(lo, 0), hi > 0 ? hi * 1.1 : 1];
    new uPlot({
      width: el.clientWidth, height: +el.dataset.h,
      legend: {show: false}, cursor: {show: false},
      scales: {x: {time: true}, y: y},
      axes: [
        {stroke: '#8e8e9e', grid: {stroke: '#2c3235', width: 1}, ticks: {stroke: '#2c3235'},
         values: (u, vals) => vals.map(t => new Date(t * 1000).toISOString().slice(11, 19))},
        {stroke: '#8e8e9e', grid: {stroke: '#2c3235', width: 1}, ticks: {stroke: '#2c3235'},
         size: 64, values: (u, vals) => vals.map(v => fmt(v, p.unit))},
      ],
      series: series,
    }, data, el);
    const keys = p.series.map(s => '<span><i style="background:' + s.color + '"></i>' +
      s.name.replace(/&/g,'&amp;').replace(/</g,'&lt;') + '</span>').join('');
    el.insertAdjacentHTML('afterend', '<div class="legend">' + keys + '</div>');
  }
})();
"""


def asset(name: str) -> str:
    return (REPO / "exporter" / "offline" / "report_assets" / name).read_text(encoding="utf-8")


def page(
    dashboard: dict, titles: list[str], api: PrometheusApi, node: str, start: float, end: float, step: float
) -> str:
    values = variables(dashboard, api, node, end - start, step)
    by_title = {p.get("title"): p for p in panels_of(dashboard)}
    blocks, charts = [], {}
    for title in titles:
        panel = by_title.get(title)
        if panel is None:
            raise KeyError(f"{dashboard['title']}: no panel titled {title!r}")
        grid, series = evaluate(panel, api, values, start, end, step)
        shown = html.escape(substitute(title, values))
        kind = panel["type"]
        span = panel.get("gridPos", {}).get("w", 24)
        if kind == "stat":
            blocks.append((span, f'<div class="panel">{stat_html(shown, series)}</div>'))
        elif kind == "state-timeline":
            blocks.append(
                (24, f'<div class="panel"><h2>{shown}</h2>{timeline_svg(panel, grid, series)}</div>')
            )
        elif kind == "bargauge":
            blocks.append((span, f'<div class="panel"><h2>{shown}</h2>{bargauge_html(panel, series)}</div>'))
        elif kind == "timeseries":
            cid = f"c{len(charts)}"
            charts[cid] = chart_data(panel, grid, series)
            height = 230 if span >= 12 else 200
            blocks.append(
                (span, f'<div class="panel"><h2>{shown}</h2><div id="{cid}" data-h="{height}"></div></div>')
            )
        else:
            raise ValueError(f"{title!r}: panel type {kind} is not drawn here")
    body = "".join(f'<div style="grid-column:span {min(24, span)}">{b}</div>' for span, b in blocks)
    shown_vars = ", ".join(
        f"${k} = {v}" for k, v in values.items() if not k.startswith("__") and k != "datasource"
    )
    sub = (
        f"{clock(start)} to {clock(end)} UTC ({(end - start) / 60:.0f} min, step {step:g} s); {shown_vars}; "
        f"$__rate_interval = {RATE_INTERVAL}. A selection of the dashboard's panels; "
        f"fleet: {', '.join(f'{n} {s}' for n, s in FLEET.items())} (2 simulated GPUs each)."
    )
    data = json.dumps(charts, separators=(",", ":"), allow_nan=False).replace("</", "<\\/")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(dashboard["title"])}</title>
<style>{asset("uPlot.min.css")}{PAGE_CSS}</style></head><body>
<div class="banner">{html.escape(BANNER)}</div>
<h1>{html.escape(dashboard["title"])}</h1><p class="sub">{html.escape(sub)}</p>
<div class="grid">{body}</div>
<script id="chart-data" type="application/json">{data}</script>
<script>{asset("uPlot.iife.min.js")}</script>
<script>{PAGE_JS}</script>
</body></html>
"""


def screenshot(html_path: Path, png: Path, height: int) -> None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if not browser:
        raise RuntimeError("no chromium on PATH")
    with tempfile.TemporaryDirectory(prefix="gbe-chromium-") as profile:
        subprocess.run(
            [
                browser,
                *HEADLESS_CHROMIUM,
                "--hide-scrollbars",
                f"--user-data-dir={profile}",
                f"--window-size=1400,{height}",
                f"--screenshot={png}",
                html_path.as_uri(),
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
    if shutil.which("pngquant"):
        subprocess.run(["pngquant", "--force", "--output", str(png), str(png)], check=False)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=240.0, help="how long the fleet runs first")
    parser.add_argument("--node", default="node-a", help="the node the node view shows")
    parser.add_argument("--step", type=float, default=2.0, help="query_range step, seconds")
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "img")
    parser.add_argument("--keep-html", type=Path, help="also keep the HTML pages in this folder")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="gbe-pictures-"))
    rules = workdir / "demo.rules.yml"
    rules.write_text(alerts.render(for_override=DEMO_FOR))
    html_dir = args.keep_html or workdir
    html_dir.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    with simulated_fleet(workdir, rules, FLEET, label="node") as (stack, _receiver):
        start = time.time()
        print(f"fleet running ({', '.join(FLEET)}); Prometheus on :{stack.prometheus_port}", flush=True)
        time.sleep(args.seconds)
        end = time.time()
        start = start + (end - start) % args.step  # a whole number of steps
        for file, (name, titles, height) in PICTURES.items():
            dashboard = json.loads((REPO / "dashboards" / file).read_text())
            text = page(dashboard, titles, stack.api, args.node, start, end, args.step)
            html_path = html_dir / f"dashboard-{name}.html"
            html_path.write_text(text, encoding="utf-8")
            png = args.out / f"dashboard-{name}.png"
            screenshot(html_path, png, height)
            if args.out.resolve() == picture_sources.IMG.resolve():
                picture_sources.record(png)  # docs/img/pictures.json: drawn from this dashboard JSON
            print(f"{png}: {png.stat().st_size // 1024} KiB (page {html_path})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
