"""One Settings object, built once from flags and environment variables, passed down."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from exporter.policy.cost import CURRENCY, Prices, parse_prices
from exporter.policy.cost import DEFAULT as DEFAULT_PRICES
from exporter.policy.thresholds import COST_CURRENCY

ENV_PREFIX = "GBE_"

DAY_S = 86400.0
# The seconds each duration setting accepts: (lowest, whether the lowest itself is allowed, highest, why).
# Non-finite values are never accepted (a nan interval used to start, then fail at shutdown).
DURATION_RANGES: dict[str, tuple[float, bool, float, str]] = {
    "interval_s": (0.05, True, 3600.0, "below 50 ms the NVML reads of a busy node take the whole period"),
    "window_s": (0.05, True, 3600.0, "an hour of samples per GPU is what the analysis can hold in memory"),
    "collect_timeout_s": (0.0, False, 600.0, "a collection still running after ten minutes is lost"),
    "slow_interval_s": (0.0, False, DAY_S, "slow state is still read at least once a day"),
    "p2p_interval_s": (0.0, False, DAY_S, "P2P status is still read at least once a day"),
    "lost_gpu_retry_s": (0.0, True, DAY_S, "a lost GPU is looked for again at least once a day"),
    "nvml_retry_initial_s": (0.0, True, DAY_S, "NVML is retried at least once a day"),
    "nvml_retry_max_s": (0.0, True, DAY_S, "NVML is retried at least once a day"),
    "pod_resources_interval_s": (0.0, False, DAY_S, "pod labels are refreshed at least once a day"),
}


def duration_problem(name: str, value: float) -> str | None:
    """What is wrong with a duration setting's value, or None."""
    low, low_allowed, high, why = DURATION_RANGES[name]
    shown = name.removesuffix("_s").replace("_", "-")
    if not math.isfinite(value):
        return f"{shown} must be a finite number of seconds, not {value}"
    if value < low or (value == low and not low_allowed) or value > high:
        lowest = f"at least {low:g}" if low_allowed else "more than 0" if low == 0 else f"more than {low:g}"
        return f"{shown} must be {lowest} and at most {high:g} seconds, not {value:g} ({why})"
    return None


class SettingsError(ValueError):
    """Settings that cannot work together; ``problems`` pairs each field with what is wrong with it, so
    the command line can name the flag or variable the value came from."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        super().__init__("; ".join(text for _, text in problems))
        self.problems = problems


@dataclass(frozen=True)
class Settings:
    listen_address: str = "0.0.0.0"
    port: int = 9612
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
    expected_gpus: int = 0  # the node doctor's GPU count; 0: the NVIDIA GPUs on the PCI bus
    pod_logs: str = ""  # the kubelet's pod log directory (/var/log/pods); empty: pod logs are not read
    log_patterns: str = ""  # a JSON file of extra progress patterns
    progress_api: bool = False  # accept POST /v1/progress
    process_owners: bool = True  # map GPU processes to their pods through the host's /proc (needs hostPID)
    web_config_file: str = ""  # TLS and basic auth (the exporter toolkit's web config); empty: plain HTTP
    progress_token_file: str = ""  # the bearer token POST /v1/progress needs; empty: the scrape rules apply
    progress_check_address: bool = False  # a push only from its pod's address (asks the Kubernetes API)
    detail: frozenset[str] = frozenset()  # --detail categories (exporter/policy/detail.py)
    price: str = ""  # --price MODEL=PRICE,... over the example prices (exporter/policy/cost.py)
    currency: str = COST_CURRENCY.value  # the prices' currency

    def __post_init__(self) -> None:
        problems: list[tuple[str, str]] = []
        if not 0 < self.port < 65536:
            problems.append(("port", f"port must be 1-65535, not {self.port}"))
        for name in ("interval_s", "window_s", "collect_timeout_s", "slow_interval_s", "p2p_interval_s"):
            if getattr(self, name) <= 0:
                problems.append((name, f"{name.removesuffix('_s').replace('_', '-')} must be positive"))
        for name in DURATION_RANGES:
            problem = duration_problem(name, getattr(self, name))
            if problem and not any(field == name for field, _ in problems):
                problems.append((name, problem))
        if self.progress_token_file and not self.progress_api:
            problems.append(("progress_token_file", "a push token without --progress-api on guards nothing"))
        if self.progress_check_address and not self.progress_api:
            problems.append(("progress_check_address", "checking senders needs --progress-api on"))
        if self.window_s < self.interval_s:
            problems.append(("window_s", "window must be at least one interval"))
        if self.sim_gpus < 1 or self.sim_gpus > 64:
            problems.append(("sim_gpus", "sim-gpus must be 1-64"))
        if not 0 <= self.expected_gpus <= 64:
            problems.append(("expected_gpus", "expected-gpus must be 0-64"))
        try:
            if self.price.strip():
                parse_prices(self.price)
        except ValueError as exc:
            problems.append(("price", str(exc)))
        if not CURRENCY.match(self.currency):
            problems.append(("currency", f"must be a three-letter currency code, not {self.currency[:16]!r}"))
        if problems:
            raise SettingsError(problems)

    @property
    def prices(self) -> Prices | None:
        """The price table the exporter exposes (None: pricing off)."""
        prices = parse_prices(self.price) if self.price.strip() else DEFAULT_PRICES
        return None if prices is None else replace(prices, currency=self.currency)
