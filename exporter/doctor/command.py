"""``gpu-bottleneck-exporter doctor``: run every check once, print the table (or JSON), exit 0/1/2 for
pass/warn/fail. On a node, in the DaemonSet's pod (``kubectl exec``), or over the simulator."""

from __future__ import annotations

import argparse
import logging
import socket
import sys
from collections.abc import Callable
from pathlib import Path

from exporter.config.settings import Settings
from exporter.doctor.facts import SIM_CLOCK, NodeFacts

# the serve flags the doctor reads: where the node's files are, the kubelet, the simulator
FIELDS = (
    "proc_root",
    "sys_root",
    "host_root",
    "pod_resources_socket",
    "simulate",
    "sim_gpus",
    "expected_gpus",
    "process_owners",
    "log_level",
)


def add_parser(sub: argparse._SubParsersAction, add_flags: Callable[[argparse.ArgumentParser], None]) -> None:
    """The ``doctor`` subcommand; ``add_flags`` adds the command line's flags for FIELDS."""
    parser = sub.add_parser(
        "doctor",
        help="check the node's GPU bring-up (driver, NVLink, fabric manager, P2P, EFA, pods' shm and NCCL "
        "variables, PCIe) and print pass/warn/fail with the fix; exit 0/1/2",
        description="Run the node checks once. Exit status: 0 all pass (or skipped), 1 a warning, 2 "
        "a failure (or a bad flag: one line on stderr). The second line names the NVML library loaded (or "
        "why none was); the last names the checks that failed or warned. A node with no NVIDIA device says "
        "so in one line; without NVML every check is skipped, but the driver's fails where the PCI bus has "
        "NVIDIA GPUs or --expected-gpus is given.",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    add_flags(parser)


def run(args: argparse.Namespace, settings: Settings) -> int:
    """``settings``: what the command line made of the flags and variables for FIELDS."""
    from exporter.doctor.checks import run_checks
    from exporter.doctor.render import as_json, exit_code, report, use_colour
    from exporter.sources import errors

    level = max(logging.WARNING, getattr(logging, settings.log_level.upper()))
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    errors_log = errors.log  # the error counter's logger
    saved = errors_log.level
    if level > logging.DEBUG:  # the table reports what the sources count as errors; no log line twice
        errors_log.setLevel(logging.ERROR)
    try:
        facts = diagnose(settings)
        results = run_checks(facts)
    finally:  # the command may run inside a longer process (tests, an embedding tool): leave it as found
        errors_log.setLevel(saved)
    node = socket.gethostname() + (f" (simulated: {settings.simulate})" if settings.simulate else "")
    if args.json:
        print(as_json(results, socket.gethostname(), settings.simulate, facts))
    else:
        print(report(facts, results, node, colour=use_colour(sys.stdout)))
    return exit_code(results)


def diagnose(settings: Settings) -> NodeFacts:
    """Gather every fact once, from the real node or a simulated one."""
    from exporter.doctor.gather import PodSources, gather

    expected = settings.expected_gpus or None
    if settings.simulate:
        from exporter.sim import SimulatedNode

        node = SimulatedNode(settings.simulate, n_gpus=settings.sim_gpus)
        try:
            host = node.host
            pods = PodSources(
                node.kubelet_socket if settings.pod_resources_socket else "",
                host.host_root,
                statvfs=host.statvfs,
            )
            return gather(
                node.install(),
                host.sys_root,
                host.proc_root,
                pods,
                expected_gpus=expected,
                clock=lambda: SIM_CLOCK,
                kmsg_path=str(Path(host.host_root, "dev/kmsg")),
                process_owners=settings.process_owners,
            )
        finally:
            node.close()
    from exporter.sources.nvml import real_nvml

    pods = PodSources(settings.pod_resources_socket, settings.host_root)
    return gather(
        real_nvml(),
        settings.sys_root,
        settings.proc_root,
        pods,
        expected_gpus=expected,
        kmsg_path=str(Path(settings.host_root, "dev/kmsg")),
        process_owners=settings.process_owners,
    )
