"""gpu-bottleneck-exporter: tells why GPUs on a Kubernetes node are not working."""

__version__ = "0.1.0"
