"""The sampler over the simulated node: windows, snapshots, and every fault it must survive."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pynvml
import pytest

from exporter.collect.nvml_session import NvmlSession
from exporter.collect.poller import Poller
from exporter.collect.sampler import Sampler
from exporter.config.settings import Settings
from exporter.policy.thresholds import RANK_STOP
from exporter.serve.metrics import Renderer
from exporter.sources.errors import ErrorCounter
from tests.conftest import step
from tests.timing import HANG_GUARD_S, assert_within, returns, timed


def by_index(snapshot):
    return {g.index: g for g in snapshot.gpus}


def test_first_cycle_opens_nvml_and_becomes_ready(make_node, make_sampler, clock):
    sampler, _ = make_sampler(make_node("healthy"))
    assert not sampler.snapshot.ready
    snap = step(sampler, clock, cycles=2)
    assert snap.ready and snap.nvml_up and len(snap.gpus) == 8
    assert all(g.up for g in snap.gpus)
    assert snap.host is not None and snap.driver["driver_version"] == "550.90.07"
    assert snap.last_success["nvml"] == clock.now and "host" in snap.source_durations


def test_window_statistics_show_the_starved_rank(make_node, make_sampler, clock):
    sampler, _ = make_sampler(make_node("data_starvation"))
    snap = step(sampler, clock, cycles=40)
    starved, peer = by_index(snap)[3], by_index(snap)[0]
    assert 0.35 < starved.idle_fraction < 0.6
    assert starved.util_window.min == 0.0 and starved.util_window.max == 1.0
    assert starved.util_window.count == 200  # 40 s of 0.2 s driver samples, none lost between collections
    assert peer.idle_fraction == 0.0 and peer.util_window.mean > 0.95
    assert starved.power_window.max - starved.power_window.min > 300  # power waves with the work


def test_window_keeps_only_the_window(make_node, make_sampler, clock):
    sampler, _ = make_sampler(make_node("healthy"), window_s=10.0)
    snap = step(sampler, clock, cycles=30)
    assert by_index(snap)[0].util_window.count == 50


def test_listeners_get_every_point(make_node, make_sampler, clock):
    sampler, _ = make_sampler(make_node("healthy"))
    seen: dict[int, int] = {}
    hosts = []
    sampler.gpu_listeners.append(
        lambda ident, pts: seen.__setitem__(ident.index, seen.get(ident.index, 0) + len(pts))
    )
    sampler.host_listeners.append(hosts.append)
    step(sampler, clock, cycles=5)
    assert seen[0] == 25 and len(hosts) == 5


def test_points_carry_the_failed_peers_of_the_p2p_table_in_force(make_node, make_sampler, clock):
    sampler, _ = make_sampler(make_node("healthy", n_gpus=4), p2p_interval_s=86400.0)
    newest: dict[int, float | None] = {}
    sampler.gpu_listeners.append(lambda ident, pts: newest.__setitem__(ident.index, pts[-1].p2p_failed))
    step(sampler, clock, cycles=3)
    assert sampler.session.p2p and newest[0] == 0  # the simulated node's first table: every peer reachable
    # a new table arrives (the session replaces it whole): the next points count its failed peers
    sampler.session.p2p = {**sampler.session.p2p, (0, 1, "nvlink"): False, (0, 3, "nvlink"): False}
    step(sampler, clock, cycles=2)
    assert newest[0] == 2 and newest[1] == 0
    sampler.session.p2p = {key: True for key in sampler.session.p2p}
    step(sampler, clock)
    assert newest[0] == 0


def test_hung_call_times_out_one_gpu_and_never_blocks_the_cycle(make_node, make_sampler, clock):
    node = make_node("healthy")
    sampler, errors = make_sampler(node, collect_timeout_s=0.3)
    step(sampler, clock, cycles=2)
    renderer = Renderer()

    def two_cycles() -> object:
        step(sampler, clock, wait_s=0.2)
        time.sleep(0.35)
        return step(sampler, clock, wait_s=0.2)

    _, answered = timed(two_cycles)  # every GPU answering: the baseline
    node.faults.add("nvmlDeviceGetSamples", gpu=2, hang_s=float("inf"))
    snap, took = timed(two_cycles)
    # the hung GPU costs each cycle its wait at most (0.2 s), never the hang
    assert_within(took, answered + 2 * 0.2, 2, "two cycles with a hung call")
    gpus = by_index(snap)
    assert gpus[2].status == "timeout" and gpus[2].reading is None
    assert all(gpus[i].up for i in gpus if i != 2)
    body, _ = renderer.render(snap)
    assert b'gpu_up{gpu="2"' in body and b'gpu_power_watts{gpu="3"' in body
    assert b'gpu_power_watts{gpu="2"' not in body
    step(sampler, clock, wait_s=0.2)
    assert errors.snapshot()[("nvml", "CollectTimeout")] == 1  # counted once per hung call
    node.faults.clear()
    snap = step(sampler, clock, cycles=2)
    assert by_index(snap)[2].up


def test_every_gpu_is_read_on_one_thread_per_cycle(make_node, make_sampler, clock):
    node = make_node("healthy")
    sampler, _ = make_sampler(node)
    step(sampler, clock, cycles=2)
    threads: dict[int, set[int]] = {}
    inner = sampler.session.nvml.collect

    def collect(dev):
        threads.setdefault(dev.index, set()).add(threading.get_ident())
        return inner(dev)

    sampler.session.nvml.collect = collect  # type: ignore[method-assign]
    for _ in range(3):
        threads.clear()
        step(sampler, clock)
        assert sorted(threads) == list(range(8))
        assert len(set().union(*threads.values())) == 1


def test_gpus_behind_a_hung_read_are_read_first_on_the_next_cycle(make_node, make_sampler, clock):
    node = make_node("healthy")
    sampler, _ = make_sampler(node, collect_timeout_s=0.3)
    step(sampler, clock, cycles=2)
    before = {g.index: g.collected_t for g in sampler.snapshot.gpus}
    node.faults.add("nvmlDeviceGetSamples", gpu=2, hang_s=float("inf"))
    step(sampler, clock, wait_s=0.2)  # GPUs 0 and 1 are read, 3-7 wait behind GPU 2
    order: list[int] = []
    inner = sampler.session.nvml.collect

    def collect(dev):
        order.append(dev.index)
        return inner(dev)

    sampler.session.nvml.collect = collect  # type: ignore[method-assign]
    snap = step(sampler, clock, wait_s=1.0)
    assert order[:5] == [3, 4, 5, 6, 7] and 2 not in order
    gpus = by_index(snap)
    assert all(gpus[i].collected_t > before[i] for i in gpus if i != 2)
    node.faults.clear()


def test_lost_gpu_goes_down_alone_and_comes_back(make_node, make_sampler, clock):
    node = make_node("healthy")
    sampler, errors = make_sampler(node)
    step(sampler, clock, cycles=2)
    fault = node.faults.add("*", pynvml.NVML_ERROR_GPU_IS_LOST, gpu=5)
    snap = step(sampler, clock, cycles=2)
    gpus = by_index(snap)
    assert gpus[5].status == "lost" and not gpus[5].up
    assert sum(g.up for g in snap.gpus) == 7
    node.faults.remove(fault)
    snap = step(sampler, clock, cycles=3)
    assert by_index(snap)[5].up
    assert errors.snapshot()[("nvml", "GpuIsLost")] >= 1


def test_gpu_lost_scenario_counts_xid_79(make_node, make_sampler, clock):
    sampler, _ = make_sampler(make_node("gpu_lost:onset=3"))
    step(sampler, clock, cycles=2)
    deadline = time.monotonic() + HANG_GUARD_S
    snap = step(sampler, clock, cycles=3)
    while by_index(snap)[7].xids.get(79) != 1 and time.monotonic() < deadline:
        time.sleep(0.05)
        snap = step(sampler, clock, seconds=0.0)
    gpus = by_index(snap)
    assert gpus[7].status == "lost" and gpus[7].xids == {79: 1}
    assert gpus[6].up and gpus[6].xids == {}


@pytest.mark.parametrize(
    "code", [pynvml.NVML_ERROR_DRIVER_NOT_LOADED, pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH]
)
def test_driver_gone_drops_the_session_and_reinitialises(make_node, make_sampler, clock, code):
    node = make_node("healthy")
    sampler, errors = make_sampler(node)
    step(sampler, clock, cycles=2)
    node.faults.add("*", code)
    snap = step(sampler, clock, cycles=3)
    assert not snap.nvml_up and all(g.status == "nvml_down" for g in snap.gpus)
    assert snap.host is not None  # the node's own metrics keep coming
    node.faults.clear()
    snap = step(sampler, clock, cycles=3)
    assert snap.nvml_up and all(g.up for g in snap.gpus)
    assert sum(n for (src, _), n in errors.snapshot().items() if src == "nvml") >= 1


def test_library_missing_at_start_serves_host_metrics_and_retries(make_node, make_sampler, clock):
    node = make_node("healthy", library_present=False)
    sampler, errors = make_sampler(node)
    snap = step(sampler, clock, cycles=2)
    assert snap.ready and not snap.nvml_up and snap.gpus == ()
    assert snap.host is not None and snap.host.cpu_count
    assert errors.snapshot()[("nvml", "LibraryNotFound")] >= 1
    node.faults.clear()  # the driver gets installed
    snap = step(sampler, clock, cycles=3)
    assert snap.nvml_up and len(snap.gpus) == 8 and all(g.up for g in snap.gpus)


def test_retry_backs_off(make_node, make_sampler, clock):
    node = make_node("healthy", library_present=False)
    sampler, _ = make_sampler(node, nvml_retry_initial_s=100.0, nvml_retry_max_s=400.0)
    step(sampler, clock, cycles=3)
    assert node.library.calls["nvmlInitWithFlags"] == 1  # next try only after 100 s of monotonic time


def test_node_without_gpus(make_node, make_sampler, clock):
    sampler, errors = make_sampler(make_node("healthy", n_gpus=0))
    snap = step(sampler, clock, cycles=2)
    assert snap.ready and not snap.nvml_up and errors.snapshot() == {}


def test_stop_returns_even_with_a_hung_call(make_node, make_sampler, clock):
    node = make_node("healthy")
    sampler, _ = make_sampler(node)
    step(sampler, clock, cycles=1)
    node.faults.add("*", hang_s=float("inf"))
    sampler.start()
    time.sleep(0.3)
    returns(sampler.stop, "stop with every call hung")  # the hang is endless: stop returns anyway


def test_snapshots_are_immutable_and_numbered(make_node, make_sampler, clock):
    sampler, _ = make_sampler(make_node("healthy"))
    first = step(sampler, clock)
    second = step(sampler, clock)
    assert second.seq == first.seq + 1 and sampler.snapshot is second
    with pytest.raises(AttributeError):
        second.ready = False  # type: ignore[misc]


def test_sampler_without_sources_still_publishes(clock):
    from exporter.config.settings import Settings
    from exporter.sources.errors import ErrorCounter

    sampler = Sampler(Settings(), ErrorCounter(), {}, clock=clock)
    snap = sampler.cycle(wait_s=0)
    assert snap.ready and snap.gpus == () and snap.host is None


def test_a_node_without_gpu_or_kubelet_logs_one_warning(make_node, clock, caplog, tmp_path):
    """README: a GPU-less node starts anyway and logs one warning; the rest is counted, not shouted."""
    from exporter.sources.errors import ErrorCounter
    from exporter.sources.kubelet import PodResourcesSource
    from exporter.sources.nvml import NvmlSource
    from tests.conftest import FAST, RefreshingHostSource

    node = make_node("healthy", library_present=False)
    errors = ErrorCounter()
    host = RefreshingHostSource(node, errors, clock=clock, **node.host_options())
    nvml = NvmlSource(node.install(), errors, clock=clock)
    kubelet = PodResourcesSource(errors, str(tmp_path / "no-kubelet.sock"), timeout_s=0.5)
    sampler = Sampler(FAST, errors, {"host": host, "nvml": nvml, "kubelet": kubelet}, clock=clock)
    try:
        with caplog.at_level("INFO"):
            step(sampler, clock, cycles=3)
    finally:
        sampler.stop()
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and warnings[0].startswith("NVML is not usable (LibraryNotFound"), warnings
    counted = errors.snapshot()
    assert counted[("nvml", "LibraryNotFound")] >= 1 and counted[("kubelet", "SocketNotFound")] >= 1


def test_window_statistics_read_late_are_those_of_their_own_snapshot(make_node, make_sampler, clock):
    """The exported window statistics are summarized when a scrape first reads them: a snapshot read
    after the analyzer has moved on still says what its own window held."""
    from exporter.analysis.window import summarize

    sampler, _ = make_sampler(make_node("data_starvation"))
    old = by_index(step(sampler, clock, cycles=20))[0]
    window = sampler.analyzer.window("0").since(clock.now - sampler.settings.window_s)
    then = summarize([p.util for p in window if p.util is not None])
    new = by_index(step(sampler, clock, cycles=10))[0]
    assert old.util_window == then
    assert new.util_window is not None and new.util_window != then  # the live window did move on
    assert old.power_window is not None and old.power_window.count == then.count


def test_an_open_waits_for_the_close_of_the_failed_one_before_it():
    """NVML counts its inits: a shutdown that runs after the next init would close the new session. So a
    retry is not started while the last close still runs, and is once it returns (or hangs past the
    collection timeout)."""
    release, opens = threading.Event(), []

    def open_nvml():
        opens.append(time.monotonic())
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    nvml = SimpleNamespace(N=pynvml, open=open_nvml, close=lambda *devices: release.wait(10))
    settings = Settings(nvml_retry_initial_s=0.0, collect_timeout_s=5.0)
    errors = ErrorCounter()
    session = NvmlSession(nvml, settings, errors, Poller(errors, time.time, time.monotonic))  # type: ignore[arg-type]
    session.schedule(time.monotonic())
    assert session._open_call is not None and session._open_call.done.wait(5)
    session.harvest(time.monotonic())  # the open failed: its close is started, and blocks
    for _ in range(5):
        session.schedule(time.monotonic())
        time.sleep(0.02)
    assert len(opens) == 1 and session._open_call is None
    release.set()
    assert session._close_call is not None and session._close_call.done.wait(5)
    session.schedule(time.monotonic())
    assert session._open_call is not None and session._open_call.done.wait(5)
    assert len(opens) == 2


def test_a_cycles_snapshot_is_built_when_first_read_with_that_cycles_books(
    make_node, make_sampler, clock, monkeypatch
):
    """A turn leaves its snapshot unbuilt (most are never scraped); the first read builds the latest
    turn's, once, from that turn's inputs even when the books have moved since."""
    import exporter.collect.sampler as sampler_module

    sampler, _ = make_sampler(make_node("healthy", n_gpus=2))
    built: list[int] = []
    real = sampler_module.build
    monkeypatch.setattr(sampler_module, "build", lambda seq, *rest: built.append(seq) or real(seq, *rest))
    for _ in range(3):
        clock.advance(1.0)
        sampler.turn(wait_s=2.0)
    assert built == []
    stamped = dict(sampler.poller.books.last_success)
    sampler.poller.books.last_success["nvml"] = 0.0  # the books move on after the turn
    snap = sampler.snapshot
    assert built == [3] and snap.seq == 3 and sampler.snapshot is snap and built == [3]
    assert snap.last_success == stamped


def test_a_rank_that_stops_while_its_peers_wait_pages_as_itself_live(make_node, make_sampler, clock):
    """The simulator's rank_stall: rank 2 stops for three minutes at 60 s while its peers spin in the
    collective. Live, as in replay: it is a rank of their job (not a server by its flat memory), it pages
    as the rank they wait for, stopped, once the stop has lasted starvation.rank_stop_seconds, and they
    page nothing of their own."""
    sampler, _ = make_sampler(make_node("rank_stall:onset=60", n_gpus=4))
    began = clock.now
    fired: dict[str, float] = {}
    causes: dict[str, str] = {}
    for _ in range(300):  # five minutes, one second a cycle
        step(sampler, clock)
        for gpu, kinds in sampler.analyzer._judged.items():  # the verdicts of the last judgement
            for kind, state in kinds.items():
                if state.firing:
                    fired.setdefault(f"{gpu}/{kind}", clock.now)
                    causes.setdefault(f"{gpu}/{kind}", state.cause)
    assert set(fired) == {"2/data_starvation"}, fired
    assert causes["2/data_starvation"] == "stopped"
    assert fired["2/data_starvation"] - (began + 60) <= RANK_STOP.value + 3  # not a duration: sim seconds
    assert sampler.analyzer.workload("2").kind in ("", "training")
    assert sampler.analyzer.ledger("0").totals["comm_wait"] > 100
