"""Plain `nvidia-smi` logs (no clock reasons, no clocks.max.sm, no host columns) judged by physics before a
guessed class: a rank that stops while its peers wait pages and is named, a stop of one of several
independent jobs pages, a server its process table names does not, a cap set in steps pages as power,
and a class that silences a loss says so."""

from __future__ import annotations

import gzip
import json

from devtools import plain_traces
from exporter.offline.replay import replay, unpaged_losses, unsure_lines, workload_summary
from exporter.offline.traceformats import smi_screen
from exporter.offline.traceformats.base import Context
from exporter.offline.traceformats.compute_apps import read_process_names
from exporter.podlogs.workload import process_hint
from tests.conftest import REPO, assert_generated

FOLDER = REPO / "examples" / "traces" / "plain"


def test_the_checked_in_logs_are_the_generators_output(tmp_path):
    assert_generated(plain_traces.main, FOLDER, tmp_path)


def _firing(result) -> dict[tuple[str, str], list]:
    out: dict[tuple[str, str], list] = {}
    for e in result.episodes:
        out.setdefault((e.gpu, e.kind), []).append(e)
    return out


def test_a_rank_that_stops_while_its_peers_wait_is_paged_and_named():
    result = replay(FOLDER / "p01_h100x4_ddp_rank_stops.csv.gz")
    firing = _firing(result)
    assert set(firing) == {("2", "data_starvation")}, firing
    (episode,) = firing[("2", "data_starvation")]
    assert abs(episode.start - 240) <= 10 and abs((episode.end or 0) - 420) <= 10
    assert set(episode.related) == {"0", "1", "3"}  # told as waiting for it
    for gpu in "013":  # the peers' stop is a wait for GPU 2, not a loss of their own
        assert result.ledger[gpu]["comm_wait"] > 0.25 * sum(result.ledger[gpu].values())
        assert workload_summary(result)[gpu]["class"] == "training"
    assert "rank" in str(workload_summary(result)["2"]["evidence"])
    (told,) = [line for line in unpaged_losses(result, ["0", "1", "3"]) if "comm_wait" in line]
    assert told.startswith("  GPU 0, 1, 3: yet") and "waiting in collectives for GPU 2" in told


def test_one_stopped_gpu_of_independent_jobs_pages():
    result = replay(FOLDER / "p02_a100x4_independent_one_stops.csv.gz")
    firing = _firing(result)
    assert set(firing) == {("1", "data_starvation")}
    # nobody waited for it: the others kept their own pace (their memory traffic says they computed)
    assert firing[("1", "data_starvation")][0].related == ()


def test_a_healthy_jobs_checkpoint_pauses_on_flat_memory_are_no_server_and_no_page():
    result = replay(FOLDER / "p03_h100x4_ddp_checkpoints.csv.gz")
    assert not result.episodes
    assert {w["class"] for w in workload_summary(result).values()} == {"training"}


def test_a_cap_set_in_steps_without_a_reason_column_pages_as_power_and_full_clocks_are_not_thermal():
    result = replay(FOLDER / "p04_a100_power_cap_steps.csv.gz")
    firing = _firing(result)
    assert set(firing) == {("0", "power_throttle")}, firing
    (episode,) = firing[("0", "power_throttle")]
    assert episode.cause == "cap_below_default"
    assert abs(episode.start - 300) <= 30 and abs((episode.end or 0) - 1500) <= 30


def test_a_server_named_by_its_process_table_is_judged_as_one_and_never_starved():
    result = replay(FOLDER / "p05_laptop_ollama_screens_60s.log.gz")
    assert workload_summary(result)["0"]["source"] == "process"
    assert workload_summary(result)["0"]["class"] == "serving"
    assert {e.kind for e in result.episodes} <= {"idle_allocated"}  # idle capacity: an info notice
    # and the starvation its class silenced is said
    assert any("data_starvation not paged" in line and "serving" in line for line in unsure_lines(result))


def test_an_onset_never_reaches_back_past_the_evidence_at_a_coarse_step():
    """Judged as training, the server's quiet hours are losses: each says its loss began within the
    ledger window before its verdict, not at the log's start."""
    result = replay(FOLDER / "p05_laptop_ollama_screens_60s.log.gz", workload="training")
    starving = [e for e in result.episodes if e.kind == "data_starvation"]
    assert len(starving) >= 3
    for e in starving:
        assert e.fired_at - e.start <= 300 + 60 + 1, (e.start, e.fired_at)


def test_the_process_table_of_a_screen_names_each_gpus_processes():
    screen = [
        "Tue Nov 24 10:00:00 2026",
        "| NVIDIA-SMI 550.54.15              Driver Version: 550.54.15      CUDA Version: 12.4     |",
        "|   0  NVIDIA H100 80GB HBM3          On  |   00000000:18:00.0 Off |                    0 |",
        "| N/A   40C    P0            120W /  700W |   73000MiB /  81559MiB |      3%      Default |",
        "| Processes:                                                                              |",
        "|  GPU   GI   CI        PID   Type   Process name                              GPU Memory |",
        "|    0   N/A  N/A     18324      C   /opt/tritonserver/bin/tritonserver          72990MiB |",
        "|    1   N/A  N/A      4411    C+G   C:\\Program Files\\Ollama\\ollama.exe           N/A      |",
        "|    2      5512      C   python                                           1200MiB |",
        "|  No running processes found                                                             |",
    ]
    seen: list[tuple[str, str]] = []
    ctx = Context(process=lambda gpu, name: seen.append((gpu, name)))
    samples = list(smi_screen.read(lambda: iter(enumerate(screen, 1)), ctx))
    assert len(samples) == 1
    assert seen == [
        ("0", "/opt/tritonserver/bin/tritonserver"),
        ("1", "C:\\Program Files\\Ollama\\ollama.exe"),
        ("2", "python"),
    ]
    assert process_hint(seen[0][1]).kind == "serving"
    assert process_hint(seen[1][1]).kind == "serving"
    assert process_hint("python") is None
    assert process_hint("/opt/conda/bin/torchrun").kind == "training"
    assert process_hint("/usr/local/bin/jupyter-lab").kind == "interactive"


def test_a_flag_outranks_the_process_table(tmp_path):
    result = replay(FOLDER / "p05_laptop_ollama_screens_60s.log.gz", workload="evaluation")
    assert {w["source"] for w in workload_summary(result).values()} == {"flag"}


def test_a_gzip_of_screens_is_read_though_it_expands_over_a_hundred_times():
    path = FOLDER / "p05_laptop_ollama_screens_60s.log.gz"
    assert len(gzip.decompress(path.read_bytes())) > 100 * path.stat().st_size
    assert replay(path).stats.rows == 12 * 60  # every screen read, none refused as a bomb


def test_the_labels_mark_the_logs_as_made_by_hand():
    for path in FOLDER.glob("*.labels.json"):
        assert "by hand" in json.loads(path.read_text())["made"], path.name


def test_the_report_says_what_was_not_paged_and_why(tmp_path):
    from exporter.offline.report import ReportData, write_report

    data = ReportData()
    result = replay(FOLDER / "p05_laptop_ollama_screens_60s.log.gz", **data.hooks())  # type: ignore[arg-type]
    path = tmp_path / "r.html"
    write_report(path, result, data)
    page = path.read_text()
    assert "<h3>Not paged</h3>" in page and "data_starvation not paged" in page
    assert "--workload training" in page


def test_a_compute_apps_log_beside_a_plain_log_names_the_class(tmp_path, capsys):
    from exporter import cli

    apps = tmp_path / "apps.csv"
    apps.write_text(
        "timestamp, gpu_uuid, pid, process_name, used_gpu_memory [MiB]\n"
        "2026/11/16 14:00:00.000, GPU-a, 18324, /opt/tritonserver/bin/tritonserver, 30154 MiB\n"
        "2026/11/16 14:00:05.000, GPU-a, 18324, /opt/tritonserver/bin/tritonserver, 30154 MiB\n"
        "2026/11/16 14:00:05.000, GPU-b, [N/A], [N/A], [N/A]\n"
    )
    assert read_process_names(apps) == {"GPU-a": ["/opt/tritonserver/bin/tritonserver"]}
    trace = str(FOLDER / "p03_h100x4_ddp_checkpoints.csv.gz")
    assert cli.main(["replay", trace, "--processes", str(apps)]) == 0
    out = capsys.readouterr().out
    assert "judged as serving (process: tritonserver)" in out
    # not such a log, a missing file, or beside --prometheus: one line each, status 2
    for args, said in (
        (["--processes", trace], "no process_name column"),
        (["--processes", str(tmp_path / "nope.csv")], "cannot read"),
    ):
        assert cli.main(["replay", trace, *args]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and said in err[0], err
    assert cli.main(["replay", "--prometheus", "http://127.0.0.1:9", "--processes", str(apps)]) == 2
    assert "not --prometheus" in capsys.readouterr().err


def test_a_hostile_compute_apps_log_is_one_line_and_bounded(tmp_path):
    import os

    from exporter.offline.traceformats.compute_apps import MAX_LINES, ProcessLogError

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    binary = tmp_path / "bin.csv"
    binary.write_bytes(b"\x00\xff" * 1000)
    wide = tmp_path / "wide.csv"
    wide.write_text("timestamp, pid, process_name\n" + "2026/01/01 00:00:00, 1, " + "x" * 300_000 + "\n")
    for path, said in ((fifo, "not a regular file"), (binary, "no process_name"), (wide, "not a readable")):
        try:
            read_process_names(path)
        except ProcessLogError as exc:
            assert said in str(exc) and "\n" not in str(exc), exc
        else:
            raise AssertionError(f"{path.name} was read")
    # a log of the same few names repeated past the bound is read up to it, not to its end
    many = tmp_path / "many.csv.gz"
    body = "timestamp, pid, process_name\n" + "2026/01/01 00:00:00, 1, ollama\n" * (MAX_LINES + 10)
    many.write_bytes(gzip.compress(body.encode()))
    assert read_process_names(many) == {"*": ["ollama"]}


def test_a_stopped_rank_read_from_a_15_s_history_pages_as_stopped():
    """The same log as a Prometheus scraping every 15 s would hold it: the stopped rank is named with its
    cause, its peers as waiting, two samples into the stop."""
    from exporter.offline.promhistory.agreement import sampled
    from exporter.offline.promhistory.history import replay_nodes
    from exporter.offline.traces import TraceReader

    def history(path):
        return replay_nodes([sampled(TraceReader(path), 15.0)], {}, 15.0, 0.0, "15 s", path, prices=None)

    stopped = history(FOLDER / "p01_h100x4_ddp_rank_stops.csv.gz")
    (episode,) = stopped.episodes
    assert (episode.gpu, episode.kind, episode.cause) == ("node/2", "data_starvation", "stopped")
    assert set(episode.related) == {"node/0", "node/1", "node/3"}
    assert episode.fired_at - 240 <= 2 * 15 + 15  # two samples of the stop, and the one it began in


def test_rank_0_saving_alone_while_its_peers_wait_pages_nothing_and_says_why():
    """The picture of a stopped rank, on the job's first rank, where saves run: a minute's save every five
    minutes pages nothing, at 1 s or read from a 15 or 30 s history, and replay says what it saw."""
    from exporter.offline.promhistory.agreement import sampled
    from exporter.offline.promhistory.history import replay_nodes
    from exporter.offline.traces import TraceReader

    path = FOLDER / "p06_h100x4_ddp_rank0_saves.csv.gz"
    result = replay(path)
    assert result.episodes == []
    (why,) = [line for line in unsure_lines(result) if "data_starvation not paged" in line]
    assert "GPU 0:" in why and "first rank" in why and "GPU 1, 2, 3" in why
    for step in (15.0, 30.0):
        history = replay_nodes([sampled(TraceReader(path), step)], {}, step, 0.0, "h", path, prices=None)
        assert history.episodes == [], (step, history.episodes)
