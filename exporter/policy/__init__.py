"""Policy, defined once: the threshold table (every number with its reason), the signal catalog, the detail
levels, NVML's vocabulary, prices and kube-state-metrics' label spelling. Imports nothing else of the
exporter; every stage above reads it."""
