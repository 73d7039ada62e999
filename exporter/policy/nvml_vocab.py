"""NVML's vocabulary, defined once: the enum values and bit masks of nvml.h that the source decodes, the
renderer labels, the detectors test and the simulator produces. Plain values only (no pynvml import):
older bindings lack some names, and the numbers are an ABI that never changes.
"""

from __future__ import annotations

# clock-event reason bits (nvml.h nvmlClocksEventReason*)
GPU_IDLE = 0x1
APPLICATIONS_CLOCKS_SETTING = 0x2
SW_POWER_CAP = 0x4
HW_SLOWDOWN = 0x8  # thermal or a power brake: thermal only when the GPU is hot
SYNC_BOOST = 0x10
SW_THERMAL = 0x20
HW_THERMAL = 0x40
HW_POWER_BRAKE = 0x80
DISPLAY_CLOCK_SETTING = 0x100

# clock-event reason bit -> label value of gpu_clock_event_active{reason}
CLOCK_REASONS: dict[int, str] = {
    GPU_IDLE: "gpu_idle",
    APPLICATIONS_CLOCKS_SETTING: "applications_clocks_setting",
    SW_POWER_CAP: "sw_power_cap",
    HW_SLOWDOWN: "hw_slowdown",
    SYNC_BOOST: "sync_boost",
    SW_THERMAL: "sw_thermal",
    HW_THERMAL: "hw_thermal",
    HW_POWER_BRAKE: "hw_power_brake",
    DISPLAY_CLOCK_SETTING: "display_clock_setting",
}
THERMAL_BITS = SW_THERMAL | HW_THERMAL
POWER_CAP_BITS = SW_POWER_CAP | HW_POWER_BRAKE

# field ids of the cumulative nanoseconds spent under a reason (NVML_FI_DEV_CLOCKS_EVENT_REASON_*) -> reason
FI_THROTTLE_NS: dict[int, str] = {
    74: "sw_power_cap",
    76: "sync_boost",
    269: "sw_thermal",
    270: "hw_thermal",
    271: "hw_power_brake",
}
# the reasons whose time the simulated driver counts, by their bit
THROTTLE_COUNTER_BITS: dict[str, int] = {
    "sw_power_cap": SW_POWER_CAP,
    "sw_thermal": SW_THERMAL,
    "hw_thermal": HW_THERMAL,
}

# nvmlGpuFabricState_t -> label value of gpu_fabric_state{state}
FABRIC_NOT_STARTED, FABRIC_IN_PROGRESS, FABRIC_COMPLETED = 1, 2, 3
FABRIC_STATES: dict[int, str] = {
    FABRIC_NOT_STARTED: "not_started",
    FABRIC_IN_PROGRESS: "in_progress",
    FABRIC_COMPLETED: "completed",
}

# nvmlNvLinkState / NVML_FI_DEV_NVLINK_GET_STATE values that count as up: ACTIVE, SLEEP (low power, usable)
NVLINK_STATE_UP = (1, 2)
