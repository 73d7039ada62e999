"""make demo-prometheus interrupted (Ctrl-C: SIGINT to the script): one line, no traceback, its children
stopped and nothing it wrote left behind, whichever phase it was in."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import pytest

from tests.conftest import REPO, default_signals, require_tool
from tests.timing import HANG_GUARD_S

# (phase, the stdout line the signal follows): writing the history; with Prometheus loaded, replaying
PHASES = {"writing": "demo: writing ", "replaying": "demo: $ gpu-bottleneck-exporter replay"}


@pytest.mark.parametrize("phase", PHASES)
def test_ctrl_c_is_one_line_and_leaves_nothing(tmp_path, phase):
    require_tool("prometheus"), require_tool("promtool")
    work = tmp_path / "tmp"
    work.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "scripts/demo_prometheus.py", "--days", "0.5", "--nodes", "1"],
        cwd=REPO,
        env={**os.environ, "TMPDIR": str(work)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_signals,  # Ctrl-C's default, however the suite was started
    )
    assert proc.stdout is not None and proc.stderr is not None
    err: list[str] = []
    reader = threading.Thread(target=lambda: err.extend(proc.stderr), daemon=True)  # type: ignore[arg-type]
    reader.start()
    try:
        for line in proc.stdout:
            if line.startswith(PHASES[phase]):
                break
        else:
            pytest.fail(f"the demo ended before {phase}: {''.join(err)[-2000:]}")
        proc.send_signal(signal.SIGINT)
        proc.stdout.read()
        assert proc.wait(HANG_GUARD_S) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(HANG_GUARD_S)
    text = "".join(err)
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text
    # before the signal: progress lines of its own (and the replay's); after it, one line
    said = [line for line in text.splitlines() if "interrupted" in line]
    assert len(said) == 1 and said[0].startswith("demo: interrupted; stopped and removed "), text
    assert text.splitlines()[-1] == said[0], text
    assert list(work.iterdir()) == [], "left behind: " + ", ".join(p.name for p in work.iterdir())
