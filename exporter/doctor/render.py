"""The doctor's output: a table for a terminal (colour only on a TTY) or JSON for automation."""

from __future__ import annotations

import json
import os
import shutil
import textwrap
from collections import Counter

from exporter.doctor.checks import CHECKS, NCCL_VARS
from exporter.doctor.facts import NodeFacts
from exporter.doctor.model import EXIT_CODES, Result, Status, worst
from exporter.policy import thresholds as th

COLOURS = {Status.PASS: "32", Status.WARN: "33", Status.FAIL: "31;1", Status.SKIPPED: "2"}
LABELS = {Status.PASS: "pass", Status.WARN: "WARN", Status.FAIL: "FAIL", Status.SKIPPED: "skipped"}
NAME_W, STATUS_W = 10, 8


def exit_code(results: list[Result]) -> int:
    return EXIT_CODES[worst(results)]


def use_colour(stream: object) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty()) and "NO_COLOR" not in os.environ and os.environ.get("TERM") != "dumb"


def no_nvidia_device(facts: NodeFacts) -> bool:
    """Nothing to check: the PCI bus lists no NVIDIA GPU, NVML finds none (or does not load), and nobody
    said the node has GPUs (--expected-gpus). An unreadable PCI bus is not taken for an empty one."""
    return not facts.nvml.usable and facts.host.pci_gpus == () and not facts.expected_gpus


def nvml_line(facts: NodeFacts) -> str:
    """Where NVML came from, or why there is none: the sentence above the table."""
    nvml = facts.nvml
    if nvml.usable:
        return f"NVML: {nvml.library or 'loaded'} (driver {nvml.driver_version or 'unknown'})"
    if nvml.library:  # loaded, but it lists no GPU (or the session broke)
        return f"NVML: {nvml.library}, but {_why(nvml.error)}"
    pci = facts.host.pci_gpus
    bus = f"; {len(pci)} NVIDIA GPU(s) on the PCI bus" if pci else ""
    return (
        f"NVML: not loaded ({_why(nvml.error)}){bus}: every check but the driver's needs it. In a pod, the "
        "chart's driver.platform says where the node keeps libnvidia-ml.so.1"
    )


def _said(facts: NodeFacts) -> str:
    why = _why(facts.nvml.error)
    return f"{facts.nvml.library}: {why}" if facts.nvml.library else why


def _why(error: str) -> str:
    return {
        "LibraryNotFound": "no libnvidia-ml.so.1 on the library path: no NVIDIA driver here",
        "BindingsNotInstalled": "nvidia-ml-py is not installed",
        "NoGpus": "it lists no GPU",
        "DriverNotLoaded": "the NVIDIA kernel module is not loaded",
        "FunctionNotFound": "it lacks NVML's entry points (not NVIDIA's library, or one too old)",
    }.get(error, error)


def report(facts: NodeFacts, results: list[Result], node: str, colour: bool = False) -> str:
    """What `doctor` prints: one line on a node with no NVIDIA device, else where NVML came from and the
    table."""
    if no_nvidia_device(facts):
        return (
            f"node doctor: {node}: no NVIDIA device on this node (the PCI bus lists no NVIDIA GPU; NVML: "
            f"{_said(facts)}); nothing to check: exit {exit_code(results)}"
        )
    head, rest = table(results, node, colour=colour).split("\n", 1)
    return f"{head}\n{nvml_line(facts)}\n{rest}"


def table(results: list[Result], node: str, colour: bool = False, width: int | None = None) -> str:
    width = width or max(60, min(shutil.get_terminal_size((110, 24)).columns, 160))
    indent = " " * (NAME_W + STATUS_W + 2)
    body = max(30, width - len(indent))
    lines = [f"node doctor: {node}", f"{'CHECK':<{NAME_W}} {'STATUS':<{STATUS_W}} EVIDENCE / FIX"]
    for r in results:
        label = LABELS[r.status]
        shown = f"\033[{COLOURS[r.status]}m{label:<{STATUS_W}}\033[0m" if colour else f"{label:<{STATUS_W}}"
        evidence = list(r.evidence) or [""]
        wrapped = [w for e in evidence for w in (textwrap.wrap(e, body, break_on_hyphens=False) or [""])]
        lines.append(f"{r.check:<{NAME_W}} {shown} {wrapped[0]}")
        lines += [indent + w for w in wrapped[1:]]
        if r.fix:
            lines += [indent + w for w in textwrap.wrap("fix: " + r.fix, body, break_on_hyphens=False)]
    lines.append(summary_line(results))
    return "\n".join(lines)


def summary_line(results: list[Result]) -> str:
    """The counts, the checks that failed or warned by name (automation logs only this line), the exit."""
    counts = Counter(r.status for r in results)
    parts = []
    for status in (Status.FAIL, Status.WARN, Status.PASS, Status.SKIPPED):
        named = (
            [r.check for r in results if r.status is status] if status in (Status.FAIL, Status.WARN) else []
        )
        parts.append(
            f"{counts[status]} {LABELS[status].lower()}" + (f" ({', '.join(named)})" if named else "")
        )
    return f"{', '.join(parts)}: exit {exit_code(results)}"


def as_json(results: list[Result], node: str, simulated: str = "", facts: NodeFacts | None = None) -> str:
    checks = []
    for r in results:
        entry = r.as_dict()
        entry["title"] = CHECKS[r.check].title
        entry["severity"] = th.DOCTOR_SEVERITY[r.check].value
        checks.append(entry)
    doc = {
        "node": node,
        "simulated": simulated or None,
        "status": worst(results).value,
        "exit_code": exit_code(results),
        "checks": checks,
        **(_nvml_json(facts) if facts is not None else {}),
        "nccl_variables": {name: {"does": does, "hurts": hurts} for name, (does, hurts) in NCCL_VARS.items()},
    }
    return json.dumps(doc, indent=2)


def _nvml_json(facts: NodeFacts) -> dict[str, object]:
    return {
        "nvml": {
            "library": facts.nvml.library or None,
            "error": facts.nvml.error or None,
            "driver_version": facts.nvml.driver_version or None,
        },
        "no_nvidia_device": no_nvidia_device(facts),
    }
