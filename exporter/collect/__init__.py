"""Collection: the poller (one daemon-thread call per due source, deadlines, the books), the NVML session,
the kubelet's answer held for its grace period, the job's own signals, and the sampler that runs a cycle,
hands its readings to the analysis and publishes the immutable snapshot."""
