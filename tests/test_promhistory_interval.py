"""The scrape interval of a history with holes: found where samples exist, or the message names --step.
A small Prometheus over loopback HTTP answers the probe's queries from its series (the end-to-end test
with a real Prometheus: tests/e2e/test_replay_prometheus_operator.py)."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest

from exporter.offline.promhistory.client import PromClient, PromError
from exporter.offline.promhistory.history import Found, Request, scrape_interval
from exporter.offline.promhistory.names import DCGM_LEGACY, PRESENCE

DAY = 86400.0
METRIC = PRESENCE[DCGM_LEGACY]


class FakeProm:
    """Series (labels, sample times) answered as Prometheus would: ``query_range`` of the probe's
    ``topk(1, count_over_time(...))``, and ``query`` of a range vector's raw samples (each sample
    ``copies`` times: a broken merge of an HA pair). ``refuse_counts``: the range query answers 400."""

    def __init__(self, series: list[tuple[dict[str, str], list[float]]], copies: int = 1) -> None:
        self.series, self.copies, self.refuse_counts = series, copies, False
        self.asked: list[str] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                split = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                form = parse_qs(self.rfile.read(length).decode() if length else split.query)
                fake.asked.append(split.path)
                status, data = fake.answer(split.path, {k: v[0] for k, v in form.items()})
                body = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_POST = do_GET

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def answer(self, path: str, form: dict[str, str]) -> tuple[int, object]:
        query = form.get("query", "")
        window = float(re.search(r"\[(\d+)s\]", query).group(1)) if "[" in query else 0.0  # type: ignore[union-attr]
        if path == "/api/v1/query_range":
            if self.refuse_counts:
                return 400, {"status": "error", "error": "function not allowed"}
            start, end, step = float(form["start"]), float(form["end"]), float(form["step"])
            best: dict[tuple[tuple[str, str], ...], list[list[object]]] = {}
            t = start
            while t <= end:
                counts = [(sum(t - window < x <= t for x in times), labels) for labels, times in self.series]
                n, labels = max(counts, key=lambda c: c[0], default=(0, {}))
                if n:
                    best.setdefault(tuple(sorted(labels.items())), []).append([t, str(n)])
                t += step
            result = [{"metric": dict(k), "values": v} for k, v in best.items()]
            return 200, {"status": "success", "data": {"resultType": "matrix", "result": result}}
        if path == "/api/v1/query":
            at = float(form["time"])
            wanted = dict(re.findall(r'(\w+)="([^"]*)"', query))
            result = []
            for labels, times in self.series:
                if all(labels.get(k) == v for k, v in wanted.items()):
                    values = [[x, "1"] for x in times if at - window < x <= at for _ in range(self.copies)]
                    if values:
                        result.append({"metric": {"__name__": METRIC, **labels}, "values": values})
            return 200, {"status": "success", "data": {"resultType": "matrix", "result": result}}
        return 404, {"status": "error", "error": "not found"}

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def prom() -> Iterator[list[FakeProm]]:
    made: list[FakeProm] = []
    yield made
    for fake in made:
        fake.close()


def _gpu(node: str, low: float, high: float, every: float = 15.0) -> tuple[dict[str, str], list[float]]:
    times = [low + every * k for k in range(int((high - low) / every))]
    return {"Hostname": node, "gpu": "0"}, times


def _interval(fake: FakeProm, request: Request) -> float:
    found = Found(
        schemes=[DCGM_LEGACY],
        nodes={"n1": 'Hostname="n1"', "n2": 'Hostname="n2"'},
        host_nodes={},
        present=set(),
        pod_jobs={},
    )
    return scrape_interval(PromClient(fake.url), request, found)


def test_a_week_whose_end_start_and_every_eighth_hold_no_sample_still_tells_its_interval(prom):
    """A pool at zero now, nodes gone: a node that lived a few hours between the eighths of the week."""
    prom.append(fake := FakeProm([_gpu("n2", 5.30 * DAY, 5.40 * DAY), _gpu("n1", 0.3 * DAY, 0.3 * DAY + 20)]))
    assert _interval(fake, Request(fake.url, 0.0, 7 * DAY)) == 15.0
    assert fake.asked.count("/api/v1/query") == 1  # the fullest bucket's raw samples, once


def test_duplicate_sample_times_do_not_make_a_one_second_step(prom):
    """Every sample answered twice at its time (an HA pair merged badly): the interval is still 15 s."""
    prom.append(fake := FakeProm([_gpu("n1", DAY, 1.1 * DAY)], copies=2))
    assert _interval(fake, Request(fake.url, 0.0, 2 * DAY)) == 15.0


def test_a_history_with_no_two_samples_near_each_other_names_step(prom):
    prom.append(fake := FakeProm([_gpu("n1", 0.3 * DAY, 0.3 * DAY + 15), _gpu("n2", DAY, DAY + 15)]))
    with pytest.raises(PromError) as caught:
        _interval(fake, Request(fake.url, 0.0, 7 * DAY))
    assert "--step" in str(caught.value) and "\n" not in str(caught.value)
    assert len(fake.asked) == 1  # one range query said so: no probing blind


def test_a_server_refusing_the_count_is_probed_at_the_range_end_and_eighths(prom):
    prom.append(fake := FakeProm([_gpu("n1", 3.4 * DAY, 3.6 * DAY, every=30.0)]))
    fake.refuse_counts = True
    assert _interval(fake, Request(fake.url, 0.0, 7 * DAY)) == 30.0  # found at the middle
