"""Content negotiation for /metrics: the ``Accept`` and ``Accept-Encoding`` grammar of RFC 9110
(sections 12.4-12.5.3), parsed instead of searched for substrings, so ``gzip;q=0`` means no gzip and
``openmetrics-text;q=0`` or an OpenMetrics version this exporter does not write means the text format.

Malformed elements are ignored one by one (a scraper's odd header never fails a scrape); with nothing
acceptable the text format, uncompressed, is served, as every Prometheus exporter does.

prometheus_client's ``choose_encoder`` is not used: it reads no weights, so ``openmetrics-text;q=0``,
OpenMetrics weighed under text, and an OpenMetrics version not written here all get OpenMetrics
(bench/exposition.py shows each case)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# token (RFC 9110 5.6.2) and quoted-string (5.6.4), with the whitespace the list syntax allows around them
_TOKEN = r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
_QUOTED = r'"(?:[^"\\]|\\.)*"'
_PARAM = re.compile(rf"\s*;\s*({_TOKEN})\s*=\s*({_TOKEN}|{_QUOTED})\s*")
_MEDIA_RANGE = re.compile(rf"\s*({_TOKEN})/({_TOKEN})\s*")
_CODING = re.compile(rf"\s*({_TOKEN})\s*")
_QVALUE = re.compile(r"^(?:0(?:\.\d{0,3})?|1(?:\.0{0,3})?)$")


@dataclass(frozen=True)
class MediaRange:
    type: str
    subtype: str
    params: dict[str, str] = field(default_factory=dict)
    q: float = 1.0


@dataclass(frozen=True)
class Offer:
    """A format the server can write: its media type and the parameters that describe it."""

    type: str
    subtype: str
    params: dict[str, str]
    # parameter name -> values a request may ask for that this offer satisfies (absent: must equal)
    accepts: dict[str, frozenset[str]] = field(default_factory=dict)


# OpenMetrics 1.0.0 and the Prometheus text format 0.0.4. The metric names written are legal in the
# legacy character set, so every escaping scheme a scraper may ask for gives the same bytes.
ESCAPING = frozenset({"allow-utf-8", "underscores", "dots", "values"})
OPENMETRICS = Offer(
    "application", "openmetrics-text", {"version": "1.0.0", "charset": "utf-8"}, {"escaping": ESCAPING}
)
TEXT = Offer("text", "plain", {"version": "0.0.4", "charset": "utf-8"}, {"escaping": ESCAPING})


def _unquote(value: str) -> str:
    if value.startswith('"'):
        return re.sub(r"\\(.)", r"\1", value[1:-1])
    return value


def _params(text: str) -> tuple[dict[str, str], float] | None:
    """``;name=value`` parameters up to the weight, and the weight; None when malformed. Parameters
    after ``q`` are extensions (RFC 7231's accept-ext) and ignored."""
    params: dict[str, str] = {}
    q = 1.0
    pos = 0
    while pos < len(text):
        match = _PARAM.match(text, pos)
        if not match:
            return None
        name, value = match.group(1).lower(), _unquote(match.group(2))
        if name == "q":
            if not _QVALUE.match(value):
                return None
            return params, float(value)
        params[name] = value
        pos = match.end()
    return params, q


def _elements(header: str) -> list[str]:
    """The list's elements: split on commas outside quoted strings, empty elements dropped."""
    parts, current, quoted, escaped = [], [], False, False
    for char in header:
        if escaped:
            escaped = False
        elif char == "\\" and quoted:
            escaped = True
        elif char == '"':
            quoted = not quoted
        elif char == "," and not quoted:
            parts.append("".join(current))
            current = []
            continue
        current.append(char)
    parts.append("".join(current))
    return [p for p in parts if p.strip()]


def parse_accept(header: str) -> list[MediaRange]:
    ranges = []
    for element in _elements(header):
        match = _MEDIA_RANGE.match(element)
        if not match:
            continue
        parsed = _params(element[match.end() :])
        if parsed is None:
            continue
        params, q = parsed
        kind, sub = match.group(1).lower(), match.group(2).lower()
        if kind == "*" and sub != "*":
            continue  # "*/json" is not a media range
        ranges.append(MediaRange(kind, sub, params, q))
    return ranges


def parse_accept_encoding(header: str) -> dict[str, float]:
    """content-coding (lower case) -> weight; ``x-gzip`` is gzip (RFC 9110 8.4.1.3)."""
    codings: dict[str, float] = {}
    for element in _elements(header):
        match = _CODING.match(element)
        if not match:
            continue
        parsed = _params(element[match.end() :])
        if parsed is None:
            continue
        name = match.group(1).lower()
        codings["gzip" if name == "x-gzip" else name] = parsed[1]
    return codings


def _matches(media: MediaRange, offer: Offer) -> int | None:
    """How specifically the range names the offer (higher is more specific), or None if it does not."""
    if media.type == "*":
        return 0 if not media.params else None
    if media.type != offer.type:
        return None
    if media.subtype == "*":
        return 1 if not media.params else None
    if media.subtype != offer.subtype:
        return None
    for name, value in media.params.items():
        allowed = offer.accepts.get(name)
        if allowed is not None:
            if value.lower() not in allowed:
                return None
        elif offer.params.get(name, "").lower() != value.lower():
            return None
    return 2 + len(media.params)


def _quality(ranges: list[MediaRange], offer: Offer) -> tuple[float, int]:
    """The weight of the most specific range naming the offer (RFC 9110 12.5.1), and how specific."""
    best: tuple[int, float] | None = None
    for media in ranges:
        specificity = _matches(media, offer)
        if specificity is not None and (best is None or specificity > best[0]):
            best = (specificity, media.q)
    return (best[1], best[0]) if best else (0.0, -1)


def wants_openmetrics(accept: str | None) -> bool:
    """Whether to answer in OpenMetrics: it must be acceptable, weigh more than the text format, or as
    much while named more specifically. No header, or nothing acceptable: the text format."""
    if not accept:
        return False
    ranges = parse_accept(accept)
    om_q, om_specific = _quality(ranges, OPENMETRICS)
    text_q, text_specific = _quality(ranges, TEXT)
    if om_q <= 0:
        return False
    return om_q > text_q or (om_q == text_q and om_specific > text_specific)


def wants_gzip(accept_encoding: str | None) -> bool:
    """gzip when it is acceptable (named with q > 0, or through ``*``) and weighs at least as much as
    identity where identity is named; an unnamed identity is acceptable but not preferred."""
    if not accept_encoding:
        return False
    codings = parse_accept_encoding(accept_encoding)
    gzip_q = codings.get("gzip", codings.get("*", 0.0))
    if gzip_q <= 0:
        return False
    identity_q = codings.get("identity")
    return identity_q is None or gzip_q >= identity_q
