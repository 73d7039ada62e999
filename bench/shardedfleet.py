"""A fleet through a sharded topology: Prometheus agents sharded by node, VictoriaMetrics as the global
store, vmalert as the global ruler; and, for comparison, one Prometheus holding the same nodes.

    python bench/shardedfleet.py                      # 300 nodes x 8 GPUs, 2 shards, 8 minutes
    python bench/shardedfleet.py --nodes 40 --gpus 2 --minutes 2

The fleet simulator (exporter/sim/fleet.py) serves every node's /metrics (its job's rank on node 17
starves); N Prometheus servers in agent mode scrape it every 15 s, each keeping the nodes that
``hashmod`` on ``node`` gives it, and remote-write into VictoriaMetrics, where vmalert evaluates the
shipped rule file (shipped `for`s and windows) every 15 s and writes the recorded series back. The
shards also remote-write the same samples into one plain Prometheus (its remote-write receiver on) that
evaluates the same rules itself: the single-server reference. Prints samples ingested per second, each
rule group's evaluation time (vmalert's own metrics; Prometheus' for the reference), every fleet and job
dashboard query's time against both (the query API, as Grafana calls it, best of three), memory, when
each of them first paged the straggler (GpuJobStraggler, `for` 5 minutes), the slowest scrape, and the
alerts firing at the end.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.request import urlopen

import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

if TYPE_CHECKING:
    from scripts.sharded import ShardedStack
    from scripts.stack import PrometheusApi

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def counters(text: str, name: str, where: str = "") -> dict[str, float]:
    """Every series of metric ``name`` in an exposition (labels text -> value), those whose labels
    contain ``where``."""
    out = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m and m.group(1) == name and where in (m.group(2) or ""):
            out[m.group(2) or ""] = float(m.group(3))
    return out


def scrape(port: int) -> str:
    with urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return r.read().decode()


def main() -> int:
    args = _arguments()
    if args.nodes < 1 or args.shards < 1 or not 1 <= args.gpus <= 64 or args.minutes <= 0:
        print(
            "shardedfleet: --nodes and --shards must be at least 1, --gpus 1-64, --minutes > 0",
            file=sys.stderr,
        )
        return 2
    figures = run(args)
    report(figures)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2, default=list))
    return 0


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=300)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--shards", type=int, default=2)
    # long enough for the straggler's page from both rulers: `for` 5 minutes after its evidence
    parser.add_argument("--minutes", type=float, default=8.0)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    return parser.parse_args()


def run(args: argparse.Namespace) -> dict[str, object]:
    """Start the fleet and the stack, watch them for ``--minutes``, then read every figure; everything
    started is stopped, whatever happens."""
    from devtools.artifacts import alerts
    from exporter.sim.fleet import Fleet, FleetServer, FleetSpec
    from scripts.sharded import NodeTarget, ShardedStack, shard_of
    from scripts.stack import PageReceiver, wait_http

    spec = FleetSpec(nodes=args.nodes, gpus=args.gpus, straggler=min(17, args.nodes))
    workdir = Path(tempfile.mkdtemp(prefix="bench-sharded-"))
    rules = workdir / "rules.yml"
    rules.write_text(alerts.render())  # the shipped rules: `for`, windows and all
    fleet = Fleet(spec)
    server = FleetServer(fleet, 0)
    receiver = PageReceiver()
    nodes = [
        NodeTarget(f"127.0.0.1:{server.port}", f"/nodes/{spec.node_name(i)}/metrics", spec.node_name(i))
        for i in range(1, spec.nodes + 1)
    ]
    stack = ShardedStack(
        workdir / "stack",
        rules,
        nodes,
        receiver.url,
        ksm=[(f"127.0.0.1:{server.port}", "/kube-state-metrics/metrics")],
        shards=args.shards,
        interval="15s",
        compare=True,
    )
    per_shard = [sum(shard_of(n.node, args.shards) == i for n in nodes) for i in range(args.shards)]
    figures: dict[str, object] = {
        "nodes": args.nodes,
        "gpus_per_node": args.gpus,
        "shards": args.shards,
        "nodes_per_shard": per_shard,
    }
    try:
        while not fleet.ready():
            time.sleep(0.5)
        wait_http(f"http://127.0.0.1:{server.port}/readyz")
        stack.start()
        procs = {name: psutil.Process(p.pid) for name, p in stack.procs.items()}
        started = time.monotonic()
        print(
            f"{args.nodes} nodes x {args.gpus} GPUs over {args.shards} shards ({per_shard} nodes), "
            f"every 15 s for {args.minutes:g} min ...",
            flush=True,
        )
        watch = _watch(stack, procs, args.minutes, started)
        elapsed = time.monotonic() - started
        figures["minutes"] = elapsed / 60
        assert watch.mark is not None
        seconds = time.monotonic() - watch.mark[0]
        vm_text, prom_text = scrape(stack.vm_port), scrape(stack.prometheus_port)
        figures.update(_ingestion(stack, watch.mark, seconds, vm_text, prom_text, args.shards))
        figures.update(_rule_groups(stack.metrics("vmalert"), prom_text))
        figures["straggler_paged_s"] = watch.paged
        # the slowest scrape of any node in the last minute, as the shards saw it
        figures["scrape_max_s"] = max(
            (float(r["value"][1]) for r in stack.api.query("max_over_time(scrape_duration_seconds[1m])")),
            default=float("nan"),
        )
        figures["rss_mib"] = {name: proc.memory_info().rss / 2**20 for name, proc in procs.items()}
        figures["peak_rss_mib"] = watch.peak
        figures["queries"] = _dashboard_queries(stack, spec.namespace, elapsed)
        figures["firing_vm"] = _firing(stack.api)
        figures["firing_prometheus"] = _firing(stack.prometheus)
    finally:
        stack.stop()
        server.close()
        fleet.close()
        receiver.close()
    return figures


@dataclass
class _Watch:
    """What watching the run gathered."""

    peak: dict[str, float]  # process -> its peak RSS, MiB
    paged: dict[str, float] = field(default_factory=dict)  # ruler -> seconds to its first straggler page
    mark: tuple[float, float, float] | None = None  # (t, VM rows, Prometheus samples) 2 minutes in


def _watch(stack: ShardedStack, procs: dict[str, psutil.Process], minutes: float, started: float) -> _Watch:
    """Every 5 s until ``minutes`` are over: peak RSS, the ingestion counters once 2 minutes in, each
    ruler's first straggler page; fails as soon as a process of the stack has exited."""
    watch = _Watch(dict.fromkeys(procs, 0.0))
    straggler = 'ALERTS{alertname="GpuJobStraggler", alertstate="firing"}'
    while time.monotonic() - started < minutes * 60:
        for name, proc in procs.items():
            watch.peak[name] = max(watch.peak[name], proc.memory_info().rss / 2**20)
        if watch.mark is None and time.monotonic() - started > min(120, minutes * 30):
            watch.mark = (
                time.monotonic(),
                sum(counters(scrape(stack.vm_port), "vm_rows_inserted_total").values()),
                sum(
                    counters(
                        scrape(stack.prometheus_port), "prometheus_tsdb_head_samples_appended_total"
                    ).values()
                ),
            )
        for where, api in (("vm", stack.api), ("prometheus", stack.prometheus)):
            if where not in watch.paged and api.query(straggler):
                watch.paged[where] = time.monotonic() - started
        problems = stack.alive()
        if problems:
            raise RuntimeError(f"exited: {problems}; see {stack.workdir / 'stack.log'}")
        time.sleep(5)
    return watch


def _ingestion(
    stack: ShardedStack,
    mark: tuple[float, float, float],
    seconds: float,
    vm_text: str,
    prom_text: str,
    shards: int,
) -> dict[str, object]:
    """Samples ingested per second since the mark, samples each shard sent, series held."""
    figures: dict[str, object] = {}
    figures["vm_rows_per_s"] = (sum(counters(vm_text, "vm_rows_inserted_total").values()) - mark[1]) / seconds
    figures["prometheus_samples_per_s"] = (
        sum(counters(prom_text, "prometheus_tsdb_head_samples_appended_total").values()) - mark[2]
    ) / seconds
    figures["shard_samples_sent"] = [
        sum(counters(stack.metrics(f"shard-{i}"), "prometheus_remote_storage_samples_total").values())
        / max(1, len(counters(stack.metrics(f"shard-{i}"), "prometheus_remote_storage_samples_total")))
        for i in range(shards)
    ]
    figures["vm_series"] = sum(
        counters(vm_text, "vm_cache_entries", 'type="storage/hour_metric_ids"').values()
    )
    figures["prometheus_head_series"] = sum(counters(prom_text, "prometheus_tsdb_head_series").values())
    return figures


def _rule_groups(vmalert_text: str, prom_text: str) -> dict[str, object]:
    """Each rule group's evaluation time: vmalert's mean and p99, the single Prometheus' last."""
    sums = counters(vmalert_text, "vmalert_iteration_duration_seconds_sum")
    counts = counters(vmalert_text, "vmalert_iteration_duration_seconds_count")
    group = re.compile(r'group="([^"]+)"')
    return {
        "vmalert_group_mean_s": {
            group.search(k).group(1): sums[k] / counts[k]  # type: ignore[union-attr]
            for k in sums
            if counts.get(k)
        },
        "vmalert_group_p99_s": {
            group.search(k).group(1): v  # type: ignore[union-attr]
            for k, v in counters(
                vmalert_text, "vmalert_iteration_duration_seconds", 'quantile="0.99"'
            ).items()
        },
        "prometheus_group_last_s": {
            re.sub(r"^.*;", "", group.search(k.replace("rule_group", "group")).group(1)): v  # type: ignore[union-attr]
            for k, v in counters(prom_text, "prometheus_rule_group_last_duration_seconds").items()
        },
    }


def _dashboard_queries(stack: ShardedStack, namespace: str, elapsed: float) -> dict[str, dict[str, float]]:
    """Every fleet and job dashboard query's time and series against both stores, as Grafana asks it."""
    from bench.fleet import RATE_INTERVAL, dashboard_queries, substitute, time_query

    values = {
        "node": ".*",
        "namespace": namespace,
        "pod": ".*",
        "gpu": ".*",
        "datasource": "",
        "__rate_interval": "60s",
        "__range": f"{int(elapsed)}s",
    }
    assert values["__rate_interval"] == RATE_INTERVAL
    queries: dict[str, dict[str, float]] = {}
    for path in ("dashboards/gpu-bottleneck-fleet.json", "dashboards/gpu-bottleneck-job.json"):
        board = Path(path).stem.removeprefix("gpu-bottleneck-")
        for title, expr, instant in dashboard_queries(path):
            row: dict[str, float] = {}
            for where, api in (("vm", stack.api), ("prometheus", stack.prometheus)):
                try:
                    ms, count = time_query(api, substitute(expr, values), instant, min(elapsed, 3600))
                    row[f"{where}_ms"], row[f"{where}_series"] = ms * 1000, count
                except RuntimeError as e:
                    row[f"{where}_ms"], row[f"{where}_series"] = float("nan"), -1
                    print(f"{where}: {title}: {str(e)[:200]}", file=sys.stderr)
            queries[f"{board}: {title}"] = row
    return queries


def _firing(api: PrometheusApi) -> list[tuple[str, str]]:
    """The alerts firing now, by name and node."""
    firing = 'ALERTS{alertstate="firing"}'
    return sorted({(a["metric"]["alertname"], a["metric"].get("node", "")) for a in api.query(firing)})


def report(f: dict) -> None:
    print(f"\nnodes per shard: {f['nodes_per_shard']}; run {f['minutes']:.1f} min")
    print(
        f"samples ingested per second: VictoriaMetrics {f['vm_rows_per_s']:.0f}, "
        f"single Prometheus {f['prometheus_samples_per_s']:.0f}"
    )
    print(
        f"series: VictoriaMetrics {f['vm_series']:.0f} active, single Prometheus "
        f"{f['prometheus_head_series']:.0f} in its head"
    )
    print(f"slowest scrape in the last minute: {f['scrape_max_s']:.2f} s")
    for where in ("vm", "prometheus"):
        t = f["straggler_paged_s"].get(where)
        print(f"GpuJobStraggler first paged ({where}):", f"{t:.0f} s after the start" if t else "not yet")
    print("\nRSS at the end / peak (MiB):")
    for name, rss in f["rss_mib"].items():
        print(f"  {name:24s} {rss:8.0f} {f['peak_rss_mib'][name]:8.0f}")
    print("\nrule group evaluation (ms): vmalert mean / p99, single Prometheus last:")
    for group in sorted(set(f["vmalert_group_mean_s"]) | set(f["prometheus_group_last_s"])):
        vm = f["vmalert_group_mean_s"].get(group, float("nan")) * 1000
        p99 = f["vmalert_group_p99_s"].get(group, float("nan")) * 1000
        prom = f["prometheus_group_last_s"].get(group, float("nan")) * 1000
        print(f"  {group:36s} {vm:8.1f} {p99:8.1f} {prom:8.1f}")
    print("\ndashboard queries (ms, series): VictoriaMetrics | single Prometheus")
    for name, q in f["queries"].items():
        print(
            f"  {name[:72]:72s} {q['vm_ms']:8.1f} {int(q['vm_series']):5d} | "
            f"{q['prometheus_ms']:8.1f} {int(q['prometheus_series']):5d}"
        )
    for where in ("vm", "prometheus"):
        firing = f[f"firing_{where}"]
        print(
            f"\nfiring at the end ({where}):",
            ", ".join(f"{a} ({n})" if n else a for a, n in firing) or "none",
        )


if __name__ == "__main__":
    sys.exit(main())
