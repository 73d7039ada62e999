"""The real command serving a simulated node, for the HTTP and TLS fault tests: started as a user would,
its log kept in a file, stopped with SIGTERM."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from scripts.stack import free_port
from tests.conftest import REPO


class Command:
    def __init__(self, log: Path, *args: str, nofile: int | None = None, scheme: str = "http") -> None:
        self.port = free_port()
        self.url = f"{scheme}://127.0.0.1:{self.port}"
        self.log = log
        argv = [sys.executable, "-m", "exporter", "--simulate", "healthy", "--sim-gpus", "2"]
        argv += ["--interval", "0.5", "--listen-address", "127.0.0.1", "--port", str(self.port), *args]

        def limit() -> None:  # a small descriptor limit, so exhausting it takes a few hundred sockets
            if nofile is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

        with log.open("w") as out:
            self.proc = subprocess.Popen(
                argv,
                cwd=REPO,
                stdout=out,
                stderr=subprocess.STDOUT,
                preexec_fn=limit if nofile is not None else None,  # a plain start needs no fork hook
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )

    def wait_ready(self, get: Callable[[str], httpx.Response] | None = None, timeout: float = 30) -> None:
        get = get or (lambda url: httpx.get(url, timeout=2))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.text()
            try:
                if get(self.url + "/readyz").status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"never ready: {self.text()}")

    def text(self) -> str:
        return self.log.read_text()

    def fds(self) -> int:
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(5)
