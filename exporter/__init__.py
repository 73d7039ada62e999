"""gpu-bottleneck-exporter: tells why GPUs on a Kubernetes node are not working."""

import os

# pyproject.toml's version, the one place a release names it (tests/test_release.py checks this copy)
__version__ = "0.2.0"

# gRPC's fork support restarts its poller thread in a forked child before exec, where closing the
# descriptors (subprocess's close_fds) takes its epoll descriptor away and the child aborts with
# "epoll_wait error: Bad file descriptor" (grpcio 1.80 and later, grpc/grpc#43055). This process never
# uses a gRPC channel across a fork, so the handlers buy nothing; set before anything imports grpc.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
