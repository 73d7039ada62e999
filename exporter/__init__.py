"""gpu-bottleneck-exporter: tells why GPUs on a Kubernetes node are not working."""

# pyproject.toml's version, the one place a release names it (tests/test_release.py checks this copy)
__version__ = "0.1.0"
