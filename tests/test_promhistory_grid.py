"""Raw samples placed on the step's clock (``Grid``) as a range query of fresh samples places them, and
chunks of raw samples joined without their overlap."""

from __future__ import annotations

from exporter.offline.promhistory.client import Raw
from exporter.offline.promhistory.history import Grid


def test_each_step_takes_the_latest_sample_while_it_is_fresh():
    grid = Grid.of(1000.0, 1300.0, 30.0)  # steps at 1000, 1030, ... 1300; stale past 60 s
    times = [1000_000, 1031_500, 1059_000, 1180_000]
    times_out, values = grid.place(times, [1.0, 2.0, 3.0, 4.0])
    # 1030: the sample of 1000 (30 s old); 1060: 1059's, not 1031.5's; 1120: 1059's is 61 s old, none;
    # 1240: 1180's exactly 60 s old, still fresh
    assert times_out == [1000.0, 1030.0, 1060.0, 1090.0, 1180.0, 1210.0, 1240.0]
    assert values == [1.0, 1.0, 3.0, 3.0, 4.0, 4.0, 4.0]


def test_samples_finer_than_the_step_give_one_value_per_step_and_none_before_the_start():
    grid = Grid.of(100.0, 160.0, 30.0)
    times_out, values = grid.place([40_000, 95_000, 110_000, 120_000, 125_000, 161_000], [0, 1, 2, 3, 4, 5])
    assert times_out == [100.0, 130.0, 160.0]
    assert values == [1, 4, 4]


def test_the_staleness_stops_at_the_lookback_however_coarse_the_step():
    grid = Grid.of(0.0, 1200.0, 200.0)  # two steps would be 400 s: the lookback (300 s) bounds it
    times_out, _ = grid.place([0], [1.0])
    assert times_out == [0.0, 200.0]


def test_a_later_chunk_adds_only_the_samples_after_the_ones_held():
    raw = Raw({})
    raw.extend([1000, 2000, 3000], [1.0, 2.0, 3.0])
    raw.extend([3000, 4000], [3.0, 4.0])  # the chunks' shared edge
    assert raw.times_ms == [1000, 2000, 3000, 4000] and raw.values == [1.0, 2.0, 3.0, 4.0]


def test_a_node_named_by_its_scrape_target_selects_its_series_by_a_regex_of_its_host():
    """An IP address's dots are escaped once for RE2 and once for the PromQL string, no more."""
    from exporter.offline.promhistory.history import node_of

    node, matcher = node_of({"instance": "10.0.3.7:9400"})
    assert node == "10.0.3.7"
    assert matcher == 'instance=~"10\\\\.0\\\\.3\\\\.7(:[0-9]+)?"'  # PromQL source: 10\\.0\\.3\\.7
    import re

    pattern = matcher.split("=~", 1)[1][1:-1].replace("\\\\", "\\")  # the string's value: RE2's pattern
    assert re.fullmatch(pattern, "10.0.3.7:9400") and not re.fullmatch(pattern, "10x0x3x7:9400")
