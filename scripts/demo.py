"""The demo: a simulated 8 x H100 node touring the failure scenarios, watched by the exporter, a real
Prometheus with the alert rules and a real Alertmanager whose pages are printed here.

    python scripts/demo.py [--port 9400] [--exporter-only]

Without Prometheus and Alertmanager installed (scripts/install-tools.sh installs them as root) it runs
the exporter alone and says so. Ctrl-C stops everything.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from exporter.artifacts.dashboards import ledger_share
from exporter.sim.scenarios import SCENARIOS, TOUR, TOUR_SECONDS
from scripts.stack import (
    ALERTMANAGER,
    PROMETHEUS,
    REPO,
    Page,
    PageReceiver,
    Stack,
    Target,
    free_port,
    start_exporter,
    tool,
    wait_http,
)

RULES = REPO / "alerts" / "gpu-bottleneck-exporter.rules.yml"
COLOURS = {"critical": "\033[31m", "warning": "\033[33m", "info": "\033[36m", "resolved": "\033[32m"}


def _say(text: str) -> None:
    print(f"{time.strftime('%H:%M:%S')}  {text}", flush=True)


def show_page(page: Page) -> None:
    colour = COLOURS.get("resolved" if page.status == "resolved" else page.labels.get("severity", ""), "")
    reset = "\033[0m" if colour and sys.stdout.isatty() else ""
    colour = colour if sys.stdout.isatty() else ""
    state = "RESOLVED" if page.status == "resolved" else "FIRING  "
    _say(f"{colour}PAGE {state} {page.labels.get('severity', ''):8s} {page.labels.get('alertname')}{reset}")
    if page.status != "resolved":
        print(f"          {page.annotations.get('description', '')}")
        print(f"          runbook: {page.annotations.get('runbook_url', '')}", flush=True)


def narrate(started: float, stop: threading.Event) -> None:
    """Say what the simulated node is doing now, as the tour moves on."""
    boundaries, at = [], 0.0
    for name, seconds in TOUR:
        boundaries.append((at, name))
        at += seconds
    current = None
    while not stop.wait(1.0):
        elapsed = (time.monotonic() - started) % TOUR_SECONDS
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
    worst = [f"GPU {g} {state} {share:.0%}" for g, (share, state) in sorted(losing.items()) if share >= 0.2]
    return text + (f"  |  {'; '.join(worst)}" if worst else "")


def report_ledger(prom_port: int, stop: threading.Event) -> None:
    """Print the ledger every half-minute while the tour moves on."""
    while not stop.wait(LEDGER_EVERY_S):
        try:
            _say(ledger_report(prom_port))
        except (OSError, ValueError, KeyError) as exc:
            _say(f"ledger: Prometheus did not answer ({exc})")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--port", type=int, default=9400, help="exporter port")
    parser.add_argument("--exporter-only", action="store_true")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="gbe-demo-"))
    have_stack = not args.exporter_only and tool(PROMETHEUS) and tool(ALERTMANAGER)
    exporter = start_exporter(["--simulate", "tour"], args.port, log=workdir / "exporter.log")
    receiver = stack = None
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        wait_http(f"http://127.0.0.1:{args.port}/readyz", proc=exporter)
        started = time.monotonic()
        print(f"\nexporter:      http://localhost:{args.port}/metrics   (log: {workdir / 'exporter.log'})")
        if have_stack:
            receiver = PageReceiver(on_page=show_page)
            ports = {"prometheus_port": _prefer(9090), "alertmanager_port": _prefer(9093)}
            stack = Stack(
                workdir / "stack",
                RULES,
                [Target(args.port, {"node": NODE})],
                receiver.url,
                interval="5s",
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
            print("pages from Alertmanager are printed below as they arrive (the rules keep their real")
            print("`for` durations, so a page comes a few minutes into its scenario;")
            print(f"the tour takes {TOUR_SECONDS / 60:.0f} min)")
        else:
            print(
                "Prometheus/Alertmanager are not installed (scripts/install-tools.sh installs them as root):"
            )
            print("running the exporter alone. Watch gpu_bottleneck in /metrics.")
        print("Ctrl-C stops the demo.\n", flush=True)
        threading.Thread(target=narrate, args=(started, stop), daemon=True).start()
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
