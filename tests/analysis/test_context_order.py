"""The engine makes a detector's Context positionally (it is made for every GPU every evaluation): each
argument carries its field's name in a comment, and they must follow the fields' order."""

from __future__ import annotations

import re
from dataclasses import fields

from exporter.analysis.detectors import Context
from tests.conftest import REPO


def test_the_engines_positional_context_follows_the_fields_order():
    source = (REPO / "exporter" / "analysis" / "engine.py").read_text()
    call = source[source.index("ctx = d.Context(") : source.index("contexts[gpu] = ctx")]
    named = re.findall(r"#\s*([a-z_]+)\s*(?:\(|$)", call, flags=re.MULTILINE)
    assert named == [f.name for f in fields(Context)], named
