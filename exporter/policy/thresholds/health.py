"""The exporter's own health (for the alert rules) and its behaviour under faults."""

from __future__ import annotations

from .registry import _t

# the exporter's own health, for the alert rules
COLLECT_STALE = _t(
    "exporter.stale_seconds",
    30.0,
    "seconds",
    "Thirty seconds without a successful collection at 1 s sampling: the exporter is stuck or NVML hangs.",
)
COLLECT_STALE_INTERVALS = _t(
    "exporter.stale_intervals",
    3.0,
    "count",
    "A source is stale once its last success is older than exporter.stale_seconds plus three of its own "
    "intervals: a source read every minute or hour is not stuck 30 s after its last read, and three missed "
    "rounds are not one slow one.",
)
COLLECT_ERROR_RATE = _t(
    "exporter.collect_errors_per_minute",
    1.0,
    "per_minute",
    "More than one collection error a minute (the one-time probes of unsupported calls aside) is a source "
    "failing again and again, not a hiccup.",
)

# the exporter's behaviour under faults: how a refused signal comes back, how long pod labels survive
SIGNAL_RETRY_INITIAL = _t(
    "nvml.signal_retry_initial_seconds",
    5.0,
    "seconds",
    "An NVML call refused for a reason other than a confirmed NotSupported/FunctionNotFound "
    "(NoPermission, InvalidArgument, a Python error) is retried after five seconds: a permission being "
    "fixed or a driver call recovering shows within a few collections, and one extra call is noise.",
)
SIGNAL_RETRY_MAX = _t(
    "nvml.signal_retry_max_seconds",
    60.0,
    "seconds",
    "The retry delay doubles up to one minute, the analysis window: a signal whose fault has cleared is "
    "back before a window has passed, and a signal that stays refused costs one call and one counted "
    "error a minute per GPU.",
)
SAMPLE_CARRY = _t(
    "nvml.sample_carry_seconds",
    10.0,
    "seconds",
    "A utilization or power value is carried over collections that brought no new driver sample (the "
    "buffer fills every 1/6-1 s, so a collection now and then finds none) for at most ten seconds; a "
    "buffer silent for longer is a frozen driver, and its last value is no longer reported as current.",
)
POD_LABEL_GRACE = _t(
    "kubelet.pod_label_grace_seconds",
    120.0,
    "seconds",
    "When the kubelet does not answer, the last pod assignment it gave is kept for two minutes: that "
    "outlasts a kubelet restart (10-60 s) and a few missed 10 s polls, so series keep their pod labels "
    "instead of churning. While the kubelet is down no new pod can start on the node, so a held "
    "assignment can only be wrong about a pod that ended, and only for this long.",
)
KUBELET_SOCKET_WATCH = _t(
    "kubelet.socket_watch_seconds",
    1.0,
    "seconds",
    "While the PodResources socket is missing its path is looked at every second (a stat, no RPC): pod "
    "labels come back within a second or two of the kubelet's return instead of at the next slow retry.",
)
KUBELET_SOCKET_RECOUNT = _t(
    "kubelet.missing_socket_recount_seconds",
    60.0,
    "seconds",
    "A missing socket is counted as a SocketNotFound error once a minute, not at every look: a node "
    "without a kubelet stays under the collection-error alert's rate of one a minute.",
)
RUNTIME_SPEC_BYTES = _t(
    "runtime.spec_max_bytes",
    1 << 20,
    "bytes",
    "A container runtime's bundle spec (config.json) is read only to this size: a real one is 10-60 KiB "
    "(its seccomp profile is most of it, a few hundred environment variables add tens of KiB); a bigger "
    "file is not a spec the runtime wrote and is skipped (counted), so one bad file costs a bounded read.",
)
RUNTIME_MAX_BUNDLES = _t(
    "runtime.max_bundles",
    4096.0,
    "count",
    "Bundles read at most per runtime directory and scan: a node runs up to a few hundred pods (110 by "
    "default) with a few containers each; past this the rest are skipped (counted) until the next scan.",
)
