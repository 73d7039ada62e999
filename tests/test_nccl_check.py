"""``nccl-check``: the real command over saved logs of several shapes; its exit status and JSON."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.test_logparse import (
    ERROR_LINES,
    NCCL_220_IB_NVLS,
    NCCL_221_EFA_CUMEM_READ,
    NCCL_223_SHM,
    NO_IB,
    NODES_2,
)
from tests.timing import assert_within, pace, timed


def _run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "exporter", "nccl-check", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        input=stdin,
        env=dict(os.environ),
        timeout=60,
    )


def _reading_s(log: Path, tmp_path: Path) -> float:
    """The baseline of "about as long as reading the file": the command over a short log, plus a pass
    over this one's lines split at their blanks, both timed here and now."""
    short = tmp_path / "short.log"
    short.write_text("\n".join(NCCL_220_IB_NVLS) + "\n")

    def read() -> None:
        with log.open(encoding="utf-8") as f:
            for line in f:
                line.split()

    return pace(lambda: _run("--json", str(short)), repeat=2) + pace(read)


def test_a_good_job_passes_with_exit_0(tmp_path):
    log = tmp_path / "torchrun.log"
    log.write_text("\n".join(["[rank0]:" + line for line in NCCL_220_IB_NVLS]) + "\n")
    result = _run(str(log))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "NCCL 2.20.5, network IBext (GPUDirect RDMA)" in result.stdout
    marks = {line[:6] for line in result.stdout.splitlines() if line[:4] in ("PASS", "WARN", "FAIL")}
    assert marks == {"PASS  "}
    assert "result: " in result.stdout and "0 warnings, 0 failures" in result.stdout


def test_read_mode_warns_with_exit_1_and_json_is_the_documented_object(tmp_path):
    log = tmp_path / "pod.log.gz"  # a rotated CRI file of the kubelet, compressed
    records = [
        f"2024-05-01T10:00:{i:02d}.000000001Z stdout F {line}"
        for i, line in enumerate(NCCL_221_EFA_CUMEM_READ)
    ]
    log.write_bytes(gzip.compress(("\n".join(records) + "\n").encode()))
    result = _run("--json", str(log))
    assert result.returncode == 1, result.stderr
    out = json.loads(result.stdout)
    assert out["version"] == "2.21.5" and out["network"] == "AWS Libfabric"
    assert out["transports"] == {"intra": ["P2P/CUMEM/read"], "inter": ["NET/OFI"]}
    assert out["warnings"] == 0 and out["errors"] == {}
    warn = [c for c in out["checks"] if c["status"] == "warn"]
    assert [c["name"] for c in warn] == ["intra_node_transport"]
    assert "via P2P/CUMEM/read" in warn[0]["evidence"] and warn[0]["fix"]


def test_errors_fail_with_exit_2_across_several_files_and_stdin(tmp_path):
    first = tmp_path / "rank0.log"
    first.write_text("\n".join(NCCL_223_SHM) + "\n")
    result = _run(
        str(first), "-", stdin=ERROR_LINES["watchdog_timeout"] + "\n" + ERROR_LINES["ib_completion_error"]
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr == ""
    assert "FAIL  error_watchdog_timeout" in result.stdout
    assert "watchdog_timeout x1" in result.stdout and "NCCL WARN lines: 1" in result.stdout


def _items(stdout: str) -> dict[str, tuple[str, str, str]]:
    """The human checklist: item -> (mark, evidence, fix)."""
    items, last = {}, ""
    for line in stdout.splitlines():
        if line[:4] in ("PASS", "WARN", "FAIL"):
            mark, last, evidence = line[:4], line[6:29].strip(), line[29:]
            items[last] = (mark, evidence, "")
        elif line.strip().startswith("fix: ") and last:
            items[last] = (*items[last][:2], line.strip()[5:])
    return items


def test_a_two_node_job_on_sockets_fails_the_network_item(tmp_path):
    log = tmp_path / "rank0.log"  # torchrun's output of rank 0: no IB device in the pod, 2 nodes
    log.write_text("\n".join("[rank0]:" + line for line in [*NO_IB, NODES_2, "step 1"]) + "\n")
    result = _run(str(log))
    assert result.returncode == 2, result.stdout + result.stderr
    assert "network Socket; intra-node: none seen; inter-node: NET/Socket" in result.stdout
    mark, evidence, fix = _items(result.stdout)["network"]
    assert mark == "FAIL" and evidence.endswith("NCCL INFO Using network Socket")
    assert fix.startswith("the job spans 2 nodes; NCCL found no IB/EFA device ('NET/IB : No device found.')")
    for words in ("aws-ofi-nccl", "NCCL_IB_DISABLE", "NCCL_NET", "/dev/infiniband", "vpc.amazonaws.com/efa"):
        assert words in fix
    assert _items(result.stdout)["net_plugin"][0] == "FAIL"  # the plugin that did not load is why


def test_sockets_without_a_sign_of_several_nodes_warn_with_exit_1(tmp_path):
    log = tmp_path / "rank0.log"
    log.write_text("\n".join(NO_IB[2:4]) + "\n")  # "NET/IB : No device found." then NET/Socket only
    result = _run("--json", str(log))
    assert result.returncode == 1, result.stdout + result.stderr
    out = json.loads(result.stdout)
    assert out["network"] == "Socket" and out["transports"]["inter"] == []
    (network,) = [c for c in out["checks"] if c["name"] == "network"]
    assert network["status"] == "warn" and network["evidence"] == NO_IB[3]
    assert "single-node job can ignore" in network["fix"] and "aws-ofi-nccl" in network["fix"]


def test_nccl_out_of_memory_and_a_lost_peer_fail_with_their_fixes(tmp_path):
    log = tmp_path / "rank3.log"
    lines = [
        *NCCL_220_IB_NVLS,
        "gpu-node-1:4024:4024 [3] include/alloc.h:103 NCCL WARN Cuda failure 2 'out of memory'",
        "gpu-node-1:4024:4190 [3] misc/socket.cc:49 NCCL WARN Net : Connection closed by remote peer "
        "10.0.0.12<45678>",
        "gpu-node-1:4024:4102 [3] bootstrap.cc:93 NCCL WARN [Rem Allocator] Allocation failed (segment 0, "
        "fd 57)",
    ]
    log.write_text("\n".join(lines) + "\n")
    result = _run(str(log))
    assert result.returncode == 2, result.stdout + result.stderr
    items = _items(result.stdout)
    oom, peer, alloc = items["error_nccl_cuda_oom"], items["error_peer_closed"], items["error_rem_allocator"]
    assert oom[0] == peer[0] == alloc[0] == "FAIL"
    assert oom[1].endswith("NCCL WARN Cuda failure 2 'out of memory'") and "NCCL_BUFFSIZE" in oom[2]
    assert "Connection closed by remote peer 10.0.0.12<45678>" in peer[1]
    assert "other ranks' logs first" in peer[2] and "OOM killer" in peer[2]
    assert "[Rem Allocator]" in alloc[1] and "ulimit -l" in alloc[2] and "/dev/shm" in alloc[2]
    assert "job-ending errors: cuda_oom x1, peer_lost x2" in result.stdout
    assert "NCCL WARN lines: 3" in result.stdout


def test_binary_junk_and_a_huge_line_are_read_in_bounded_pieces(tmp_path):
    log = tmp_path / "junk.log"
    with log.open("wb") as f:
        f.write(os.urandom(1 << 16))
        f.write(b"x" * (3 << 20))  # 3 MiB without a newline
        f.write(b"\n" + "\n".join(NCCL_220_IB_NVLS).encode() + b"\n")
    result = _run("--json", str(log))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["version"] == "2.20.5"


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda p: p / "missing.log", "cannot read (No such file or directory)"),
        (lambda p: p, "cannot read (Is a directory)"),
        (lambda p: (p / "bad.gz").write_bytes(b"\x1f\x8b\x08garbage") and p / "bad.gz", "cannot read"),
        # a good gzip header, a corrupt body: zlib's own error, not a traceback
        (
            lambda p: (
                (p / "body.gz").write_bytes(gzip.compress(b"NCCL INFO x\n")[:10] + b"\xff" * 400)
                and p / "body.gz"
            ),
            "cannot read (corrupt gzip data: invalid block type)",
        ),
    ],
)
def test_unreadable_logs_are_one_line_and_exit_2(tmp_path, make, words):
    result = _run(str(make(tmp_path)))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu-bottleneck-exporter: ") and words in lines[0]
    assert result.stdout == ""


def test_lines_of_repeated_nccl_warn_up_to_the_line_bound_take_linear_time(tmp_path):
    """Each 1 MiB line (the bound a line is read in) of NCCL WARN text, plain and as CRI records, is one
    warning; the check takes about as long as reading the file."""
    line = ("NCCL WARN " * ((1 << 20) // 10))[: (1 << 20) - 1]
    stamp = "2026-01-01T00:00:00.000000000Z stdout"
    log = tmp_path / "warn.log"
    log.write_text(f"{line}\n{line}\n{stamp} P {line[: 16 << 10]}\n{stamp} F {line[: 16 << 10]}\n")
    result, took = timed(lambda: _run("--json", str(log)))
    assert_within(took, _reading_s(log, tmp_path), 5, "quadratic: minutes before the fix")
    assert result.returncode == 1, result.stderr  # warnings only: no failure is claimed
    assert json.loads(result.stdout)["warnings"] == 3


def test_endless_partial_records_are_joined_up_to_a_bound(tmp_path):
    """8 MiB of P records and an F: one line, its joined text bounded, read in about the time of reading."""
    stamp = "2026-01-01T00:00:00.000000000Z stdout"
    part = "NCCL WARN " * 1600  # 16,000 characters
    log = tmp_path / "partial.log"
    with log.open("w") as f:
        for _ in range(512):
            f.write(f"{stamp} P {part}\n")
        f.write(f"{stamp} F end\n")
    result, took = timed(lambda: _run("--json", str(log)))
    assert_within(took, _reading_s(log, tmp_path), 5, "8 MiB of partial records")
    assert json.loads(result.stdout)["warnings"] == 1, result.stderr
