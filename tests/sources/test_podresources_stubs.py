"""The committed gRPC stubs are what grpcio-tools generates from the vendored upstream proto."""

from __future__ import annotations

import shutil
import subprocess
import sys

from tests.conftest import REPO

PROTO = "exporter/sources/podresources/v1/api.proto"


def test_stubs_are_generated_from_the_proto(tmp_path):
    (tmp_path / PROTO).parent.mkdir(parents=True)
    shutil.copy(REPO / PROTO, tmp_path / PROTO)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            "-I",
            ".",
            "--python_out=.",
            "--grpc_python_out=.",
            PROTO,
        ],
        cwd=tmp_path,
        check=True,
    )
    for name in ("api_pb2.py", "api_pb2_grpc.py"):
        generated = (tmp_path / PROTO).with_name(name).read_text()
        assert generated == (REPO / PROTO).with_name(name).read_text(), f"run `make protos`: {name} is stale"


def test_the_service_speaks_the_kubelets_wire_names():
    from exporter.sources.podresources.v1 import api_pb2

    service = api_pb2.DESCRIPTOR.services_by_name["PodResourcesLister"]
    assert (
        service.full_name == "v1.PodResourcesLister"
    )  # the path the kubelet serves: /v1.PodResourcesLister/List
    assert {m.name for m in service.methods} == {"List", "GetAllocatableResources", "Get"}
