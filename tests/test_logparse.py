"""The log parser on real-shaped lines: CRI records, launchers' prefixes, NCCL 2.18-2.27 INFO/WARN
lines with each transport, the progress styles of HF Trainer, tqdm, Lightning, Megatron, DeepSpeed and
plain loops, and the errors that end jobs."""

from __future__ import annotations

import json
import os

import pytest

from exporter.podlogs import logparse as lp

H = "gpu-node-1:4021:4021 [0] NCCL INFO "
HW = "gpu-node-1:4021:4188 [0] NCCL WARN "

# one init of each NCCL version, as rank 0 prints it (hostnames and numbers made up, wording NCCL's)
NCCL_218_SOCKETS = [
    H + "Bootstrap : Using eth0:10.0.0.11<0>",
    H
    + "NET/Plugin : Plugin load (libnccl-net.so) returned 2 : libnccl-net.so: cannot open shared object file",
    H + "NET/Plugin : No plugin found, using internal implementation",
    H + "cudaDriverVersion 12020",
    "NCCL version 2.18.5+cuda12.2",
    H + "NET/IB : No device found.",
    H + "NET/Socket : Using [0]eth0:10.0.0.11<0>",
    H + "Using network Socket",
    H + "Channel 00/02 :    0   1   2   3   4   5   6   7   8   9  10  11  12  13  14  15",
    H + "Channel 00/0 : 0[0] -> 1[1] via P2P/IPC",
    H + "Channel 00/0 : 7[7] -> 8[0] [send] via NET/Socket/0",
    H + "Connected all rings",
]
NCCL_220_IB_NVLS = [
    H + "NCCL version 2.20.5+cuda12.4",
    H + "NET/Plugin: Loaded net plugin NCCL RDMA Plugin v8 (v8)",
    H + "NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [2]mlx5_2:1/IB [RO]; OOB eth0:10.0.0.11<0>",
    H + "Using network IBext_v8",
    H + "NVLS multicast support is available on dev 0",
    H + "Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM",
    H + "Channel 00/0 : 8[0] -> 0[0] [receive] via NET/IBext_v8/0/GDRDMA",
    H + "GPU Direct RDMA Enabled for GPU 0 / HCA 0 (distance 4 <= 4), read 1 mode Default",
    H + "Connected NVLS",
]
NCCL_221_EFA_CUMEM_READ = [
    H + "NCCL version 2.21.5+cuda12.4",
    H + "NET/OFI Initializing aws-ofi-nccl 1.9.1-aws",
    H + "NET/OFI Using Libfabric version 1.19",
    H + "NET/OFI Selected Provider is efa (found 4 nics)",
    H + "Using network AWS Libfabric",
    H + "Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
    H + "Channel 01/0 : 8[0] -> 0[0] [receive] via NET/AWS Libfabric/0/GDRDMA",
]
NCCL_223_SHM = [
    H + "NCCL version 2.23.4+cuda12.6",
    H + "Using network IB",
    H + "P2P is disabled between connected GPUs",
    H + "Channel 00/0 : 0[0] -> 1[1] via SHM/direct/direct",
    H + "Channel 00/0 : 4[4] -> 12[4] [send] via NET/IB/0",
]
NCCL_227_DIRECT = [
    H + "NCCL version 2.27.3+cuda12.9",
    H + "ncclCommInitRankConfig comm 0x55d0 rank 0 nranks 8 cudaDev 0 nvmlDev 0 busId 18000 - Init START",
    H + "Using network IB",
    H + "Channel 00/0 : 0[0] -> 1[0] via P2P/direct pointer",
    H + "Channel 01/0 : 0[0] -> 1[1] via P2P/IPC/read",
]


def _state(lines: list[str]) -> lp.LogState:
    s = lp.LogState()
    for line in lines:
        s.feed(line)
    return s


@pytest.mark.parametrize(
    ("lines", "version", "network", "intra", "inter", "gdr"),
    [
        (NCCL_218_SOCKETS, "2.18.5", "Socket", {"P2P/IPC"}, {"NET/Socket"}, False),
        (NCCL_220_IB_NVLS, "2.20.5", "IBext", {"P2P/CUMEM", "NVLS"}, {"NET/IB"}, True),
        (NCCL_221_EFA_CUMEM_READ, "2.21.5", "AWS Libfabric", {"P2P/CUMEM/read"}, {"NET/OFI"}, True),
        (NCCL_223_SHM, "2.23.4", "IB", {"SHM"}, {"NET/IB"}, False),
        (NCCL_227_DIRECT, "2.27.3", "IB", {"P2P/direct pointer", "P2P/IPC/read"}, set(), False),
    ],
)
def test_nccl_init_of_each_version(lines, version, network, intra, inter, gdr):
    s = _state(lines)
    assert (s.version, s.network, s.gdrdma) == (version, network, gdr)
    assert s.transports == {"intra": intra, "inter": inter}
    assert s.warnings == 0 and not s.errors


def test_launcher_prefixes_do_not_hide_lines():
    lines = [
        "[rank3]:" + H + "NCCL version 2.19.3+cuda12.3",
        "[1,3]<stdout>:" + H + "Channel 00/0 : 3[3] -> 4[4] via P2P/CUMEM/read",
        "[default3]:" + HW + "NET/Socket : No usable listening interface found",
        "2024-05-01T10:00:00.123456789Z " + H + "Using network Socket",
    ]
    s = _state(lines)
    assert s.version == "2.19.3" and s.network == "Socket"
    assert s.transports["intra"] == {"P2P/CUMEM/read"}
    assert s.warnings == 1 and s.bad["socket_interface"] == 1
    assert lp.strip_prefix(lines[2]).startswith("gpu-node-1:")


def test_labels_stay_in_their_vocabularies():
    s = _state(
        [
            H + "Using network MyFancyNet_v9 with extras",
            H + "Channel 00/0 : 0[0] -> 8[0] [send] via NET/MyFancyNet/0",
            H + "Channel 00/0 : 0[0] -> 1[1] via SOMETHING/new",
        ]
    )
    assert s.network == "Other" and s.network in lp.NETWORKS
    assert s.transports == {"intra": set(), "inter": {"NET/Other"}}
    for scope, names in s.transports.items():
        assert names <= set(lp.INTER if scope == "inter" else lp.INTRA)


ERROR_LINES = {
    "bus_error": "RuntimeError: DataLoader worker (pid 4242) is killed by signal: Bus error. It is possible "
    "that dataloader's workers are out of shared memory.",
    "dataloader_killed": "RuntimeError: DataLoader worker (pid(s) 4242, 4243) exited unexpectedly",
    "cuda_oom": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
    "capacity of 79.10 GiB of which 1.06 GiB is free.",
    "watchdog_timeout": "[rank3]:[E ProcessGroupNCCL.cpp:563] [Rank 3] Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum=4711, OpType=ALLREDUCE, NumelIn=1, Timeout(ms)=600000) ran for 600043 ms",
    "ib_completion_error": "gpu-node-2:51:88 [3] NCCL WARN NET/IB : Got completion from peer "
    "10.0.0.12<59736> with status=12 opcode=0 len=0 vendor err 129 (Recv) localGid ::ffff:10.0.0.11",
    "peer_lost": "gpu-node-1:4021:4190 [0] misc/socket.cc:49 NCCL WARN Net : Connection closed by remote "
    "peer 10.0.0.12<45678>",
    "dist_backend_error": "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, "
    "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.19.3",
}

# the other ways the same kinds are written: (line, checklist item, kind)
ERROR_SIGN_LINES = [
    # NCCL's own allocations fail: the kind the framework's OOM counts as, a fix of its own
    (
        "gpu-node-1:4021:4021 [0] misc/utils.cc:58 NCCL WARN Cuda failure 'out of memory'",
        "nccl_cuda_oom",
        "cuda_oom",
    ),
    (
        "[rank5]:gpu-node-1:4026:4026 [5] include/alloc.h:103 NCCL WARN Cuda failure 2 'out of memory'",
        "nccl_cuda_oom",
        "cuda_oom",
    ),
    ("Cuda failure 2 'out of memory'", "nccl_cuda_oom", "cuda_oom"),  # PyTorch's "Last error:" line
    (
        "gpu-node-1:4021:4190 [0] misc/socket.cc:588 NCCL WARN socketProgress: Connection closed by remote "
        "peer gpu-node-2.ml.svc.cluster.local<33412>",
        "peer_closed",
        "peer_lost",
    ),
    ("socketProgress: Connection closed by remote peer gpu-node-2<33412>", "peer_closed", "peer_lost"),
    (
        "gpu-node-1:4021:4102 [0] bootstrap.cc:93 NCCL WARN [Rem Allocator] Allocation failed (segment 0, "
        "fd 57)",
        "rem_allocator",
        "peer_lost",
    ),
]


@pytest.mark.parametrize("kind", list(ERROR_LINES))
def test_each_error_that_ends_a_job(kind):
    s = _state(["step 10", ERROR_LINES[kind], "ok"])
    assert dict(s.errors) == {kind: 1}
    assert kind in lp.ERROR_KINDS
    assert any(kind in kinds for kinds in lp.ERROR_FAMILIES.values())


def test_every_kind_has_a_line():
    assert set(ERROR_LINES) == set(lp.ERROR_KINDS)


@pytest.mark.parametrize(("line", "item", "kind"), ERROR_SIGN_LINES)
def test_nccl_oom_and_peer_loss_count_as_their_kind_with_their_own_item(line, item, kind):
    s = _state(["step 10", line])
    assert dict(s.errors) == {kind: 1} and dict(s.signs) == {item: 1}
    found = {c.name: c for c in lp.checks(s)}
    check = found[f"error_{item}"]
    assert check.status == "fail" and check.evidence == lp.strip_prefix(line) and check.fix
    assert f"error_{kind}" not in found or kind == item


def test_the_fixes_say_what_to_do():
    fix = {sign.item: sign.fix for sign in lp.ERROR_SIGNS}
    for words in ("NCCL_BUFFSIZE", "channels", "memory fraction", "smaller batch or more sharding"):
        assert words in fix["nccl_cuda_oom"]
    for words in ("other ranks' logs first", "OOM killer", "node", "NCCL_SOCKET_IFNAME"):
        assert words in fix["peer_closed"]
    for words in ("memory limit", "ulimit -l", "/dev/shm"):
        assert words in fix["rem_allocator"]


def test_a_dist_backend_error_and_its_last_error_count_once_each():
    s = _state(
        [
            "[rank0]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, remote "
            "process exited or there was a network error, NCCL version 2.21.5",
            "[rank0]: ncclRemoteError: A call failed possibly due to a network error or a remote process "
            "exiting prematurely.",
            "[rank0]: Last error:",
            "[rank0]: socketProgress: Connection closed by remote peer gpu-node-2<33412>",
        ]
    )
    assert s.errors == {"dist_backend_error": 1, "peer_lost": 1}


@pytest.mark.parametrize(
    "line",
    [
        "WARNING:urllib3.connectionpool:Retrying: Connection closed by remote peer",
        "gpu-node-1:4021:4021 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.11<0>",
        "RuntimeError: CUDA error: out of memory is not what this says",
    ],
)
def test_lookalikes_are_not_job_ending_nccl_errors(line):
    s = _state([line])
    assert not s.signs["peer_closed"] and not s.signs["nccl_cuda_oom"] and not s.network


def test_pytorch_bus_error_wording_and_older_ib_wording():
    s = _state(
        [
            "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared "
            "memory (shm).",
            HW + "NET/IB : Got completion with error 12, opcode 1, len 32697, vendor err 129",
        ]
    )
    assert s.errors == {"bus_error": 1, "ib_completion_error": 1}
    assert s.warnings == 1


def test_counting_off_reads_state_but_counts_nothing():
    s = lp.LogState()
    s.feed(HW + "Call to ibv_reg_mr failed", count=False)
    s.feed(ERROR_LINES["cuda_oom"], count=False)
    s.feed(H + "Channel 00/0 : 0[0] -> 1[1] via P2P/IPC", count=False)
    assert s.warnings == 0 and not s.errors and s.transports["intra"] == {"P2P/IPC"}


# ---- progress ---------------------------------------------------------------------------------------

PROGRESS = [
    # (line, pattern, step, seconds per step)
    (
        " iteration      100/  500000 | consumed samples:        51200 | elapsed time per iteration (ms): "
        "1234.5 | learning rate: 1.5E-04 | global batch size:   512 | lm loss: 6.12E+00 |",
        "megatron",
        100,
        1.2345,
    ),
    ("steps: 250 loss: 2.3104 iter time (s): 0.845 samples/sec: 151.4", "deepspeed", 250, 0.845),
    (
        "Epoch 3:  45%|████▌     | 450/1000 [02:10<02:39,  3.45it/s, v_num=0, train_loss=2.31]",
        "lightning",
        None,
        1 / 3.45,
    ),
    (" 12%|█▏        | 120/1000 [01:23<10:12,  1.44it/s]", "tqdm", 120, 1 / 1.44),
    (" 12%|█▏        | 121/1000 [01:25<10:12,  2.10s/it]", "tqdm", 121, 2.10),
    (
        "{'loss': 2.3456, 'grad_norm': 1.234, 'learning_rate': 4.9e-05, 'epoch': 0.12}",
        "hf_trainer",
        None,
        None,
    ),
    ("{'loss': nan, 'grad_norm': inf, 'learning_rate': 0.0, 'epoch': 1.5}", "hf_trainer", None, None),
    ("Epoch 2, step 1200: loss=1.92", "step", 1200, None),
    ("iter 57 | loss 3.1", "step", 57, None),
    ("global_step=88 lr=0.0001", "step", 88, None),
]


@pytest.mark.parametrize(("line", "name", "step", "seconds"), PROGRESS)
def test_progress_styles(line, name, step, seconds):
    found = lp.match_progress(line)
    assert found is not None and found.pattern == name
    assert found.step == step
    assert found.seconds == (pytest.approx(seconds) if seconds is not None else None)


@pytest.mark.parametrize(
    "line",
    [
        H + "Channel 00/0 : 0[0] -> 1[1] via P2P/IPC",
        "Downloading shards: 100%|██████████| 4/4",
        "loading checkpoint from /ckpt/step-1000",
        "",
    ],
)
def test_lines_that_are_not_progress(line):
    assert lp.match_progress(line) is None


def test_step_seconds_from_successive_steps_when_lines_do_not_say():
    s = lp.LogState()
    s.feed("step 10 loss 2.0", t=100.0)
    s.feed("some other line", t=105.0)
    s.feed("step 20 loss 1.9", t=120.0)
    assert (s.step, s.step_seconds, s.last_t) == (20, 2.0, 120.0)
    s.feed("step 20 again", t=130.0)  # the same step: no new time per step
    assert s.step_seconds == 2.0 and s.last_t == 130.0


def test_user_patterns_load_and_win():
    text = json.dumps(
        [
            {
                "name": "myloop",
                "regex": r"train it=(?P<n>\d+) took (?P<ms>[\d.]+)ms",
                "step": "n",
                "seconds": "ms",
                "seconds_unit": "ms",
            }
        ]
    )
    patterns = lp.load_patterns(text) + lp.PATTERNS
    found = lp.match_progress("train it=42 took 350.0ms step 7", patterns)
    assert found == lp.Progress("myloop", 42, 0.35)
    assert lp.load_patterns("") == () and lp.load_patterns("[]") == ()


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ('[{"regex": "(unclosed"}]', "bad regex"),
        ('[{"regex": "x(?P<a>1)", "step": "b"}]', "no group named 'b'"),
        ('[{"regex": "x", "seconds_unit": "minutes"}]', "seconds_unit"),
        ('[{"regex": "x", "colour": "red"}]', "unknown keys"),
        ('{"regex": "x"}', "must be a list"),
        ("[[1, 2]]", "needs a regex"),
        ("- regex: x", "not JSON"),
        ('[{"regex": "x(?P<n>1)", "step": false}]', "must be strings"),
    ],
)
def test_bad_user_patterns_name_the_problem(text, words):
    with pytest.raises(lp.PatternError, match=words.replace("(", r"\(")):
        lp.load_patterns(text)


# ---- CRI ----------------------------------------------------------------------------------------------


def test_cri_records_and_timestamps():
    r = lp.parse_cri("2024-05-01T10:00:00.123456789Z stdout F step 10")
    assert r == lp.CriLine(1714557600.123456789, "stdout", False, "step 10")
    assert lp.parse_cri("2024-05-01T12:00:00+02:00 stderr P half")
    assert lp.parse_cri("2024-05-01T12:00:00+02:00 stderr P half").t == 1714557600.0  # type: ignore[union-attr]
    assert lp.parse_cri("2024-05-01T10:00:00Z stdout F ") == lp.CriLine(1714557600.0, "stdout", False, "")
    assert lp.parse_cri("2024-05-01T10:00:00Z stdout F").text == ""  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "line",
    [
        "",
        "step 10",
        "2024-05-01T10:00:00Z stdin F x",
        "2024-05-01T10:00:00Z stdout X x",
        "2024-13-01T10:00:00Z stdout F x",
        "not-a-time stdout F x",
        "\x00\x01\x02\xff binary junk",
    ],
)
def test_cri_junk_is_refused(line):
    assert lp.parse_cri(line) is None


def test_partial_records_are_joined_and_junk_counted():
    s = lp.LogState()
    junk = s.feed_cri(
        [
            "2024-05-01T10:00:00Z stdout P " + H + "Channel 00/0 : 0[0] -> 1[1] ",
            "2024-05-01T10:00:00.5Z stdout F via P2P/CUMEM/read",
            "\x00\x00garbage",
            "2024-05-01T10:00:01Z stderr F step 3",
        ]
    )
    assert junk == 1
    assert s.transports["intra"] == {"P2P/CUMEM/read"}
    assert (s.step, s.last_t, s.lines) == (3, 1714557601.0, 2)


def test_plain_lines_unwrap_cri_and_keep_the_rest():
    got = list(
        lp.plain_lines(
            [
                "2024-05-01T10:00:00Z stdout P a",
                "2024-05-01T10:00:00Z stdout F b",
                "plain line",
                "2024-05-01T10:00:01Z stdout P dangling",
            ]
        )
    )
    assert got == [("ab", 1714557600.0), ("plain line", None), ("dangling", None)]


# ---- the checklist --------------------------------------------------------------------------------


def test_checklist_of_a_good_multi_node_job_passes():
    s = _state(NCCL_220_IB_NVLS)
    found = lp.checks(s)
    assert {c.status for c in found} == {"pass"}, found
    assert lp.exit_status(found) == 0
    assert {c.name for c in found} >= {"version", "network", "intra_node_transport", "gpudirect_rdma"}


def test_checklist_warns_on_read_mode_and_fails_on_sockets_between_nodes():
    found = {c.name: c for c in lp.checks(_state(NCCL_221_EFA_CUMEM_READ))}
    assert found["intra_node_transport"].status == "warn"
    assert "P2P/CUMEM/read" in found["intra_node_transport"].evidence
    assert "fabricmanager" in found["intra_node_transport"].fix
    assert lp.exit_status(list(found.values())) == 1
    sockets = {c.name: c for c in lp.checks(_state(NCCL_218_SOCKETS))}
    assert sockets["network"].status == "fail" and "Using network Socket" in sockets["network"].evidence
    assert sockets["net_plugin"].status == "fail"


def test_checklist_without_nccl_lines_fails_and_says_how_to_get_them():
    found = lp.checks(_state(["step 1", "step 2"]))
    assert (found[0].name, found[0].status) == ("nccl_debug", "fail")
    assert "NCCL_DEBUG=INFO" in found[0].fix


def test_summary_is_the_documented_object():
    s = _state([*NCCL_221_EFA_CUMEM_READ, ERROR_LINES["watchdog_timeout"]])
    out = lp.summary(s)
    assert out["version"] == "2.21.5" and out["network"] == "AWS Libfabric"
    assert out["transports"] == {"intra": ["P2P/CUMEM/read"], "inter": ["NET/OFI"]}
    assert out["warnings"] == 0 and out["errors"] == {"watchdog_timeout": 1}
    assert {"name", "status", "evidence", "fix"} == set(out["checks"][0])  # type: ignore[index]


def test_evidence_is_cut():
    s = _state([HW + "x" * 5000])
    assert len(s.evidence["warning"]) == lp.EVIDENCE_CHARS


# ---- the network item: TCP sockets are the first failure of a multi-node bring-up ----------------------

NO_IB = [
    H + "NET/Plugin : No plugin found (libnccl-net.so), using internal implementation",
    H + "NCCL version 2.21.5+cuda12.4",
    H + "NET/IB : No device found.",
    H + "NET/Socket : Using [0]eth0:10.0.0.11<0>",
    H + "Using network Socket",
]
NODES_2 = H + "comm 0x55d0c8a0 rank 0 nRanks 16 nNodes 2 localRanks 8 localRank 0 MNNVL 0"
NODES_1 = H + "comm 0x55d0c8a0 rank 0 nRanks 8 nNodes 1 localRanks 8 localRank 0 MNNVL 0"


def _network(s: lp.LogState) -> lp.Check:
    return next(c for c in lp.checks(s) if c.name == "network")


@pytest.mark.parametrize(
    "lines",
    [
        [*NO_IB, NODES_2],
        [NODES_2, *NO_IB],  # the order of the lines does not matter
        [*NO_IB, NODES_1, NODES_2],  # a tensor-parallel group inside the node, the data-parallel one across
        [*NO_IB, "gpu-node-2:3911:3911 [0] NCCL INFO Using network Socket"],  # two hosts' logs together
    ],
)
def test_sockets_between_nodes_fail_the_network_item(lines):
    s = _state(lines)
    assert s.network == "Socket" and s.no_ib
    assert s.transports["inter"] == {"NET/Socket"}  # the live metric the sockets alert reads
    check = _network(s)
    assert check.status == "fail"
    assert check.evidence == H + "Using network Socket"
    for words in (
        "NET/IB : No device found.",
        "TCP sockets",
        "aws-ofi-nccl",
        "NCCL_IB_DISABLE",
        "NCCL_NET",
        "/dev/infiniband",
        "vpc.amazonaws.com/efa",
    ):
        assert words in check.fix
    assert ("spans 2 nodes" in check.fix) == (s.nodes == 2)


def test_the_socket_network_alone_names_the_network():
    s = _state(NO_IB[:4])  # no "Using network" line: NET/Socket is the only network said
    assert s.network == "Socket" and s.evidence["network"] == NO_IB[3]
    check = _network(s)
    assert (
        check.status == "warn" and "single-node job can ignore" in check.fix and "aws-ofi-nccl" in check.fix
    )
    assert s.transports["inter"] == set()  # nothing shows traffic between nodes: no transport is made up


def test_a_later_network_line_wins_over_the_socket_fallback():
    s = _state([H + "NET/Socket : Using [0]eth0:10.0.0.11<0>", H + "Using network IB", NODES_2])
    assert s.network == "IB" and s.transports["inter"] == set()
    assert _network(s).status == "pass"


def test_sockets_on_one_node_pass_and_the_bootstrap_line_is_not_a_network():
    s = _state([*NO_IB, NODES_1])
    assert (_network(s).status, s.transports["inter"]) == ("pass", set())
    s = _state([H + "Bootstrap : Using eth0:10.0.0.11<0>", H + "NCCL version 2.21.5+cuda12.4"])
    assert s.network == "" and all(c.name != "network" for c in lp.checks(s))


def test_hosts_are_bounded():
    s = _state(
        [f"gpu-node-{i}:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC" for i in range(100)]
    )
    assert len(s.hosts) == lp.HOSTS_KEPT


# ---- what a pod runs, and an inference server's load -------------------------------------------------

# each server's periodic load line, worded as its source prints it (numbers made up)
VLLM_V0 = (
    "INFO 11-27 01:02:03 metrics.py:351] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: "
    "212.4 tokens/s, Running: 3 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 4.1%, CPU KV "
    "cache usage: 0.0%."
)
VLLM_V0_SWAPPED = VLLM_V0.replace("Swapped: 0", "Swapped: 2").replace("Pending: 0", "Pending: 5")
VLLM_V1 = (
    "INFO 11-27 01:02:03 [loggers.py:116] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation "
    "throughput: 212.4 tokens/s, Running: 3 reqs, Waiting: 0 reqs, GPU KV cache usage: 4.1%, Prefix cache "
    "hit rate: 0.0%"
)
# V1 as an API server process prints it, KV usage not measured yet
VLLM_V1_API = (
    "(APIServer pid=460954) INFO 12-18 06:01:05 [loggers.py:123] Engine 001: Avg prompt throughput: 812.0 "
    "tokens/s, Avg generation throughput: 0.0 tokens/s, Running: 0 reqs, Waiting: 12 reqs, GPU KV cache "
    "usage: n/a, Prefix cache hit rate: n/a"
)
SGLANG_DECODE_OLD = (
    "[2024-11-27 01:02:03 TP0] Decode batch. #running-req: 3, #token: 1234, token usage: 0.05, "
    "gen throughput (token/s): 210.5, #queue-req: 0"
)
SGLANG_DECODE = (
    "[2025-07-27 08:54:43 DP1 TP0] Decode batch [4020], #running-req: 8, #token: 9216, token usage: 0.11, "
    "cuda graph: True, gen throughput (token/s): 301.2, #queue-req: 4, "
)
SGLANG_PREFILL = (
    "[2025-07-27 08:54:43 TP0] Prefill batch, #new-seq: 1, #new-token: 6, #cached-token: 0, token usage: "
    "0.00, #running-req: 2, #queue-req: 7, "
)


@pytest.mark.parametrize(
    ("line", "load", "evidence"),
    [
        (VLLM_V0, lp.ServerLoad(3, 0), "vLLM engine stats"),
        (VLLM_V0_SWAPPED, lp.ServerLoad(3, 7), "vLLM engine stats"),  # swapped requests wait too
        (VLLM_V1, lp.ServerLoad(3, 0), "vLLM engine stats"),
        (VLLM_V1_API, lp.ServerLoad(0, 12), "vLLM engine stats"),
        (SGLANG_DECODE_OLD, lp.ServerLoad(3, 0), "SGLang batch stats"),
        (SGLANG_DECODE, lp.ServerLoad(8, 4), "SGLang batch stats"),
        (SGLANG_PREFILL, lp.ServerLoad(2, 7), "SGLang batch stats"),
    ],
)
def test_the_load_lines_of_inference_servers(line, load, evidence):
    assert lp.server_load(line) == load
    assert lp.workload_hint(line) == lp.WorkloadHint("serving", evidence)
    assert lp.server_load("[rank0]: " + line) == load  # behind a launcher's prefix as well


@pytest.mark.parametrize(
    ("line", "kind", "evidence"),
    [
        (
            "INFO 04-30 17:52:43 [api_server.py:1090] Starting vLLM API server on http://0.0.0.0:8000",
            "serving",
            "vLLM API server start-up",
        ),
        (
            "(APIServer pid=460954) INFO 12-18 06:01:05 [api_server.py:1945] Starting vLLM API server 0 on "
            "http://0.0.0.0:8080",
            "serving",
            "vLLM API server start-up",
        ),
        (
            "INFO 06-01 10:00:00 api_server.py:219] vLLM API server version 0.4.2",
            "serving",
            "vLLM API server start-up",
        ),
        ("[2026-03-11 13:53:33] The server is fired up and ready to roll!", "serving", "SGLang server ready"),
        (
            "2023-04-28T17:06:15.281755Z  INFO text_generation_launcher: Starting Webserver",
            "serving",
            "TGI launcher or router",
        ),
        (
            "2024-09-23T12:10:56.485234Z  INFO text_generation_router::server: router/src/server.rs:2477: "
            "Connected",
            "serving",
            "TGI launcher or router",
        ),
        (  # --json-output
            '{"timestamp":"2024-09-23T12:10:56.485234Z","level":"INFO","fields":{"message":"Connected"},'
            '"target":"text_generation_router::server","filename":"router/src/server.rs","line_number":2477}',
            "serving",
            "TGI launcher or router",
        ),
        (  # coloured, as on a terminal
            "\x1b[2m2024-04-18T22:43:58.111453Z\x1b[0m \x1b[32m INFO\x1b[0m \x1b[1mshard-manager\x1b[0m: "
            "\x1b[2mtext_generation_launcher\x1b[0m\x1b[2m:\x1b[0m Waiting for shard to be ready...",
            "serving",
            "TGI launcher or router",
        ),
        (
            "I1002 21:58:57.891440 62 grpc_server.cc:3914] Started GRPCInferenceService at 0.0.0.0:8001",
            "serving",
            "Triton server start-up",
        ),
        (
            "I1002 21:58:57.893177 62 http_server.cc:2717] Started HTTPService at 0.0.0.0:8000",
            "serving",
            "Triton server start-up",
        ),
        (
            'INFO:     10.0.0.7:51234 - "POST /v1/completions HTTP/1.1" 200 OK',
            "serving",
            "inference API requests",
        ),
        (
            'INFO:     10.0.0.7:51234 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
            "serving",
            "inference API requests",
        ),
        (
            '[2026-07-27 08:54:44] INFO:     127.0.0.1:58310 - "POST /generate HTTP/1.1" 200 OK',
            "serving",
            "inference API requests",
        ),
        (
            "[I 2024-08-02 09:49:50.063 ServerApp] Kernel started: 1acc847a-7cca-40d6-87ab-cbb78fe00e79",
            "interactive",
            "Jupyter kernel started",
        ),
        (
            "[I 2024-07-31 16:28:49.302 ServerApp] Package jupyter_lsp took 0.0114s to import",
            "interactive",
            "Jupyter server",
        ),
        (
            "[I 10:00:00.123 NotebookApp] Serving notebooks from local directory: /home/jovyan",
            "interactive",
            "Jupyter server",
        ),
        (
            "[I 2023-09-12 12:00:00.000 SingleUserNotebookApp mixins:557] Starting jupyterhub single-user "
            "server",
            "interactive",
            "Jupyter server",
        ),
        (
            "Processed prompts:  45%|####5     | 450/1000 [00:10<00:12, 44.10it/s, est. speed input: 9.1 "
            "toks/s]",
            "batch",
            "vLLM offline batch",
        ),
    ],
)
def test_the_lines_that_say_what_a_pod_runs(line, kind, evidence):
    assert lp.match_workload(line) == (lp.WorkloadHint(kind, evidence), None)


@pytest.mark.parametrize(
    "line",
    [
        "***** Running training *****",  # HF Trainer's banner
        "step 120 | Running: 3 reqs, Waiting: 0 reqs | loss 2.31",  # a loop's own words, no server's
        VLLM_V0[: VLLM_V0.index("Swapped") + 3],  # cut before its numbers: not a load line
        VLLM_V1[: VLLM_V1.index("Waiting") + 4],
        SGLANG_DECODE_OLD[: SGLANG_DECODE_OLD.index("#queue-req")],
        # SGLang's flush refusal names the same counters, but no batch
        "Cache not flushed because there are pending requests. #queue-req: 2, #running-req: 3",
        'INFO:     10.0.0.7:51234 - "GET /v1/models HTTP/1.1" 200 OK',  # a probe, not inference
        "Kernel was started by the driver",
    ],
)
def test_lines_that_say_nothing_of_the_workload(line):
    assert lp.match_workload(line) is None


# the lines bench/podlogs.py writes: a training pod's every line must stop at the workload prefilter
BENCH_LINES = [
    "n1:403:403 [3] NCCL INFO Channel 00/0 : 3[3] -> 4[4] via P2P/CUMEM",
    "{'loss': 2.4999, 'grad_norm': 1.02, 'learning_rate': 4.9e-05, 'epoch': 0.12}",
    " 12%|#         | 1233/1000000 [01:23<10:12,  9.44it/s]",
    "rank 3 step 1234 | loss 2.49877 | tokens/s 41230 | mem 61.2 GiB",
    " iteration      100/  500000 | consumed samples: 51200 | elapsed time per iteration (ms): 812.3 |",
]


def test_the_prefilter_stops_training_lines():
    assert [line for line in BENCH_LINES if lp._WORKLOAD_KEYS.search(line)] == []


def test_every_entry_is_reached_through_its_keys():
    """An entry's regex must never match a line without one of its keys: the prefilter would hide it."""
    for entry in lp.WORKLOAD_LINES:
        assert entry.keys and all(lp._WORKLOAD_KEYS.search(k) for k in entry.keys)
    assert {e.hint.kind for e in lp.WORKLOAD_LINES} <= set(lp.WORKLOAD_KINDS) == set(lp.WORKLOAD_RANK)


def test_log_state_keeps_the_newest_load_with_its_time():
    s = lp.LogState()
    s.feed(VLLM_V1, t=100.0)
    s.feed('INFO:     10.0.0.7:51234 - "POST /v1/completions HTTP/1.1" 200 OK', t=101.0)
    s.feed(VLLM_V1_API, t=110.0)
    s.feed("INFO 11-27 01:02:13 [logger.py:43] Received request cmpl-1", t=111.0)
    assert (s.load, s.load_t, s.load_line) == (lp.ServerLoad(0, 12), 110.0, 3)
    assert s.workload == lp.WorkloadHint("serving", "vLLM engine stats")  # the first of the serving lines
    s.feed(VLLM_V1[: VLLM_V1.index("Waiting")], t=120.0)  # a cut line changes nothing
    assert (s.load, s.load_t) == (lp.ServerLoad(0, 12), 110.0)


def test_serving_and_notebooks_outrank_training_signs_and_the_first_of_equals_stays():
    s = lp.LogState()
    for shards in range(1, 4):  # three lines: a class from a log needs workload.log_lines of them
        s.feed(f"Loading safetensors checkpoint shards: {shards}/4 [00:02<00:00,  1.52it/s]", t=1.0)
    assert s.workload == lp.WorkloadHint("training", "progress lines (tqdm)")
    s.feed(H + "NCCL version 2.21.5+cuda12.4", t=2.0)  # tensor parallel: NCCL is no proof of training
    assert s.workload == lp.WorkloadHint("training", "progress lines (tqdm)")
    s.feed("INFO 04-30 17:52:43 [api_server.py:1090] Starting vLLM API server on http://0.0.0.0:8000", t=3.0)
    assert s.workload == lp.WorkloadHint("training", "progress lines (tqdm)")  # one line is not enough
    s.feed(REQUEST_LINE, t=3.1)
    s.feed(REQUEST_LINE, t=3.2)
    assert s.workload == lp.WorkloadHint("serving", "vLLM API server start-up")  # the first of the three
    for _ in range(3):
        s.feed("[I 2024-08-02 09:49:50.063 ServerApp] Kernel started: 1acc847a", t=4.0)
    s.feed("step 7 loss 2.1", t=5.0)
    assert s.workload == lp.WorkloadHint("serving", "vLLM API server start-up")
    s.feed(SGLANG_DECODE, t=6.0)  # settled: hints stay, load lines still count
    assert (s.workload.evidence, s.load, s.load_t) == ("vLLM API server start-up", lp.ServerLoad(8, 4), 6.0)


def test_nccl_init_is_one_line_of_training_and_the_steps_after_it_make_three():
    s = _state(NCCL_220_IB_NVLS)
    assert s.workload is None  # one init line: a tensor-parallel server prints it too
    assert lp.summary(s)["version"] == "2.20.5"  # the checklist is unchanged
    s.feed("step 1 loss 2.0", t=1.0)
    s.feed("step 2 loss 1.9", t=2.0)
    assert s.workload == lp.WorkloadHint("training", "NCCL init")


REQUEST_LINE = 'INFO:     10.0.0.7:51234 - "POST /v1/chat/completions HTTP/1.1" 200 OK'


def test_one_line_of_a_server_does_not_make_a_training_job_idle_capacity():
    """A training job's own log with one request line (a request logger, an echoed line): still training;
    a real server's log says so line after line."""
    s = lp.LogState()
    for step in range(1, 6):
        s.feed(f"step {step} loss 2.0", t=float(step))
    s.feed(REQUEST_LINE, t=6.0)
    s.feed(REQUEST_LINE, t=7.0)
    assert s.workload == lp.WorkloadHint("training", "progress lines (step)")
    s.feed(REQUEST_LINE, t=8.0)  # the bound: three such lines make it a server's log
    assert s.workload == lp.WorkloadHint("serving", "inference API requests")


# ---- what the patterns read, and what a user's pattern may cost ---------------------------------------


def test_a_long_line_is_read_by_its_head_and_its_tail():
    """A structured log's line can hold a whole traceback: its error, at the end, is still seen."""
    long = HW + "Call to connect returned Connection timed out " + "x" * 20_000 + ERROR_LINES["cuda_oom"]
    seen = lp.window(long)
    assert len(seen) < lp.SCAN_CHARS and seen.startswith(HW) and seen.endswith(ERROR_LINES["cuda_oom"])
    assert lp.window(seen) == seen and lp.window("short") == "short"
    s = _state([long])
    assert s.warnings == 1 and dict(s.errors) == {"cuda_oom": 1}


def test_a_number_cut_where_the_window_joins_is_not_read():
    cut = lp.SCAN_CHARS // 2 - 1 - len("step 12")  # "step 12|345" at the seam
    line = " " * cut + "step 12345" + "y" * 10_000
    assert lp.match_progress(line) is None
    assert lp.match_progress(" " * (cut - 1) + "step 12 " + "y" * 10_000) == lp.Progress("step", 12)


@pytest.mark.parametrize(
    ("line", "name", "step", "seconds"),
    [
        # the first head that fits the rest wins, as it did before patterns looked after one head only
        ("steps: x steps: 7 loss 1.0 iter time (s): 0.5 steps: 9", "deepspeed", 7, 0.5),
        (" iteration 1/1 | iteration 2/9 | elapsed time per iteration (ms): 250", "megatron", 1, 0.25),
        (
            "Epoch 0:   0%|  | 0/9 [00:00<?, ?it/s]\rEpoch 0:  11%|# | 1/9 [00:01<00:08, 1.00it/s]",
            "lightning",
            None,
            1.0,
        ),
        ("x1234/99 [00:01<00:02, 3.00it/s]", "tqdm", 1234, 1 / 3),
    ],
)
def test_progress_patterns_find_what_they_found_before(line, name, step, seconds):
    found = lp.match_progress(line)
    assert found is not None and (found.pattern, found.step) == (name, step)
    assert found.seconds == pytest.approx(seconds)


def test_a_load_line_after_a_head_without_numbers_is_still_read():
    line = "Decode batch. #running-req: x, #running-req: 3, #token: 9, #queue-req: 2"
    assert lp.server_load(line) == lp.ServerLoad(3, 2)
    assert lp.server_load("Decode batch. #running-req: 3, #token: 9") is None


@pytest.mark.parametrize(
    "regex",
    [
        r"(a+)+$",  # nested: exponential
        r"(\d+\.){3}",  # nested, bounded: still refused, write it out
        r"(x|x)*y",  # ambiguous alternatives: exponential, found by the probes on a few characters
        r"step\s*\s*\s*(\d+)",  # three quantifiers over one run: cubic
        r".*=.*=.*;",  # the same over a repeated literal
        r"step\s*(?P<step>\d+)\s*.*\s*loss",  # after a literal and a digit: cubic in blanks
        r"(?P<step>\d+)\s*\s*\s*z",  # a digit head the search may start anywhere in a run: quartic
        r"it\s*(?P<step>\d+)\s*\s*\s*\s*loss",  # quartic
        r"(?P<step>\d+)\s*\s*\s*\s*z",  # quintic
        r"\d+\s*\s*z",  # two over blanks, started from every digit of a run before them: cubic
        r"(?:a|\s*)\s*\s*(?P<step>\d+)",  # an alternative that can be a run too
    ],
)
def test_user_patterns_that_backtrack_are_refused(regex):
    text = json.dumps([{"name": "mine", "regex": regex}])
    refused = r"^mine: (nested quantifiers|too slow on a long line|quantifiers that can match)"
    with pytest.raises(lp.PatternError, match=refused):
        lp.load_patterns(text)


@pytest.mark.parametrize(
    "regex",
    [
        r"step\s*(?P<step>\d+)\s*.*\s*loss",
        r"(?P<step>\d+)\s*\s*\s*z",
        r"it\s*(?P<step>\d+)\s*\s*\s*\s*loss",
    ],
)
def test_the_probes_alone_start_from_a_literal_and_a_digit_head(regex, monkeypatch):
    """The structural refusal aside, the generated worst cases reach these patterns' (a digit after a
    literal, then a run of blanks): a shape the structure misses is still probed there."""
    monkeypatch.setattr(lp, "_overlap", lambda regex, tree: "")
    assert lp.check_cost(lp.re.compile(regex)).startswith("too slow on a long line")


def test_the_structural_refusal_names_the_run_and_the_fix():
    why = lp.check_cost(lp.re.compile(r"step\s*(?P<step>\d+)\s*.*\s*loss"))
    assert "' '" in why and "n^3" in why and "possessive" in why
    # the fix it names passes, as does a literal between the runs
    assert lp.check_cost(lp.re.compile(r"step\s*+(?P<step>\d++)\s*+.*loss")) == ""
    assert lp.check_cost(lp.re.compile(r"step\s*(?P<step>\d+)\s*;.*loss")) == ""


@pytest.mark.parametrize("regex", ["", ".*", r"(?P<step>\d*)", "x?"])
def test_a_pattern_that_matches_an_empty_line_is_refused(regex):
    """It would take every line of the pod's log as progress, and so hide a hang."""
    with pytest.raises(lp.PatternError, match=r"^mine: matches an empty line"):
        lp.load_patterns(json.dumps([{"name": "mine", "regex": regex}]))


def test_deeply_nested_pattern_json_is_one_line():
    with pytest.raises(lp.PatternError, match=r"^not JSON \(nested too deeply\)$"):
        lp.load_patterns("[" * 100_000)


@pytest.mark.parametrize(
    "regex",
    [
        r"train it=(?P<n>\d+) took (?P<ms>[\d.]+)ms",
        r"\bepoch (?P<e>\d+) step (?P<s>\d+)",
        r"^Step (?P<n>\d+)/\d+",
        r"(?i)loss[=:]\s*(?P<l>[\d.]+)",
        r"\[(?P<n>\d+)/\d+\]",
        r".*step=(?P<step>\d+).*",  # quadratic at worst: bounded by the 1 KiB reach
        r"step\s*(?P<step>\d+)",
        r"Epoch (?P<e>\d+):\s*(?P<p>\d+)%\|.*\| (?P<s>\d+)/(?P<t>\d+)",
    ],
)
def test_ordinary_user_patterns_pass_the_cost_check(regex):
    assert lp.check_cost(lp.re.compile(regex)) == ""


def test_every_built_in_pattern_passes_the_cost_check_over_a_whole_window():
    regexes = [p.regex for p in lp.PATTERNS] + [s.regex for s in lp.ERROR_SIGNS]
    regexes += [regex for regex, _, _ in lp.KNOWN_BAD.values()] + [w.regex for w in lp.WORKLOAD_LINES]
    slow = {r.pattern: why for r in regexes if (why := lp.check_cost(r, lp.SCAN_CHARS))}
    assert not slow


def test_user_patterns_read_the_head_of_a_line_and_are_bounded_in_number_and_length():
    (mine,) = lp.load_patterns(json.dumps([{"regex": r"took (?P<n>\d+)", "step": "n"}]))
    assert mine.reach == lp.USER_SCAN_CHARS
    assert lp.match_progress("took 5", (mine,)) == lp.Progress("custom0", 5)
    assert lp.match_progress("x" * lp.USER_SCAN_CHARS + "took 5", (mine,)) is None
    assert lp.match_progress("x" * (lp.USER_SCAN_CHARS - 7) + "took 555", (mine,)) is None  # not 55
    with pytest.raises(lp.PatternError, match="at most 32"):
        lp.load_patterns(json.dumps([{"regex": "x"}] * 33))
    with pytest.raises(lp.PatternError, match="longer than 1024 characters"):
        lp.load_patterns(json.dumps([{"regex": "x" * 1025}]))


def test_a_patterns_file_past_its_bound_is_too_large(tmp_path):
    path = tmp_path / "patterns.json"
    path.write_text(json.dumps([{"regex": "x"}] * 70_000))
    with pytest.raises(lp.PatternError, match=r"^too large \(over 1 MiB\)$"):
        lp.read_patterns(str(path))
    path.write_text(json.dumps([{"regex": r"it (?P<n>\d+)", "step": "n"}]))
    assert [p.name for p in lp.read_patterns(str(path))] == ["custom0"]
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)  # no writer: refused at once, never waited on
    with pytest.raises(lp.PatternError, match="not a regular file"):
        lp.read_patterns(str(fifo))


def test_partial_records_of_a_saved_log_are_joined_up_to_a_bound():
    stamp = "2026-01-01T00:00:00.000000000Z stdout"
    records = [f"{stamp} P " + "x" * 16_000] * 100 + [f"{stamp} F end"]
    ((text, t),) = list(lp.plain_lines(records))
    assert len(text) <= lp.JOINED_CHARS + 3 and text.endswith("xend") and t is not None


def test_the_cost_check_judges_the_ratio_to_a_linear_scan_not_this_machines_speed(monkeypatch):
    """A quadratic pattern bounded by its 1 KiB reach passes on a slow node as on a fast one: the probe
    is judged against a linear scan timed on the same machine, so scaling every timing changes nothing."""
    quadratic = lp.re.compile(r".*step=(?P<step>\d+).*")
    cubic = lp.re.compile(r"step\s*\s*\s*(?P<n>\d+)")
    real = lp._search_cpu
    monkeypatch.setattr(lp, "_overlap", lambda regex, tree: "")  # the probes alone
    for slowdown in (1.0, 20.0):
        monkeypatch.setattr(lp, "PROBE_SECONDS", 1e9)  # only the ratio speaks
        monkeypatch.setattr(lp, "_search_cpu", lambda r, t, k=slowdown: k * real(r, t))
        assert lp.check_cost(quadratic) == "", slowdown
        assert lp.check_cost(cubic).startswith("too slow on a long line"), slowdown


def test_a_step_too_large_for_a_float_is_not_progress():
    """A line of a thousand digits after `step` is no step: kept, it overflowed the seconds per step."""
    from exporter.podlogs.logparse import STEP_MAX, LogState

    state = LogState()
    state.feed("step 7", 1.0)
    state.feed("step " + "9" * 1020, 2.0)
    state.feed("step " + "9" * 1021, 3.0)
    assert state.step == 7
    state.feed(f"step {STEP_MAX}", 4.0)
    assert state.step == STEP_MAX
