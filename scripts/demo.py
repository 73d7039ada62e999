"""The demo: a simulated 8 x H100 node touring failure scenarios, watched by the exporter, a real
Prometheus with the alert rules and a real Alertmanager whose pages are printed here.

    python scripts/demo.py [--port 9612] [--full] [--loop] [--exporter-only]

By default one short tour (about thirteen minutes) in which every fault phase pages its alert, then the
demo stops: the demo's Prometheus loads the shipped rules with the `for` of the alerts the tour pages
shortened to 30 s (a demo-only copy; every other rule, and the shipped file, keep their timings).
``--full`` tours every scenario with the shipped rules as they are (about fifty minutes). ``--loop``
starts the tour over until Ctrl-C. Without Prometheus and Alertmanager installed
(scripts/install-tools.sh demo installs them as root) it runs the exporter alone and says so. Ctrl-C stops
everything; the demo's files (in a temporary folder) are removed however it ends.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
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
from devtools.artifacts.ledger_queries import ledger_share
from exporter.analysis.kinds import KINDS
from exporter.policy.thresholds import ALERT_POLICIES
from exporter.sim.scenarios import SCENARIOS, TOURS, tour_seconds
from scripts.stack import (
    ALERTMANAGER,
    PROMETHEUS,
    REPO,
    Notification,
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
# the pages link the runbooks of this checkout, which open without the project's site being reachable
RUNBOOKS = (REPO / "docs" / "runbooks").as_uri() + "/"
DEMO_FOR_S = 30  # the short tour's `for` on the alerts it pages (a demo-only copy of the rules)
DEMO_FOR = f"{DEMO_FOR_S}s"
GROUP_WAIT_S = 5  # Alertmanager gathers the GPUs of one alert on one node this long into one page
COLOURS = {"critical": "\033[31m", "warning": "\033[33m", "info": "\033[36m", "resolved": "\033[32m"}
# what each scenario pages: the alert of the verdict it shows (from the registry); /dev/shm filling up
# pages GpuShmFull, which silences GpuShmNearlyFull (the verdict's alert) once the volume is full
PAGES = {
    "data_starvation": KINDS["data_starvation"].alert,
    "data_starvation_all": KINDS["data_starvation"].alert,
    "offload_starvation": KINDS["data_starvation"].alert,
    "checkpoint_stall": KINDS["data_starvation"].alert,
    "comm_hang": KINDS["comm_hang"].alert,
    "comm_bound": KINDS["comm_bound"].alert,
    "thermal_throttle": KINDS["thermal_throttle"].alert,
    "power_cap": KINDS["power_throttle"].alert,
    "shm_exhaustion": "GpuShmFull",
    "idle_allocated": KINDS["idle_allocated"].alert,
    "nvlink_down": KINDS["nvlink_degraded"].alert,
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


def _describe(pages: list[Page], state: str) -> str:
    """One line about some alerts of one group: the alert, its node, which GPUs, which pods, why."""
    first = pages[0]
    severity = first.labels.get("severity", "")
    colour = COLOURS.get("resolved" if state == "RESOLVED" else severity, "") if sys.stdout.isatty() else ""
    reset = "\033[0m" if colour else ""
    node = first.labels.get("node") or first.labels.get("instance", "")
    gpus = [p.labels["gpu"] for p in pages if "gpu" in p.labels]
    pods = sorted({f"{p.labels['namespace']}/{p.labels['pod']}" for p in pages if "pod" in p.labels})
    causes = sorted({p.labels["cause"] for p in pages if p.labels.get("cause")})
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
    return f"{colour}PAGE {state:8s} {severity:8s} {first.labels.get('alertname')} {where}{reset}"


class Pager:
    """What a pager makes of Alertmanager's notifications: one page per alert group (one alert on one
    node), opened when the group starts firing. Alertmanager notifies the group again whenever its
    alerts change; those updates say which GPUs joined or resolved, and are not new pages."""

    def __init__(self) -> None:
        self.open: dict[tuple, dict[frozenset, Page]] = {}  # group -> its firing alerts already shown
        self.lock = threading.Lock()

    def show(self, n: Notification) -> None:
        group = tuple(sorted(n.group_labels.items()))
        firing = {frozenset(p.labels.items()): p for p in n.pages if p.status != "resolved"}
        resolved = [p for p in n.pages if p.status == "resolved"]
        with self.lock:
            shown = self.open.get(group)
            if n.status == "resolved":
                self.open.pop(group, None)
            else:
                self.open[group] = {**(shown or {}), **firing}
                for page in resolved:
                    self.open[group].pop(frozenset(page.labels.items()), None)
        if shown is None and firing:
            first = next(iter(firing.values()))
            _say(
                _describe(list(firing.values()), "FIRING"),
                first.annotations.get("summary", ""),
                f"runbook: {first.annotations.get('runbook_url', '')}",
            )
            firing = {}
        joined = [p for key, p in firing.items() if key not in (shown or {})]
        if joined:
            _say(_describe(joined, "UPDATE") + "  (joins the page)")
        gone = [p for p in resolved if shown is None or frozenset(p.labels.items()) in shown]
        if gone:
            _say(_describe(gone, "RESOLVED"))


show_notification = Pager().show  # the demo's one pager


def _mmss(seconds: float) -> str:
    return f"{int(seconds // 60):02d}:{int(seconds % 60):02d}"


def plan(tour: str, shortened: bool, loop: bool = False) -> list[str]:
    """The tour with its times and what each phase should page."""
    lines, at = [], 0.0
    for name, seconds in TOURS[tour]:
        pages = f"  -> pages {PAGES[name]}" if name in PAGES else ""
        lines.append(f"  {_mmss(at)}  {name:20s} {seconds:4.0f} s{pages}")
        at += seconds
    timing = (
        f"those alerts' `for` shortened to {DEMO_FOR} for the demo, every other rule's as shipped"
        if shortened
        else "the shipped `for`s"
    )
    end = "the tour starts over (--loop: until Ctrl-C)" if loop else "the tour ends (--loop starts it over)"
    lines.append(f"  {_mmss(at)}  {end}; {timing}")
    return lines


def paged_alerts(tour: str) -> set[str]:
    """The alerts a tour's plan promises."""
    return {PAGES[name] for name, _ in TOURS[tour] if name in PAGES}


def demo_rules(tour: str, full: bool = False) -> str:
    """The demo's copy of the rules, its runbook links on this checkout's docs/runbooks/: on the short
    tour the `for` of the alerts the tour pages shortened to DEMO_FOR where the shipped one is longer,
    so that each pages within its phase; every other rule as shipped (every rule, on the full tour)."""
    if full:
        return alerts.render(runbook_base=RUNBOOKS)
    shortened = {a for a in paged_alerts(tour) if ALERT_POLICIES[a].for_.value > DEMO_FOR_S}
    return alerts.render(for_override=DEMO_FOR, shortened=shortened, runbook_base=RUNBOOKS)


def narrate(tour: str, started: float, stop: threading.Event, loop: bool = False) -> None:
    """Say what the simulated node is doing now, as the tour moves on."""
    boundaries, at = [], 0.0
    for name, seconds in TOURS[tour]:
        boundaries.append((at, name))
        at += seconds
    current = None
    while not stop.wait(1.0):
        elapsed = time.monotonic() - started
        if not loop and elapsed >= tour_seconds(tour):
            return  # one tour: the demo ends here, not the node's next phase
        elapsed %= tour_seconds(tour)
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
    """Before the tour: the node doctor's checklist of a node with one bring-up fault."""
    print(f"the node doctor on a simulated node without a fabric manager (doctor --simulate {scenario}):\n")
    sys.stdout.flush()
    subprocess.run(
        [sys.executable, "-m", "exporter", "doctor", "--simulate", scenario], cwd=REPO, check=False
    )
    print("(the exporter runs the same checks live: gpu_node_check_failed, GpuNodeCheckFailed)\n", flush=True)


class DemoError(Exception):
    """Something the demo needs failed: one line says what."""


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt  # SIGTERM stops the demo as Ctrl-C does


def _last_line(log: Path) -> str:
    try:
        lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return f": {lines[-1].strip()[:300]}" if lines else ""


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--port", type=int, default=9612, help="exporter port")
    parser.add_argument("--full", action="store_true", help="every scenario, with the shipped alert timings")
    parser.add_argument("--loop", action="store_true", help="start the tour over until Ctrl-C")
    parser.add_argument("--exporter-only", action="store_true")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, _interrupt)
    workdir = Path(tempfile.mkdtemp(prefix="gbe-demo-"))
    os.environ["TMPDIR"] = str(workdir)  # the demo's children (the simulated hosts) keep their files in it
    running = Running()
    try:
        return run(args, workdir, running)
    except KeyboardInterrupt:
        return 0
    except (DemoError, OSError, RuntimeError, subprocess.SubprocessError) as exc:
        _say(f"the demo stopped: {exc}")
        return 1
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C does not cut the clean-up short
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        running.stop()
        shutil.rmtree(workdir, ignore_errors=True)
        print("\nstopped.", flush=True)


class Running:
    """What the demo started, stopped in reverse order however the demo ends."""

    def __init__(self) -> None:
        self.stop_event = threading.Event()
        self.exporter: subprocess.Popen | None = None
        self.stack: Stack | None = None
        self.receiver: PageReceiver | None = None

    def stop(self) -> None:
        self.stop_event.set()
        if self.stack:
            self.stack.stop()
        if self.receiver:
            self.receiver.close()
        if self.exporter:
            self.exporter.terminate()
            try:
                self.exporter.wait(15)
            except subprocess.TimeoutExpired:
                self.exporter.kill()
                self.exporter.wait()


def run(args: argparse.Namespace, workdir: Path, running: Running) -> int:
    tour = "tour" if args.full else "short_tour"
    have_stack = not args.exporter_only and tool(PROMETHEUS) and tool(ALERTMANAGER)
    rules = workdir / "demo.rules.yml"
    rules.write_text(demo_rules(tour, full=args.full))
    show_doctor()
    log = workdir / "exporter.log"
    exporter = running.exporter = start_exporter(["--simulate", tour], args.port, log=log)
    stop = running.stop_event
    try:
        wait_http(f"http://127.0.0.1:{args.port}/readyz", proc=exporter)
    except (RuntimeError, TimeoutError) as exc:
        raise DemoError(f"the exporter did not start ({exc}){_last_line(log)}") from None
    started = time.monotonic()
    print(f"\nexporter:      http://localhost:{args.port}/metrics")
    stack = receiver = None
    if have_stack:
        receiver = running.receiver = PageReceiver(on_notification=show_notification)
        ports = {"prometheus_port": _prefer(9090), "alertmanager_port": _prefer(9093)}
        stack = running.stack = Stack(
            workdir / "stack",
            rules,
            [Target(args.port, {"node": NODE})],
            receiver.url,
            interval="5s",
            group_by=("node", "alertname"),  # one page per alert per node, naming its GPUs
            group_wait=f"{GROUP_WAIT_S}s",
            **ports,
        )
        stack.start()
        print(f"prometheus:    http://localhost:{stack.prometheus_port}/alerts")
        print(f"alertmanager:  http://localhost:{stack.alertmanager_port}")
        print(
            f"grafana:       add http://localhost:{stack.prometheus_port} as a Prometheus data source, "
            "then import dashboards/*.json (docs/dashboards.md)"
        )
        print("every 30 s a line says where the node's GPU time went (the node dashboard's ledger query);")
        print("pages from Alertmanager are printed below as they arrive, one per alert and node.")
        print(f"\nthe plan ({tour_seconds(tour) / 60:.0f} min):")
        print("\n".join(plan(tour, shortened=not args.full, loop=args.loop)))
    else:
        print(
            "Prometheus/Alertmanager are not installed (scripts/install-tools.sh demo installs them as root):"
        )
        print("running the exporter alone. Watch gpu_bottleneck in /metrics.")
    print("Ctrl-C stops the demo.\n", flush=True)
    threading.Thread(target=narrate, args=(tour, started, stop, args.loop), daemon=True).start()
    if stack:
        threading.Thread(target=report_ledger, args=(stack.prometheus_port, stop), daemon=True).start()
    end = started + tour_seconds(tour)
    while not stop.wait(1.0):
        if exporter.poll() is not None:
            raise DemoError(f"the exporter exited with status {exporter.returncode}{_last_line(log)}")
        if not args.loop and time.monotonic() >= end:
            stop.set()
            _say(tour_over(tour, receiver))
    return 0


def tour_over(tour: str, receiver: PageReceiver | None) -> str:
    """The last line of a tour: which of the promised alerts paged, and anything else that did."""
    if receiver is None:
        return "the tour is over."
    fired = {p.labels.get("alertname", "") for p in receiver.snapshot() if p.status == "firing"}
    promised = paged_alerts(tour)
    parts = [f"paged {len(fired & promised)} of the {len(promised)} alerts the plan promised"]
    if promised - fired:
        parts.append(f"not paged: {', '.join(sorted(promised - fired))}")
    if fired - promised:
        parts.append(f"also paged: {', '.join(sorted(fired - promised))}")
    return "the tour is over: " + "; ".join(parts) + "."


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
