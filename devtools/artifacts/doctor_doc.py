"""docs/doctor.md: the node checks, their details and fixes, generated from the check registry."""

from __future__ import annotations

from exporter.doctor.checks import CHECKS, NCCL_VARS
from exporter.doctor.model import COMMON_DETAILS
from exporter.policy import thresholds as th


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render() -> str:
    lines = [
        "# Node doctor",
        "",
        "<!-- generated from exporter/doctor/checks.py by `make artifacts`; do not edit -->",
        "",
        "`gpu-bottleneck-exporter doctor` runs these checks once and prints pass / warn / fail with the",
        "evidence and the fix (`--json` for automation). Exit status: 0 every check passes or is skipped,",
        "1 a check warns, 2 a check fails (or a flag is wrong: then one line on stderr and no table); the",
        "last line names the checks that failed or warned (`1 fail (driver), 0 warn, 0 pass, 12 skipped: "
        "exit 2`).",
        "Above the table a line names the NVML library it loaded (`NVML: /usr/lib/x86_64-linux-gnu/"
        "libnvidia-ml.so.550.90.07 (driver 550.90.07)`: in a pod, the file the chart's `driver.platform` "
        "preset or the NVIDIA runtime put there), or why none loaded. A node with no NVIDIA device (none on "
        "the PCI bus, no NVML, no `--expected-gpus`) gets one line saying so instead of the table, and "
        "exit 0; `--json` carries the same as `nvml` and `no_nvidia_device`.",
        f"The exporter runs the same checks live: the cheap ones every {th.DOCTOR_FAST_INTERVAL.value:g} s,",
        f"the P2P matrix and the pod checks every {th.DOCTOR_SLOW_INTERVAL.value:g} s, and exports "
        "`gpu_node_check_failed{check, severity}`",
        "and `gpu_node_check_info{check, status, detail}`;",
        "[GpuNodeCheckFailed](runbooks/GpuNodeCheckFailed.md) and",
        "[GpuNodeCheckWarning](runbooks/GpuNodeCheckWarning.md) page on them (a check of severity `info`,",
        "`sharing`, warns in the checklist and pages no one: it reports a setting). On a node without NVML",
        "every check is `skipped: no NVML`, except `driver`, which fails when the PCI bus has NVIDIA GPUs",
        "or `--expected-gpus` (`GBE_EXPECTED_GPUS`) says the node has GPUs: bring-up automation that runs",
        "`gpu-bottleneck-exporter doctor --expected-gpus 8` gets exit 2 from a node whose driver does not "
        "load.",
        "",
        "Run it on a node (`gpu-bottleneck-exporter doctor`) or in the DaemonSet's pod on that node:",
        "",
        "```sh",
        "POD=$(kubectl -n monitoring get pod -l app.kubernetes.io/name=gpu-bottleneck-exporter \\",
        "      --field-selector spec.nodeName=NODE -o name)",
        "kubectl -n monitoring exec $POD -- gpu-bottleneck-exporter doctor",
        "```",
        "",
        "Every detail word is also the `detail` label of `gpu_node_check_info`. Details every check may "
        "report: " + ", ".join(f"`{d}`" for d in COMMON_DETAILS) + ".",
        "",
        "| check | severity | looks at | detail | fix |",
        "|---|---|---|---|---|",
    ]
    for check in CHECKS.values():
        severity = th.DOCTOR_SEVERITY[check.name].value
        rows = [(d, check.fixes.get(d, "(skipped: nothing to judge)")) for d in check.details]
        for i, (detail, fix) in enumerate(rows):
            head = f"`{check.name}` | {severity} | {_cell(check.title)}" if i == 0 else " | | "
            lines.append(f"| {head} | `{detail}` | {_cell(fix)} |")
    lines += [
        "",
        "## NCCL variables the `nccl_env` check reads",
        "",
        "| variable | what it does | when it hurts |",
        "|---|---|---|",
        *(f"| `{name}` | {_cell(does)} | {_cell(hurts)} |" for name, (does, hurts) in NCCL_VARS.items()),
        "",
        "## Simulator scenarios",
        "",
        "Each failing condition is a scenario: `gpu-bottleneck-exporter doctor --simulate SCENARIO` shows",
        "the check fail, `--simulate SCENARIO` on `serve` shows it page. `no_fabric_manager`, `p2p_blocked`,",
        "`nvlink_link_down`, `shm_default`, `nccl_p2p_disabled`, `pcie_degraded`, `ecc_pending`,",
        "`missing_gpu`, `no_efa`, `persistence_off`; `gpu_lost` shows the lost GPU and its XID 79.",
        "",
    ]
    return "\n".join(lines)
