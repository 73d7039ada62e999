"""Memory held for clients that ask for a large exposition and never read it.

    python bench/slow_readers.py                      # 200 clients, 64 GPUs with --detail all
    python bench/slow_readers.py --clients 50 --gpus 16

The exporter runs as its own process (the real command and server) on a simulated node. The clients
connect with a 1 KiB receive buffer, send ``GET /metrics`` and read nothing; a scraper in this process
scrapes once a second throughout. Printed: the exposition's size, the exporter's RSS before the clients
came, its peak while they stayed, and after they left, with the scrapes' worst latency and how many
failed. What an answer's unsent rest may cost is bounded by the server (``http.send_timeout_seconds``,
``http.max_stalled_connections``); before those bounds 200 such clients grew the process by 2.3 MB each
and the memory stayed after they left.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scripts.stack import free_port  # noqa: E402


@dataclass
class Result:
    exposition_bytes: int
    rss_before_mib: float
    rss_peak_mib: float
    rss_after_mib: float
    scrape_worst_s: float
    scrapes_failed: int
    clients_closed_by_server: int
    kernel_tcp_peak_mib: float  # the machine's TCP socket buffers at their peak, beyond the process's RSS


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def kernel_tcp_mib() -> float:
    """The TCP socket buffers the kernel holds, machine-wide (/proc/net/sockstat's "mem", in pages):
    what a client does not read may sit there too, charged to the container's cgroup, not its RSS."""
    with open("/proc/net/sockstat") as f:
        for line in f:
            if line.startswith("TCP:"):
                fields = line.split()
                return int(fields[fields.index("mem") + 1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    return 0.0


def start(gpus: int, port: int, log: Path) -> subprocess.Popen:
    argv = [sys.executable, "-m", "exporter", "--simulate", "healthy", "--sim-gpus", str(gpus)]
    argv += ["--detail", "all", "--interval", "1", "--listen-address", "127.0.0.1", "--port", str(port)]
    with log.open("w") as out:
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    proc.kill()
    raise RuntimeError(f"the exporter never became ready: {log.read_text()[-2000:]}")


def non_reader(port: int) -> socket.socket:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
    s.connect(("127.0.0.1", port))
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    return s


def closed_by_peer(s: socket.socket) -> bool:
    """Whether the server reset or closed this connection (what was sent to it is discarded)."""
    s.setblocking(False)
    try:
        while s.recv(1 << 16):
            pass
        return True  # an orderly close after the data
    except BlockingIOError:
        return False
    except OSError:
        return True


def run(clients: int = 200, gpus: int = 64, hold_s: float = 20.0, settle_s: float = 8.0) -> Result:
    port = free_port()
    log = Path(os.environ.get("TMPDIR", "/tmp")) / f"slow-readers-{port}.log"
    proc = start(gpus, port, log)
    url = f"http://127.0.0.1:{port}/metrics"
    worst, failed, stop = [0.0], [0], threading.Event()

    def scrape() -> None:
        with httpx.Client(timeout=10) as client:
            while not stop.is_set():
                began = time.monotonic()
                try:
                    ok = client.get(url).status_code == 200
                except httpx.HTTPError:
                    ok = False
                worst[0] = max(worst[0], time.monotonic() - began)
                failed[0] += not ok
                stop.wait(1.0)

    try:
        size = len(httpx.get(url, timeout=10).content)
        time.sleep(2)
        before = rss_mib(proc.pid)
        scraper = threading.Thread(target=scrape, daemon=True)
        scraper.start()
        socks = [non_reader(port) for _ in range(clients)]
        peak, kernel, until = before, 0.0, time.monotonic() + hold_s
        while time.monotonic() < until:
            peak, kernel = max(peak, rss_mib(proc.pid)), max(kernel, kernel_tcp_mib())
            time.sleep(0.2)
        closed = sum(closed_by_peer(s) for s in socks)
        for s in socks:
            s.close()
        time.sleep(settle_s)
        after = rss_mib(proc.pid)
        stop.set()
        scraper.join(15)
        return Result(size, before, peak, after, worst[0], failed[0], closed, kernel)
    finally:
        proc.terminate()
        proc.wait(15)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--gpus", type=int, default=64)
    parser.add_argument("--hold", type=float, default=20.0, help="seconds the clients stay")
    args = parser.parse_args()
    r = run(args.clients, args.gpus, args.hold)
    print(f"exposition            {r.exposition_bytes / 1e6:.2f} MB ({args.gpus} GPUs, --detail all)")
    print(f"RSS before            {r.rss_before_mib:.0f} MiB")
    grew = r.rss_peak_mib - r.rss_before_mib
    print(f"RSS peak, {args.clients} clients  {r.rss_peak_mib:.0f} MiB (+{grew:.0f})")
    print(f"RSS after they left   {r.rss_after_mib:.0f} MiB (+{r.rss_after_mib - r.rss_before_mib:.0f})")
    print(f"closed by the server  {r.clients_closed_by_server} of {args.clients}")
    print(f"kernel TCP buffers    {r.kernel_tcp_peak_mib:.0f} MiB at the peak (machine-wide)")
    print(f"scrapes               worst {r.scrape_worst_s * 1000:.0f} ms, {r.scrapes_failed} failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
