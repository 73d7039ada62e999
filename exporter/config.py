"""One Settings object, built once from flags and environment variables, passed down."""

from __future__ import annotations

from dataclasses import dataclass

ENV_PREFIX = "GBE_"


class SettingsError(ValueError):
    """Settings that cannot work together; ``problems`` pairs each field with what is wrong with it, so
    the command line can name the flag or variable the value came from."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        super().__init__("; ".join(text for _, text in problems))
        self.problems = problems


@dataclass(frozen=True)
class Settings:
    listen_address: str = "0.0.0.0"
    port: int = 9400
    interval_s: float = 1.0
    window_s: float = 60.0
    collect_timeout_s: float = 5.0
    slow_interval_s: float = 10.0
    p2p_interval_s: float = 60.0
    lost_gpu_retry_s: float = 30.0
    nvml_retry_initial_s: float = 5.0
    nvml_retry_max_s: float = 300.0
    proc_root: str = "/proc"
    sys_root: str = "/sys"
    host_root: str = "/"
    shm_paths: tuple[str, ...] = ("/dev/shm",)
    pod_resources_socket: str = "/var/lib/kubelet/pod-resources/kubelet.sock"
    pod_resources_interval_s: float = 10.0
    simulate: str = ""
    sim_gpus: int = 8
    log_level: str = "info"
    detail: frozenset[str] = frozenset()  # --detail categories (exporter/detail.py)

    def __post_init__(self) -> None:
        problems: list[tuple[str, str]] = []
        if not 0 < self.port < 65536:
            problems.append(("port", f"port must be 1-65535, not {self.port}"))
        for name in ("interval_s", "window_s", "collect_timeout_s", "slow_interval_s", "p2p_interval_s"):
            if getattr(self, name) <= 0:
                problems.append((name, f"{name.removesuffix('_s').replace('_', '-')} must be positive"))
        if self.window_s < self.interval_s:
            problems.append(("window_s", "window must be at least one interval"))
        if self.sim_gpus < 1 or self.sim_gpus > 64:
            problems.append(("sim_gpus", "sim-gpus must be 1-64"))
        if problems:
            raise SettingsError(problems)
