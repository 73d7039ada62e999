"""Prometheus at fleet scale: a real Prometheus scraping 100 simulated 8 x H100 nodes every 15 s with
every recording and alert rule loaded, against the exporter's default series.

    python bench/fleet.py                     # 100 nodes x 8 GPUs, 6 minutes
    python bench/fleet.py --nodes 40 --gpus 2 --minutes 3

The fleet simulator (exporter/sim/fleet.py) serves every node's /metrics from one process through the
exporter's renderer, with kube-state-metrics' kube_pod_labels for the job's pods; the job's rank on node
17 starves, its other pods wait for it. Prints, from Prometheus' own metrics and from outside: head
series, samples ingested per second, each rule group's evaluation time, each fleet and job dashboard
query's time (the query API, as Grafana calls it), Prometheus' RSS, and the alerts firing at the end.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

RATE_INTERVAL = "60s"  # Grafana's $__rate_interval at a 15 s scrape interval: four intervals
STEP = 15.0


def substitute(text: str, values: dict[str, str]) -> str:
    for name, value in sorted(values.items(), key=lambda kv: -len(kv[0])):
        text = text.replace(f"${{{name}}}", value).replace(f"${name}", value)
    return text


def dashboard_queries(path: str) -> list[tuple[str, str, bool]]:
    """(panel title / ref, expression, instant) of every target of a generated dashboard."""
    from devtools.artifacts.dashboard_checks import panels

    board = json.loads((REPO / path).read_text())
    out = []
    for panel in panels(board):
        for target in panel.get("targets", []):
            out.append((f"{panel['title']} / {target['refId']}", target["expr"], bool(target.get("instant"))))
    return out


def time_query(api, expr: str, instant: bool, seconds: float) -> tuple[float, int]:
    """Wall time of one query over the API (best of three) and the series it returned."""
    best, count = float("inf"), 0
    for _ in range(3):
        t0 = time.perf_counter()
        result = api.query(expr) if instant else api.query_range(expr, seconds=seconds, step=STEP)
        best = min(best, time.perf_counter() - t0)
        count = len(result)
    return best, count


def scalar(api, expr: str) -> float:
    result = api.query(expr)
    return float(result[0]["value"][1]) if result else float("nan")


def main() -> int:
    from devtools.artifacts import alerts
    from exporter.sim.fleet import Fleet, FleetServer, FleetSpec, scrape_configs
    from scripts.stack import PageReceiver, Stack, wait_http

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--minutes", type=float, default=6.0)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    spec = FleetSpec(nodes=args.nodes, gpus=args.gpus, straggler=min(17, args.nodes))
    workdir = Path(tempfile.mkdtemp(prefix="bench-fleet-"))
    rules = workdir / "rules.yml"
    rules.write_text(alerts.render())  # the shipped rules: `for`, windows and all
    fleet = Fleet(spec)
    server = FleetServer(fleet, 0)
    receiver = PageReceiver()
    stack = Stack(workdir / "stack", rules, [], receiver.url, interval="15s")
    itself = f"['127.0.0.1:{stack.prometheus_port}']"
    stack.scrape_configs = scrape_configs(spec, server.port) + (
        f"  - job_name: prometheus\n    static_configs:\n      - targets: {itself}\n"
    )
    figures: dict[str, object] = {"nodes": args.nodes, "gpus_per_node": args.gpus}
    try:
        while not fleet.ready():
            time.sleep(0.5)
        wait_http(f"http://127.0.0.1:{server.port}/readyz")
        stack.start()
        prom = psutil.Process(stack.procs[-1].pid)
        api = stack.api
        started = time.monotonic()
        print(
            f"{args.nodes} nodes x {args.gpus} GPUs scraped every 15 s for {args.minutes:g} min ...",
            flush=True,
        )
        peak_rss = 0.0
        while time.monotonic() - started < args.minutes * 60:
            peak_rss = max(peak_rss, prom.memory_info().rss / 2**20)
            time.sleep(5)
        elapsed = time.monotonic() - started
        figures["minutes"] = elapsed / 60
        figures["head_series"] = scalar(api, "prometheus_tsdb_head_series")
        figures["exporter_series"] = scalar(api, 'sum(scrape_samples_scraped{job="gpu-bottleneck-exporter"})')
        figures["samples_per_s"] = scalar(api, "rate(prometheus_tsdb_head_samples_appended_total[2m])")
        figures["rss_mib"] = prom.memory_info().rss / 2**20
        figures["peak_rss_mib"] = peak_rss
        groups = api.query("prometheus_rule_group_last_duration_seconds")
        figures["rule_groups_s"] = {
            re.sub(r"^.*;", "", g["metric"]["rule_group"]): float(g["value"][1]) for g in groups
        }
        figures["rule_groups_avg_s"] = {
            re.sub(r"^.*;", "", g["metric"]["rule_group"]): float(g["value"][1])
            for g in api.query("avg_over_time(prometheus_rule_group_last_duration_seconds[5m])")
        }
        rules = [r for g in api.call("rules")["groups"] for r in g["rules"]]  # type: ignore[index]
        figures["slowest_rules_ms"] = {
            r.get("name", ""): float(r.get("evaluationTime", 0)) * 1000
            for r in sorted(rules, key=lambda r: -float(r.get("evaluationTime", 0)))[:8]
        }
        recorded = api.query('count({__name__=~".+:.+:.+"})')
        figures["recorded_series"] = float(recorded[0]["value"][1]) if recorded else 0.0
        values = {
            "node": ".*",
            "namespace": spec.namespace,
            "pod": ".*",
            "gpu": ".*",
            "datasource": "",
            "__rate_interval": RATE_INTERVAL,
            "__range": f"{int(elapsed)}s",
        }
        queries: dict[str, dict[str, float]] = {}
        for path in ("dashboards/gpu-bottleneck-fleet.json", "dashboards/gpu-bottleneck-job.json"):
            board = Path(path).stem.removeprefix("gpu-bottleneck-")
            for title, expr, instant in dashboard_queries(path):
                seconds, count = time_query(api, substitute(expr, values), instant, min(elapsed, 3600))
                queries[f"{board}: {title}"] = {"ms": seconds * 1000, "series": count}
        figures["queries"] = queries
        figures["firing"] = sorted(
            {
                (a["metric"]["alertname"], a["metric"].get("node", ""))
                for a in api.query('ALERTS{alertstate="firing"}')
            }
        )
    finally:
        stack.stop()
        server.close()
        fleet.close()
        receiver.close()
    print()
    print(f"{'figure':52s} {'value':>12s}")
    for label, key in (
        ("series scraped from the exporters", "exporter_series"),
        ("Prometheus head series (recorded and its own too)", "head_series"),
        ("  of which recorded by the rules", "recorded_series"),
        ("samples ingested per second", "samples_per_s"),
        ("Prometheus RSS at the end (MiB)", "rss_mib"),
        ("Prometheus RSS peak, 5 s samples (MiB)", "peak_rss_mib"),
    ):
        print(f"{label:52s} {figures[key]:12.1f}")
    print("\nrule group evaluation time, last / 5-minute mean (ms):")
    for group, seconds in sorted(figures["rule_groups_s"].items()):  # type: ignore[union-attr]
        mean = figures["rule_groups_avg_s"].get(group, float("nan"))  # type: ignore[union-attr]
        print(f"  {group:48s} {seconds * 1000:8.1f} {mean * 1000:8.1f}")
    print("\nslowest rules, last evaluation (ms):")
    for name, ms in figures["slowest_rules_ms"].items():  # type: ignore[union-attr]
        print(f"  {name[:60]:60s} {ms:8.1f}")
    print(f"\ndashboard queries (best of 3; range queries over the run at a {STEP:g} s step):")
    for name, q in queries.items():
        print(f"  {name[:80]:80s} {q['ms']:8.1f} ms {int(q['series']):6d} series")
    print("\nfiring at the end:", ", ".join(f"{a} ({n})" if n else a for a, n in figures["firing"]) or "none")  # type: ignore[union-attr]
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2, default=list))
    return 0


if __name__ == "__main__":
    sys.exit(main())
