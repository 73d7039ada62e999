"""The demo: a simulated 8 x H100 node touring failure scenarios, watched by the exporter, a real
Prometheus with the alert rules and a real Alertmanager whose pages are printed here.

    python scripts/demo.py [--port 9400] [--full] [--exporter-only]

By default a short tour (about eleven minutes) in which every phase pages: the demo's Prometheus loads
the shipped rules with every `for` shortened to 30 s (a demo-only copy; the shipped rules keep their
timings). ``--full`` tours every scenario with the shipped rules as they are (about fifty minutes).
Without Prometheus and Alertmanager installed (scripts/install-tools.sh installs them as root) it runs
the exporter alone and says so. Ctrl-C stops everything.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from devtools.artifacts import alerts
from devtools.artifacts.dashboards import ledger_share
from exporter.analysis.kinds import KINDS
from exporter.sim.scenarios import SCENARIOS, TOURS, tour_seconds
from scripts.stack import (
    ALERTMANAGER,
    PROMETHEUS,
    REPO,
    Notification,
    PageReceiver,
    Stack,
    Target,
    free_port,
    start_exporter,
    tool,
    wait_http,
)

RULES = REPO / "alerts" / "gpu-bottleneck-exporter.rules.yml"
DEMO_FOR = "30s"  # the short tour's `for` on every rule (a demo-only copy of the rules)
COLOURS = {"critical": "\033[31m", "warning": "\033[33m", "info": "\033[36m", "resolved": "\033[32m"}
# what each scenario should page: the verdict kind it shows (its alert comes from the registry)
SHOWS = {
    "data_starvation": "data_starvation",
    "data_starvation_all": "data_starvation",
    "offload_starvation": "data_starvation",
    "checkpoint_stall": "data_starvation",
    "comm_hang": "comm_hang",
    "comm_bound": "comm_bound",
    "thermal_throttle": "thermal_throttle",
    "power_cap": "power_throttle",
    "shm_exhaustion": "shm_exhaustion",
    "idle_allocated": "idle_allocated",
    "nvlink_down": "nvlink_degraded",
}
OUTPUT = threading.Lock()  # one writer at a time: pages, narration and the ledger never interleave


def _say(text: str, *more: str) -> None:
    with OUTPUT:
        print(f"{time.strftime('%H:%M:%S')}  {text}")
        for line in more:
            print(f"          {line}")
        sys.stdout.flush()


def _gpus(numbers: list[str]) -> str:
    ordered = sorted(set(numbers), key=lambda g: int(g) if g.isdigit() else 1 << 30)
    return ("GPU " if len(ordered) == 1 else "GPUs ") + ", ".join(ordered)


def show_notification(n: Notification) -> None:
    """One alert group (one alert on one node) as one block: which GPUs, which pods, why, what to do."""
    first = n.pages[0]
    resolved = n.status == "resolved"
    severity = first.labels.get("severity", "")
    colour = COLOURS.get("resolved" if resolved else severity, "") if sys.stdout.isatty() else ""
    reset = "\033[0m" if colour else ""
    node = first.labels.get("node") or first.labels.get("instance", "")
    gpus = [p.labels["gpu"] for p in n.pages if "gpu" in p.labels]
    pods = sorted({f"{p.labels['namespace']}/{p.labels['pod']}" for p in n.pages if "pod" in p.labels})
    causes = sorted({p.labels["cause"] for p in n.pages if p.labels.get("cause")})
    where = " ".join(
        part
        for part in (
            f"on {node}",
            _gpus(gpus) if gpus else "",
            f"(pod {', '.join(pods)})" if pods else "",
            f"cause {', '.join(causes)}" if causes else "",
        )
        if part
    )
    state = "RESOLVED" if resolved else "FIRING  "
    head = f"{colour}PAGE {state} {severity:8s} {first.labels.get('alertname')} {where}{reset}"
    if resolved:
        _say(head)
    else:
        _say(
            head, first.annotations.get("summary", ""), f"runbook: {first.annotations.get('runbook_url', '')}"
        )


def _mmss(seconds: float) -> str:
    return f"{int(seconds // 60):02d}:{int(seconds % 60):02d}"


def plan(tour: str, shortened: bool) -> list[str]:
    """The tour with its times and what each phase should page."""
    lines, at = [], 0.0
    for name, seconds in TOURS[tour]:
        kind = SHOWS.get(name)
        pages = f"  -> pages {KINDS[kind].alert}" if kind else ""
        lines.append(f"  {_mmss(at)}  {name:20s} {seconds:4.0f} s{pages}")
        at += seconds
    timing = f"every rule's `for` shortened to {DEMO_FOR} for the demo" if shortened else "the shipped `for`s"
    lines.append(f"  {_mmss(at)}  the tour starts over ({timing})")
    return lines


def narrate(tour: str, started: float, stop: threading.Event) -> None:
    """Say what the simulated node is doing now, as the tour moves on."""
    boundaries, at = [], 0.0
    for name, seconds in TOURS[tour]:
        boundaries.append((at, name))
        at += seconds
    current = None
    while not stop.wait(1.0):
        elapsed = (time.monotonic() - started) % tour_seconds(tour)
        name = [n for start, n in boundaries if start <= elapsed][-1]
        if name != current:
            current = name
            _say(f"the simulated node now: {name} ({SCENARIOS[name][0]})")


LEDGER_EVERY_S = 30.0
NODE = "sim-node-1"


def _query(prom_port: int, expr: str) -> list[dict]:
    url = f"http://127.0.0.1:{prom_port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.load(response)["data"]["result"]


def ledger_report(prom_port: int) -> str:
    """Where the node's GPU time went over the last minute, from the node dashboard's own queries."""
    selector = f'node="{NODE}"'
    node = _query(prom_port, ledger_share(selector).replace("$__rate_interval", "1m"))
    gpus = _query(prom_port, ledger_share(selector, "gpu").replace("$__rate_interval", "1m"))
    if not node:
        return "ledger: no data yet"
    shares = sorted(((float(r["value"][1]), r["metric"]["state"]) for r in node), reverse=True)
    text = "ledger, last minute: " + ", ".join(
        f"{state} {share:.0%}" for share, state in shares if share >= 0.01
    )
    losing: dict[str, tuple[float, str]] = {}
    for r in gpus:
        state, share = r["metric"]["state"], float(r["value"][1])
        if state not in ("computing", "free") and share > losing.get(r["metric"]["gpu"], (0.0, ""))[0]:
            losing[r["metric"]["gpu"]] = (share, state)
    alike: dict[tuple[str, str], list[str]] = {}  # GPUs losing the same share to the same state
    for gpu, (share, state) in losing.items():
        if share >= 0.2:
            alike.setdefault((state, f"{share:.0%}"), []).append(gpu)
    worst = [f"{_gpus(gpus)} {state} {share}" for (state, share), gpus in sorted(alike.items())]
    return text + (f"  |  {'; '.join(worst)}" if worst else "")


def report_ledger(prom_port: int, stop: threading.Event) -> None:
    """Print the ledger every half-minute while the tour moves on."""
    while not stop.wait(LEDGER_EVERY_S):
        try:
            _say(ledger_report(prom_port))
        except (OSError, ValueError, KeyError) as exc:
            _say(f"ledger: Prometheus did not answer ({exc})")


def show_doctor(scenario: str = "no_fabric_manager") -> None:
    """Before the tour: the node doctor's checklist of a node with one bring-up fault (seed 003's)."""
    print(f"the node doctor on a simulated node without a fabric manager (doctor --simulate {scenario}):\n")
    sys.stdout.flush()
    subprocess.run(
        [sys.executable, "-m", "exporter", "doctor", "--simulate", scenario], cwd=REPO, check=False
    )
    print("(the exporter runs the same checks live: gpu_node_check_failed, GpuNodeCheckFailed)\n", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--port", type=int, default=9400, help="exporter port")
    parser.add_argument("--full", action="store_true", help="every scenario, with the shipped alert timings")
    parser.add_argument("--exporter-only", action="store_true")
    args = parser.parse_args()
    tour = "tour" if args.full else "short_tour"
    workdir = Path(tempfile.mkdtemp(prefix="gbe-demo-"))
    have_stack = not args.exporter_only and tool(PROMETHEUS) and tool(ALERTMANAGER)
    rules = RULES
    if not args.full:
        rules = workdir / "demo.rules.yml"
        rules.write_text(alerts.render(for_override=DEMO_FOR))
    show_doctor()
    exporter = start_exporter(["--simulate", tour], args.port, log=workdir / "exporter.log")
    receiver = stack = None
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        wait_http(f"http://127.0.0.1:{args.port}/readyz", proc=exporter)
        started = time.monotonic()
        print(f"\nexporter:      http://localhost:{args.port}/metrics   (log: {workdir / 'exporter.log'})")
        if have_stack:
            receiver = PageReceiver(on_notification=show_notification)
            ports = {"prometheus_port": _prefer(9090), "alertmanager_port": _prefer(9093)}
            stack = Stack(
                workdir / "stack",
                rules,
                [Target(args.port, {"node": NODE})],
                receiver.url,
                interval="5s",
                group_by=("node", "alertname"),  # one page per alert per node, naming its GPUs
                **ports,
            )
            stack.start()
            print(f"prometheus:    http://localhost:{stack.prometheus_port}/alerts")
            print(f"alertmanager:  http://localhost:{stack.alertmanager_port}")
            print(
                f"grafana:       add http://localhost:{stack.prometheus_port} as a Prometheus data source, "
                "then import dashboards/*.json (docs/dashboards.md)"
            )
            print(
                "every 30 s a line says where the node's GPU time went (the node dashboard's ledger query);"
            )
            print("pages from Alertmanager are printed below as they arrive, one per alert and node.")
            print(f"\nthe plan ({tour_seconds(tour) / 60:.0f} min):")
            print("\n".join(plan(tour, shortened=not args.full)))
        else:
            print(
                "Prometheus/Alertmanager are not installed (scripts/install-tools.sh installs them as root):"
            )
            print("running the exporter alone. Watch gpu_bottleneck in /metrics.")
        print("Ctrl-C stops the demo.\n", flush=True)
        threading.Thread(target=narrate, args=(tour, started, stop), daemon=True).start()
        if stack:
            threading.Thread(target=report_ledger, args=(stack.prometheus_port, stop), daemon=True).start()
        while not stop.wait(1.0):
            if exporter.poll() is not None:
                _say(f"the exporter exited ({exporter.returncode}); see {workdir / 'exporter.log'}")
                return 1
    except KeyboardInterrupt:
        pass
    finally:
        stop.set()
        if stack:
            stack.stop()
        if receiver:
            receiver.close()
        exporter.terminate()
        exporter.wait(15)
        print("\nstopped.")
    return 0


def _prefer(port: int) -> int:
    import socket

    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return free_port()
    return port


if __name__ == "__main__":
    sys.exit(main())
