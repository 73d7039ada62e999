"""What a training log says, as numbers: a pure parser (no I/O, no clock) shared by the live pod-log
source, ``POST /v1/progress`` and the offline ``nccl-check`` command.

Three layers:

- ``parse_cri``: one line of a container log in the CRI format the kubelet writes
  (``<RFC3339Nano> stdout|stderr F|P <text>``); ``strip_prefix`` drops what launchers put in front of a
  line (``[rank3]:``, ``[1,0]<stdout>:``, ``[default0]:``).
- ``PATTERNS``: the progress table, one regex per log style and what it yields (a step, seconds per step,
  or only a sign of progress). Users extend it from a values file (``load_patterns``).
- ``WORKLOAD_LINES``: what a pod runs (``WorkloadHint``: serving, a notebook, batch inference; training
  from the progress table and NCCL's init), and the periodic load lines of inference servers (``ServerLoad``:
  requests running and waiting).
- ``LogState``: fed lines, it keeps derived numbers only (last line time, step, seconds per step, NCCL
  version, network, transports, warning and error counts, the newest server load, the workload hint, a
  few evidence lines for the offline checklist) with bounded memory. Label values it yields come from
  closed vocabularies.

A log is written by the job, which anyone may run, so reading it must cost time linear in its length
whatever it holds: every pattern reads a line's ``window`` only (its first and last 2 KiB), the built-in
patterns are written so that no two quantifiers can share a character (possessive quantifiers), and a
pattern whose parts may lie far apart looks on from the first place its head matches only (``_FIRST``:
a later head would find no match the first misses), and users' patterns are refused unless they pass
``check_cost``.
"""

from __future__ import annotations

import calendar
import json
import os
import re
import stat
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from exporter.policy.thresholds import WORKLOAD_LOG_LINES

# ---- the CRI line ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CriLine:
    t: float  # the runtime's timestamp, Unix seconds
    stream: str  # stdout | stderr
    partial: bool  # P: the runtime split a long line; the next record continues it
    text: str


_TS = re.compile(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:?\d\d)$")


def parse_timestamp(text: str) -> float | None:
    """RFC 3339 with up to nanoseconds and a Z or numeric offset; None when it is not one."""
    m = _TS.match(text)
    if m is None:
        return None
    y, mo, d, h, mi, s, frac, zone = m.groups()
    try:
        t = calendar.timegm((int(y), int(mo), int(d), int(h), int(mi), int(s), 0, 0, 0))
    except (ValueError, OverflowError):
        return None
    if not (1 <= int(mo) <= 12 and 1 <= int(d) <= 31 and int(h) < 24 and int(mi) < 60 and int(s) < 61):
        return None
    if zone != "Z":
        sign = -1 if zone[0] == "+" else 1
        digits = zone[1:].replace(":", "")
        t += sign * (int(digits[:2]) * 3600 + int(digits[2:]) * 60)
    return t + (int(frac) / 10 ** len(frac) if frac else 0.0)


def parse_cri(line: str) -> CriLine | None:
    """One record of a CRI log file, without its newline; None for anything else (junk, a torn write)."""
    parts = line.split(" ", 3)
    if len(parts) < 3 or parts[1] not in ("stdout", "stderr") or parts[2] not in ("F", "P"):
        return None
    t = parse_timestamp(parts[0])
    if t is None:
        return None
    return CriLine(t, parts[1], parts[2] == "P", parts[3] if len(parts) == 4 else "")


# launchers' prefixes: torchrun --tee / log_line_prefix ([rank3]:, [default0]:), mpirun --tag-output
# ([1,0]<stdout>:), and the timestamps kubectl logs --timestamps adds
_PREFIX = re.compile(
    r"^(?:\d{4}-\d\d-\d\dT[\d:.]+(?:Z|[+-][\d:]+) )?"
    r"(?:\[(?:rank|default)?\d+(?:,\d+)?\](?:<std(?:out|err)>)?: ?)?"
)


def strip_prefix(text: str) -> str:
    return _PREFIX.sub("", text, count=1)


# ---- what a pattern reads of a line -------------------------------------------------------------------

SCAN_CHARS = 4096  # the most of one line any pattern reads: progress, NCCL and server lines are far shorter
USER_SCAN_CHARS = 1024  # what a user's pattern reads (the window's head): bounds what check_cost missed
_HALF = SCAN_CHARS // 2 - 1


def window(text: str) -> str:
    """What the patterns read of a line: all of it up to SCAN_CHARS, else its first and last 2 KiB
    joined by a newline, which no pattern's ``.`` crosses (an error at the end of a long structured-log
    line is still seen). Windowing a window returns it unchanged."""
    if len(text) <= SCAN_CHARS:
        return text
    return text[:_HALF] + "\n" + text[-_HALF:]


def _at_cut(m: re.Match[str], text: str) -> bool:
    """A match touching a window's seam may hold a number cut in two."""
    return len(text) == SCAN_CHARS - 1 and text[_HALF] == "\n" and _HALF in (m.end(), m.start() - 1)


# ---- the progress table ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pattern:
    """One log style. ``step`` / ``seconds`` name regex groups (empty: the pattern does not yield it);
    ``seconds_unit``: how the seconds group is written: s, ms, it/s (a rate; its inverse is seconds) or
    unit (a group named ``unit`` holds it/s or s/it, as tqdm writes). ``reach``: the characters of a
    line's window it reads; ``key``: a literal every line it matches holds, looked for first (``in`` is
    far cheaper than a regex that looks on from the start of a line)."""

    name: str
    regex: re.Pattern[str]
    step: str = ""
    seconds: str = ""
    seconds_unit: str = "s"
    reach: int = SCAN_CHARS
    key: str = ""


def _p(name: str, regex: str, step: str = "", seconds: str = "", unit: str = "s", key: str = "") -> Pattern:
    return Pattern(name, re.compile(regex), step, seconds, unit, key=key)


_RATE = r"(?P<sec>\d++(?:\.\d++)?+)\s*+(?P<unit>it/s|s/it)"
# a pattern whose parts may lie far apart in a line looks after the first head only (see the docstring)
_FIRST = r"\A(?>.*?"

# First match wins: the specific styles before the generic ``step N``.
PATTERNS: tuple[Pattern, ...] = (
    # Megatron-LM: " iteration      100/  500000 | consumed samples: ... | elapsed time per iteration (ms):"
    _p(
        "megatron",
        _FIRST + r"iteration\s++(?P<step>\d++)\s*+/\s*+\d++\s*+\|)"
        r".*?elapsed time per iteration \(ms\):\s*+(?P<sec>[\d.]++)",
        "step",
        "sec",
        "ms",
        key="elapsed time per iteration",
    ),
    # DeepSpeed: "steps: 100 loss: 2.3 iter time (s): 1.234 samples/sec: 52.1"
    _p(
        "deepspeed",
        _FIRST + r"steps:\s*+(?P<step>\d++)\b).*?iter time \(s\):\s*+(?P<sec>[\d.]++)",
        "step",
        "sec",
        "s",
        key="iter time (s):",
    ),
    # Lightning's bar: "Epoch 3:  45%|████▌     | 450/1000 [02:10<02:39,  3.45it/s, v_num=0, loss=2.31]";
    # its counter restarts every epoch, so it yields only the time per step
    _p(
        "lightning",
        _FIRST + r"Epoch \d++:\s++\d++%\|).*?\|\s*+\d++/\d++ \[[\d:]++<[\d:?]++,\s*+" + _RATE,
        "",
        "sec",
        "unit",
        key="Epoch ",
    ),
    # tqdm (HF Trainer's bar too): " 12%|█▏        | 120/1000 [01:23<10:12,  1.44it/s]"
    _p("tqdm", r"(?<!\d)(?P<step>\d++)/\d++ \[[\d:]++<[\d:?]++,\s*+" + _RATE, "step", "sec", "unit"),
    # HF Trainer's log dict: "{'loss': 2.3456, 'grad_norm': 1.2, 'learning_rate': 5e-05, 'epoch': 0.12}"
    _p("hf_trainer", _FIRST + r"\{'loss': [-\d.e+naif]++,).*'epoch': [\d.e+-]", key="'epoch': "),
    # the generic counters: "step 100", "step: 100/1000", "iter 57", "global_step=1200", "Iteration 3"
    _p("step", r"(?i)\b(?:global_step|step|iter|iteration)\b\s*+[:=#]?\s*+(?P<step>\d++)\b", "step"),
)

SECONDS_UNITS = ("s", "ms", "it/s", "unit")


class PatternError(ValueError):
    """A user pattern that cannot be used; the message names the entry."""


PATTERNS_FILE_BYTES = 1 << 20  # a patterns file larger than this is refused, not read
USER_PATTERNS = 32  # the most user patterns: each may be tried on every progress line
REGEX_CHARS = 1024  # the longest user regex


def read_patterns(path: str) -> tuple[Pattern, ...]:
    """``--log-patterns``: the file, read up to its bound, as ``load_patterns``. OSError when it cannot
    be read, PatternError (or UnicodeDecodeError) when it cannot be used. A FIFO or a device is refused
    unread: the open does not wait for a writer."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise PatternError("not a regular file")
    with open(fd, encoding="utf-8") as f:
        text = f.read(PATTERNS_FILE_BYTES + 1)
    if len(text.encode()) > PATTERNS_FILE_BYTES:
        raise PatternError(f"too large (over {PATTERNS_FILE_BYTES >> 20} MiB)")
    return load_patterns(text)


def load_patterns(text: str) -> tuple[Pattern, ...]:
    """User patterns (a JSON list of {name, regex, step?, seconds?, seconds_unit?}; the chart writes
    its YAML values as JSON), tried before the built-in table. Each must compile, name only groups
    its regex has, and pass ``check_cost``."""
    try:
        entries = json.loads(text) if text.strip() else []
    except ValueError as exc:
        raise PatternError(f"not JSON ({exc})") from None
    except RecursionError:
        raise PatternError("not JSON (nested too deeply)") from None
    if not isinstance(entries, list):
        raise PatternError("must be a list of {name, regex, step, seconds, seconds_unit}")
    if len(entries) > USER_PATTERNS:
        raise PatternError(f"{len(entries)} patterns: at most {USER_PATTERNS}")
    out = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or not isinstance(entry.get("regex"), str):
            raise PatternError(f"entry {i}: needs a regex")
        unknown = set(entry) - {"name", "regex", "step", "seconds", "seconds_unit"}
        if unknown:
            raise PatternError(f"entry {i}: unknown keys {sorted(unknown)}")
        odd = [k for k, v in entry.items() if not isinstance(v, str)]
        if odd:  # YAML values (the chart's) turn an unquoted y, n, on, off or 1 into a bool or a number
            raise PatternError(f"entry {i}: {', '.join(sorted(odd))} must be strings (quote them)")
        name = str(entry.get("name") or f"custom{i}")[:64]
        if len(entry["regex"]) > REGEX_CHARS:
            raise PatternError(f"{name}: the regex is longer than {REGEX_CHARS} characters")
        try:
            regex = re.compile(entry["regex"])
        except (re.error, RecursionError, OverflowError) as exc:
            raise PatternError(f"{name}: bad regex ({exc})") from None
        step, seconds = str(entry.get("step", "")), str(entry.get("seconds", ""))
        unit = str(entry.get("seconds_unit", "s"))
        for group in (step, seconds):
            if group and group not in regex.groupindex:
                raise PatternError(f"{name}: the regex has no group named {group!r}")
        if unit not in SECONDS_UNITS:
            raise PatternError(f"{name}: seconds_unit must be one of {', '.join(SECONDS_UNITS)}")
        if regex.search("") is not None:  # '', '.*', '\d*': every line would be a sign of progress
            raise PatternError(f"{name}: matches an empty line, so every line would count as progress")
        why = check_cost(regex)
        if why:
            raise PatternError(f"{name}: {why}")
        out.append(Pattern(name, regex, step, seconds, unit, USER_SCAN_CHARS))
    return tuple(out)


# ---- what a user's regex may cost --------------------------------------------------------------------

try:  # the parser's own modules: private, but the same from 3.11 to 3.13
    from re import _constants as _sre
    from re import _parser as _sre_parse
except ImportError:  # pragma: no cover
    _sre = _sre_parse = None

# A probe's search may cost this many times what a linear scan of the same line costs on this machine:
# the ratio, not the time, so that a pattern accepted on one node is accepted on a slower one. A
# quadratic pattern (a leading .*) costs 500-1,000 times a linear scan over the 1 KiB a user pattern
# reads, a few ms, bounded by that reach; a cubic one 100,000 times at 256 characters, seconds at 1 KiB.
PROBE_TIMES_LINEAR = 10_000
PROBE_SECONDS = 0.05  # ...and never more than this CPU whatever the ratio (a check must stay short)
# ...but a search under a millisecond is never too slow: on a short probe the linear scan can read as no
# CPU at all (the thread clock's tick), and any cost is then "ten thousand times" it; a pattern that is
# really super-linear passes a millisecond on the longer probes
PROBE_FLOOR_SECONDS = 0.001
_LINEAR = re.compile(r"(?:\x01|\x02)\x03")  # one engine step per character: a linear search's cost
# probe lengths: fine steps where exponential patterns blow up, then doublings
_PROBE_STEPS = (*range(4, 64, 2), 64, 128, 256, 512, 1024, 2048, 4096)
_NESTED = (
    "nested quantifiers (a repeat inside a repeat, such as (a+)+ or (\\d+\\.){3}) can take "
    "exponential time on one line: write it without"
)


def check_cost(regex: re.Pattern[str], chars: int = USER_SCAN_CHARS) -> str:
    """Why a user's regex could take more than linear time on a line ('' when nothing says so): a
    repeat inside a repeat, read from its parse; or any search of a generated worst case up to
    ``chars`` long (a literal of the pattern, then a run of one character it matches or of one of its
    literals, then one it does not match) taking too long (``_too_slow``). Probes grow in steps and stop
    at the first slow one, so the check itself stays short. A heuristic: it catches the usual shapes,
    not every one; the pattern's reach bounds the rest."""
    sizes = (*(n for n in _PROBE_STEPS if n < chars), chars)
    if _sre is None:  # pragma: no cover - a later Python without them: the probes still run
        return _probe(regex, ("",), ("a", " ", "0"), sizes)
    try:
        tree = _sre_parse.parse(regex.pattern, regex.flags)
    except (re.error, RecursionError):
        return "cannot be checked"
    if _nested(tree.data, _sre, False):
        return _NESTED
    why = _overlap(regex, tree)
    if why:
        return why
    runs: list[str] = []
    one: dict[str, None] = {}
    _atoms(tree.data, _sre, runs, one)
    literals = list(dict.fromkeys(r for r in runs if r))[:8]
    everything = "".join(literals)  # all the literals in a row: a pattern's parts one after another
    heads = dict.fromkeys(("", *literals, *_heads(list(tree.data), regex.flags)))
    return _probe(regex, list(heads)[:16], (*list(one)[:16], *literals, everything), sizes)


def _heads(items: list[tuple[Any, Any]], flags: int) -> Iterator[str]:
    """The pattern's shortest match up to each of its repeats (a literal or a digit, say, before a
    run of blanks): where a worst case starts."""
    made = ""
    for op, av in _flat(items):
        if op in (_sre.MAX_REPEAT, _sre.MIN_REPEAT, _sre.POSSESSIVE_REPEAT, _sre.BRANCH):
            yield made
        made += _shortest([(op, av)], flags)
        if len(made) > 64:
            return


def _children(op: Any, av: Any, s: Any) -> list[list[tuple[Any, Any]]]:
    """The sub-sequences of one parsed node."""
    if op in (s.MAX_REPEAT, s.MIN_REPEAT, s.POSSESSIVE_REPEAT):
        return [list(av[2])]
    if op is s.SUBPATTERN:
        return [list(av[3])]
    if op is s.BRANCH:
        return [list(b) for b in av[1]]
    if op is s.ATOMIC_GROUP:
        return [list(av)]
    if op in (s.ASSERT, s.ASSERT_NOT):
        return [list(av[1])]
    if op is s.GROUPREF_EXISTS:
        return [list(b) for b in av[1:] if b is not None]
    return []


def _nested(items: list[tuple[Any, Any]], sre: Any, inside: bool) -> bool:
    """A repeat of more than one inside another repeat of more than one."""
    for op, av in items:
        many = op in (sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT) and av[1] > 1
        if many and inside:
            return True
        if any(_nested(sub, sre, inside or many) for sub in _children(op, av, sre)):
            return True
    return False


_CATEGORY_CHAR = {
    "CATEGORY_DIGIT": "0",
    "CATEGORY_NOT_DIGIT": "a",
    "CATEGORY_SPACE": " ",
    "CATEGORY_NOT_SPACE": "a",
    "CATEGORY_WORD": "a",
    "CATEGORY_NOT_WORD": " ",
}


def _atoms(items: list[tuple[Any, Any]], sre: Any, runs: list[str], chars: dict[str, None]) -> None:
    """The pattern's literal runs and one character of each thing it matches one character of."""
    run = ""
    for op, av in items:
        if op is sre.LITERAL:
            run += chr(av)
            chars[chr(av)] = None
            continue
        runs.append(run)
        run = ""
        if op is sre.ANY or op is sre.NOT_LITERAL:
            chars["a"] = None
        elif op is sre.IN:
            for kind, value in av:
                if kind is sre.LITERAL:
                    chars[chr(value)] = None
                elif kind is sre.RANGE:
                    chars[chr(value[0])] = None
                elif kind is sre.CATEGORY:
                    chars[_CATEGORY_CHAR.get(str(value), "a")] = None
        for sub in _children(op, av, sre):
            _atoms(sub, sre, runs, chars)
    runs.append(run)


# a repeat allowed more than this many times counts as unbounded (a chain member)
_MANY = 64
_CATEGORY_REGEX = {
    "CATEGORY_DIGIT": r"\d",
    "CATEGORY_NOT_DIGIT": r"\D",
    "CATEGORY_SPACE": r"\s",
    "CATEGORY_NOT_SPACE": r"\S",
    "CATEGORY_WORD": r"\w",
    "CATEGORY_NOT_WORD": r"\W",
}
_ALPHABET = " \t\n\x00\x7f0159aezAEZ_-.,:;=/\\\"'()[]{}<>|#%+*?!@~é"
_OVERLAP = (
    "quantifiers that can match the same run of characters ({what}) follow one another with no "
    "other character between them, so one line of n such characters can cost n^{degree} steps: make "
    "them possessive (*+, ++) or atomic (?>...), or put a literal between them"
)


@dataclass
class _Chain:
    """Unbounded quantifiers in a row that can all take one character (``common``, of the alphabet)."""

    common: frozenset[str] | None = None
    count: int = 0
    free: bool = True  # the search may start it at many places of one run (nothing fixed before it)
    fails: bool = False  # something after its last quantifier can fail (backtracking then tries them all)


def _overlap(regex: re.Pattern[str], tree: Any) -> str:
    """The worst polynomial the pattern's plain structure admits: quantifiers over a common character,
    with no required character outside it between them, each take any share of one run of it, so k of
    them try n^k splits (one more when the search can start the chain anywhere along the run). A
    quadratic pattern is bounded by its 1 KiB reach; cubic and worse are refused."""
    alphabet = "".join(dict.fromkeys(_ALPHABET + "".join(_literal_chars(tree.data, _sre))))
    degree, chain = _degree(list(tree.data), regex.flags, alphabet, top=True)
    if degree < 3:
        return ""
    shown = ", ".join(repr(c) for c in sorted(chain, key=lambda c: (not c.isprintable(), c))[:3])
    return _OVERLAP.format(degree=degree, what=shown)


def _literal_chars(items: list[tuple[Any, Any]], s: Any) -> Iterator[str]:
    for op, av in items:
        if op is s.LITERAL or op is s.NOT_LITERAL:
            yield chr(av)
        elif op is s.IN:
            for kind, value in av:
                if kind is s.LITERAL:
                    yield chr(value)
                elif kind is s.RANGE:
                    yield chr(value[0])
                    yield chr(value[1])
        for sub in _children(op, av, s):
            yield from _literal_chars(sub, s)


def _chars(items: list[tuple[Any, Any]], flags: int, alphabet: str) -> frozenset[str]:
    """The alphabet's characters any single-character atom of ``items`` matches."""
    s = _sre
    out: set[str] = set()
    for op, av in items:
        if op is s.ANY:
            out.update(c for c in alphabet if c != "\n" or flags & re.DOTALL)
        elif op is s.LITERAL or op is s.NOT_LITERAL or op is s.IN:
            out.update(c for c in alphabet if _one_matches(op, av, c, flags))
        for sub in _children(op, av, s):
            out |= _chars(sub, flags, alphabet)
    return frozenset(out)


def _one_matches(op: Any, av: Any, c: str, flags: int) -> bool:
    s = _sre
    fold = (lambda x: x.casefold()) if flags & re.IGNORECASE else (lambda x: x)
    if op is s.LITERAL:
        return fold(chr(av)) == fold(c)
    if op is s.NOT_LITERAL:
        return fold(chr(av)) != fold(c)
    negate, hit = False, False
    for kind, value in av:
        if kind is s.NEGATE:
            negate = True
        elif kind is s.LITERAL:
            hit = hit or fold(chr(value)) == fold(c)
        elif kind is s.RANGE:
            hit = hit or value[0] <= ord(c) <= value[1] or value[0] <= ord(fold(c)) <= value[1]
        elif kind is s.CATEGORY:
            hit = hit or re.fullmatch(_CATEGORY_REGEX.get(str(value), "."), c, flags) is not None
    return hit != negate


def _shortest(items: list[tuple[Any, Any]], flags: int) -> str:
    """A shortest text ``items`` match (a character each class takes for a class)."""
    s = _sre
    out = ""
    for op, av in _flat(items):
        if op is s.LITERAL:
            out += chr(av)
        elif op in (s.NOT_LITERAL, s.IN, s.ANY):
            out += min(_chars([(op, av)], flags, _ALPHABET), default="a")
        elif op in (s.MAX_REPEAT, s.MIN_REPEAT, s.POSSESSIVE_REPEAT):
            out += _shortest(list(av[2]), flags) * min(av[0], 64)
        elif op is s.ATOMIC_GROUP:
            out += _shortest(list(av), flags)
        elif op is s.BRANCH:
            out += min((_shortest(list(b), flags) for b in av[1]), key=len, default="")
    return out


def _min_width(items: list[tuple[Any, Any]]) -> int:
    s = _sre
    width = 0
    for op, av in items:
        if op in (s.LITERAL, s.NOT_LITERAL, s.IN, s.ANY):
            width += 1
        elif op in (s.MAX_REPEAT, s.MIN_REPEAT, s.POSSESSIVE_REPEAT):
            width += av[0] * _min_width(list(av[2]))
        elif op is s.SUBPATTERN or op is s.ATOMIC_GROUP:
            width += _min_width(_children(op, av, s)[0])
        elif op is s.BRANCH or op is s.GROUPREF_EXISTS:
            width += min((_min_width(b) for b in _children(op, av, s)), default=0)
    return width


def _flat(items: list[tuple[Any, Any]]) -> Iterator[tuple[Any, Any]]:
    """A sequence with its plain groups opened (a group does not stop backtracking)."""
    for op, av in items:
        if op is _sre.SUBPATTERN:
            yield from _flat(list(av[3]))
        else:
            yield op, av


def _unbounded(items: list[tuple[Any, Any]]) -> bool:
    s = _sre
    for op, av in items:
        if op in (s.MAX_REPEAT, s.MIN_REPEAT) and av[1] > _MANY:
            return True
        opaque = op is s.ATOMIC_GROUP or op is s.POSSESSIVE_REPEAT
        if not opaque and any(_unbounded(sub) for sub in _children(op, av, s)):
            return True
    return False


def _degree(items: list[tuple[Any, Any]], flags: int, alphabet: str, top: bool) -> tuple[int, frozenset[str]]:
    """The highest degree of a chain in ``items`` (and its common characters); sub-sequences (an
    alternative, a lookaround) are judged on their own as well."""
    s = _sre
    worst, worst_chars = 0, frozenset[str]()
    chain = _Chain()
    fixed = False  # a required character before: the search starts what follows at one place a run

    def close(hazard: bool) -> None:
        nonlocal worst, worst_chars
        degree = chain.count + chain.free
        if chain.count and hazard and degree > worst:
            worst, worst_chars = degree, chain.common or frozenset()

    for op, av in _flat(items):
        for sub in _children(op, av, s):  # alternatives and lookarounds: their own chains
            d, c = _degree(sub, flags, alphabet, top=False)
            if d > worst:
                worst, worst_chars = d, c
        if op is s.AT:
            if str(av) in ("AT_BEGINNING", "AT_BEGINNING_STRING") and not flags & re.MULTILINE:
                fixed = True
            chain.fails = chain.fails or chain.count > 0
            continue
        if op in (s.ASSERT, s.ASSERT_NOT):
            chain.fails = chain.fails or chain.count > 0
            continue
        if op in (s.POSSESSIVE_REPEAT, s.ATOMIC_GROUP, s.GROUPREF):
            close(True)  # nothing backtracks into it: it ends a chain
            chain = _Chain()
            fixed = fixed or _min_width([(op, av)]) > 0
            continue
        many = op in (s.MAX_REPEAT, s.MIN_REPEAT, s.BRANCH, s.GROUPREF_EXISTS) and _unbounded([(op, av)])
        width = _min_width([(op, av)])
        if not many and width == 0:
            continue  # optional and bounded: it may be skipped, so it separates nothing
        chars = _chars([(op, av)], flags, alphabet)
        common = chars if chain.common is None else chain.common & chars
        if many:
            if chain.count and common:
                chain.common, chain.count, chain.fails = common, chain.count + 1, False
            else:
                close(True)
                chain = _Chain(chars, 1, free=not fixed)
            continue
        if chain.count and common:  # a required character the run itself can give
            chain.common, chain.fails = common, True
        else:
            close(True)
            chain = _Chain()
        fixed = True
    close(chain.fails or not top)
    return worst, worst_chars


def _search_cpu(regex: re.Pattern[str], text: str) -> float:
    started = time.thread_time()
    regex.search(text)
    return time.thread_time() - started


def _too_slow(spent: float, text: str) -> bool:
    """More than PROBE_TIMES_LINEAR linear scans of ``text`` (the best of three), or PROBE_SECONDS."""
    linear = min(_search_cpu(_LINEAR, text) for _ in range(3))
    return spent > PROBE_SECONDS or spent > max(PROBE_TIMES_LINEAR * linear, PROBE_FLOOR_SECONDS)


def _probe(regex: re.Pattern[str], heads: Iterable[str], pumps: Iterable[str], sizes: Iterable[int]) -> str:
    """The first probe, a head then a pump repeated, a search of which is too slow (``_too_slow``)."""
    pumps, sizes = tuple(p for p in pumps if p), tuple(sizes)
    for head in heads:
        for pump in pumps:
            for size in sizes:
                text = (head + pump * max(1, (size - len(head)) // len(pump)))[: size - 1] + "\x00"
                spent = _search_cpu(regex, text)
                if _too_slow(spent, text):
                    spent = min(spent, _search_cpu(regex, text))  # twice: a hiccup is not the pattern
                if _too_slow(spent, text):
                    shown = (head + pump * 3)[:40]
                    return (
                        f"too slow on a long line ({spent * 1000:.0f} ms on {len(text)} characters of "
                        f"{shown!r}...): two quantifiers can match the same text; make them possessive "
                        "(*+, ++) or atomic (?>...), and drop a leading .*"
                    )
    return ""


@dataclass(frozen=True, slots=True)
class Progress:
    pattern: str
    step: int | None = None
    seconds: float | None = None  # seconds per step, where the line says


STEP_MAX = 2**53  # the largest step kept: an exact float, as the step is exported as a sample value


def match_progress(text: str, patterns: Iterable[Pattern] = PATTERNS) -> Progress | None:
    text = window(text)
    for p in patterns:
        if p.key in text and (found := match_one(p, text)) is not None:
            return found
    return None


def match_one(p: Pattern, text: str) -> Progress | None:
    """One pattern on one line already cut to its ``window`` (the caller checks ``p.key`` first: it is
    what decides whether the regex, the costly part, runs at all)."""
    m = p.regex.search(text, 0, p.reach)
    if m is None or _at_cut(m, text) or m.end() == p.reach < len(text):
        return None
    step = int(m.group(p.step)) if p.step else None
    if step is not None and step > STEP_MAX:  # digits, not a step: it would overflow a float
        return None
    seconds = _seconds(m, p) if p.seconds else None
    return Progress(p.name, step, seconds)


def _seconds(m: re.Match[str], p: Pattern) -> float | None:
    try:
        value = float(m.group(p.seconds))
    except (TypeError, ValueError):
        return None
    unit = p.seconds_unit
    if unit == "unit":
        unit = "it/s" if m.groupdict().get("unit") == "it/s" else "s"
    if unit == "ms":
        return value / 1000
    if unit == "it/s":
        return 1 / value if value > 0 else None
    return value


# ---- NCCL --------------------------------------------------------------------------------------------

# closed vocabularies, so that label values stay bounded whatever a log says
NETWORKS = ("IB", "Socket", "AWS Libfabric", "IBext", "Other")
INTRA = ("NVLS", "P2P/IPC", "P2P/direct pointer", "P2P/CUMEM", "P2P/IPC/read", "P2P/CUMEM/read", "SHM")
INTER = ("NET/IB", "NET/OFI", "NET/Socket", "NET/Other", "CollNet")
# intra-node transports that mean NVLink writes are not in use (read mode, or through host memory)
OFF_NVLINK = ("P2P/IPC/read", "P2P/CUMEM/read", "SHM")

_VERSION = re.compile(r"NCCL version (\d++\.\d++\.\d+)")
_NETWORK = re.compile(r"Using network (\S+(?: Libfabric)?)")
_VIA = re.compile(r"via (\S+(?: pointer| Libfabric)?(?:/\S+)?)")
_NVLS = re.compile(r"NVLS multicast support is available|Connected NVLS|NVLS comm ")
_PLUGIN_FAIL = re.compile(
    r"NET/Plugin ?: ?(?:Failed to find ncclNetPlugin|No plugin found|dlerror)"
    r"|\A(?>.*?NET/Plugin ?: ?Plugin load ).*returned"
)
_GDR = re.compile(r"GPU Direct RDMA Enabled|/GDRDMA")
# "NET/Socket : Using [0]eth0:10.0.0.11<0>": NCCL's socket network came up (it is tried after IB and
# the plugin, so it is the network when nothing says otherwise); the Bootstrap line is not it
_SOCKET_NET = re.compile(r"NET/Socket ?: ?Using \[")
_NO_IB = re.compile(r"NET/IB ?: ?No device found")
# "comm 0x55d0 rank 0 nRanks 16 nNodes 2 localRanks 8 localRank 0 MNNVL 0" (NCCL 2.19+): NCCL's own count
# of the hosts a communicator spans (GPUs of a multi-node NVLink domain count as one)
_NODES = re.compile(r"\bnNodes (\d++)")
# the prefix of NCCL's own lines, "<host>:<pid>:<tid> [<dev>] ": the host it runs on
_HOST = re.compile(r"^([\w.-]++):\d++:\d++ \[\d++\] ")
HOSTS_KEPT = 16  # distinct hosts remembered: enough to tell one from several, bounded whatever the log


def network_word(raw: str) -> str:
    """``Using network X`` -> one of NETWORKS."""
    if raw.startswith("IBext"):
        return "IBext"
    if "Libfabric" in raw:
        return "AWS Libfabric"
    return raw if raw in NETWORKS else "Other"


def transport(via: str) -> tuple[str, str] | None:
    """A channel line's ``via ...`` -> (scope, transport) from the closed vocabularies."""
    if via.startswith("NET/"):
        net = via[4:]
        if net.startswith("IB"):
            return "inter", "NET/IB"
        if net.startswith(("AWS Libfabric", "OFI", "Libfabric")):
            return "inter", "NET/OFI"
        if net.startswith("Socket"):
            return "inter", "NET/Socket"
        return "inter", "NET/Other"
    if via.startswith("CollNet"):
        return "inter", "CollNet"
    if via.startswith("SHM"):
        return "intra", "SHM"
    if via.startswith("NVLS"):
        return "intra", "NVLS"
    if via.startswith("P2P/"):
        read = via.endswith("/read")
        for kind in ("IPC", "CUMEM"):
            if via.startswith(f"P2P/{kind}"):
                return "intra", f"P2P/{kind}/read" if read else f"P2P/{kind}"
        if via.startswith("P2P/direct pointer"):
            return "intra", "P2P/direct pointer"
    return None


# ---- errors that end jobs, and the known-bad lines ---------------------------------------------------


@dataclass(frozen=True)
class ErrorSign:
    """One way a job-ending error is written. ``kind``: what it counts as (the closed vocabulary of
    ``gpu_pod_log_errors_total{kind}``, which the alerts page for); ``item``: the checklist item it raises
    (``error_<item>``), whose fix can be more precise than the kind's (NCCL's own out-of-memory needs
    other knobs than the framework's)."""

    item: str
    kind: str
    regex: re.Pattern[str]
    fix: str
    key: str = ""  # a literal every line it matches holds, looked for first (as Pattern.key)


def _sign(item: str, regex: str, fix: str, kind: str = "", key: str = "") -> ErrorSign:
    return ErrorSign(item, kind or item, re.compile(regex), fix, key)


# First match wins (a DataLoader worker killed by a Bus error is a bus_error). NCCL WARN lines are matched
# after the launcher's prefix is stripped; the bare forms (at the start of a line) are the "Last error:"
# PyTorch prints under a DistBackendError, which is all a job run without NCCL_DEBUG shows.
ERROR_SIGNS: tuple[ErrorSign, ...] = (
    _sign(
        "bus_error",
        r"(?i)\bbus error\b",
        "/dev/shm is full: mount an emptyDir with medium: Memory at /dev/shm, or fewer workers",
    ),
    _sign(
        "dataloader_killed",
        r"\A(?>.*?DataLoader worker \(pid).*?\) (?:is killed by signal|exited unexpectedly)",
        "a DataLoader worker died: check the /dev/shm size and the pod's memory limit",
        key="DataLoader worker (pid",
    ),
    # NCCL's own allocations (its buffers, per channel and peer): "misc/utils.cc:... NCCL WARN Cuda
    # failure 'out of memory'", "include/alloc.h:... NCCL WARN Cuda failure 2 'out of memory'"
    _sign(
        "nccl_cuda_oom",
        r"(?:NCCL WARN |^)Cuda failure (?:\d++ )?'out of memory'",
        "NCCL could not allocate its buffers on the GPU: they need GPU memory beside the model's, so "
        "lower NCCL_BUFFSIZE or the number of channels (NCCL_MAX_NCHANNELS), leave headroom in the "
        "framework's memory fraction (torch.cuda.set_per_process_memory_fraction, "
        "XLA_PYTHON_CLIENT_MEM_FRACTION), or use a smaller batch or more sharding",
        kind="cuda_oom",
    ),
    _sign(
        "cuda_oom",
        r"CUDA out of memory|OutOfMemoryError",
        "CUDA out of memory: smaller micro-batch, activation checkpointing, or more sharding",
    ),
    _sign(
        "watchdog_timeout",
        r"Watchdog caught collective operation timeout",
        "a collective never completed: find the rank that stopped (first log to go quiet)",
    ),
    _sign(
        "ib_completion_error",
        r"\A(?>.*?NET/IB ?: ?Got completion).*?(?:status=|with error )\d",
        "an RDMA transfer failed (12: retries exceeded): check the links and the fabric",
        key="Got completion",
    ),
    # "misc/socket.cc:... NCCL WARN Net : Connection closed by remote peer 10.0.0.2<45678>", NCCL 2.19+
    # "socketProgress: Connection closed by remote peer node-2<45678>"
    _sign(
        "peer_closed",
        r"\A(?>.*?(?:NCCL WARN |NET/\w++ ?: ?)).*Connection closed by remote peer"
        r"|^(?:Net|socketProgress) ?: ?Connection closed by remote peer",
        "a peer rank closed its connection: it died or was killed. Read the other ranks' logs first (the "
        "first to fail), then the OOM killer (kubectl describe pod: OOMKilled; dmesg) and whether a node "
        "was lost (kubectl get nodes); if every rank was alive, check the network path between the "
        "nodes and NCCL_SOCKET_IFNAME",
        kind="peer_lost",
        key="Connection closed by remote peer",
    ),
    # the service that allocates buffers on this GPU for a peer (bootstrap/proxy): it fails when the
    # peer's request breaks off or the memory is not there
    _sign(
        "rem_allocator",
        r"\[Rem Allocator\] Allocation failed",
        "NCCL's remote allocator could not serve a peer: if the peer went away (a 'Connection closed' "
        "line, other ranks' logs), find why it died first; otherwise memory ran out: a Cuda failure line "
        "just before it means GPU memory, else check the pod's memory limit, ulimit -l and the /dev/shm "
        "size",
        kind="peer_lost",
    ),
    _sign(
        "dist_backend_error",
        r"DistBackendError",
        "NCCL reported the failure to PyTorch: read the NCCL WARN lines just before it",
    ),
)
ERROR_KINDS = tuple(dict.fromkeys(sign.kind for sign in ERROR_SIGNS))
# the families alerts page for
ERROR_FAMILIES: dict[str, tuple[str, ...]] = {
    "shm": ("bus_error", "dataloader_killed"),
    "oom": ("cuda_oom",),
    "collective_timeout": ("watchdog_timeout", "dist_backend_error"),
    "network": ("ib_completion_error", "peer_lost"),
}

# the bring-up checklist's known-bad lines: name -> (regex, status, fix)
KNOWN_BAD: dict[str, tuple[re.Pattern[str], str, str]] = {
    "socket_interface": (
        re.compile(r"NET/Socket ?: ?No usable listening interface found"),
        "fail",
        "set NCCL_SOCKET_IFNAME to an interface that exists and is up in the pod (ip -br addr)",
    ),
    "libcuda": (
        re.compile(r"Failed to open libcuda\.so"),
        "fail",
        "the container cannot load the driver: check the NVIDIA container toolkit and LD_LIBRARY_PATH",
    ),
    "nccl_error_timeout": (
        re.compile(r"NCCL ERROR timeout|\A(?>.*?NCCL WARN ).*[Tt]imeout"),
        "fail",
        "a peer never answered: check that every rank started and that the network between nodes is open",
    ),
    "p2p_disabled": (
        re.compile(r"P2P is disabled|NCCL_P2P_DISABLE set"),
        "warn",
        "unset NCCL_P2P_DISABLE; if P2P is really unavailable, check ACS/IOMMU and the fabric manager",
    ),
}

# ---- what a pod runs: inference servers' load, notebooks ------------------------------------------

# what a pod runs: "batch" is offline (batch) inference, "evaluation" an evaluation run
WORKLOAD_KINDS = ("training", "batch", "evaluation", "serving", "interactive")
# a stronger hint replaces a weaker one; of equal ones the first stays. Training is the weakest: its
# signs (progress bars, step counters, NCCL's init) also show in servers loading or sharding a model,
# and in batch inference.
WORKLOAD_RANK = {"training": 1, "batch": 2, "evaluation": 2, "serving": 2, "interactive": 2}


@dataclass(frozen=True, slots=True)
class WorkloadHint:
    kind: str  # one of WORKLOAD_KINDS
    evidence: str  # what said so: a fixed text of the tables, never log text
    source: str = "log"  # log: the job's own log (never a progress report); process, image, name


@dataclass(frozen=True, slots=True)
class ServerLoad:
    """An inference server's periodic load line: requests being run, and requests waiting for the GPU
    (queued, and vLLM V0's swapped ones: preempted, they wait for KV cache to come back)."""

    running: int
    waiting: int


@dataclass(frozen=True)
class WorkloadLine:
    """One kind of line that shows what a pod runs. ``keys``: literals of which every line the regex
    matches holds one (the prefilter is made of them). A regex with the groups ``running`` and ``waiting``
    (and optionally ``swapped``) is a server's load line."""

    hint: WorkloadHint
    regex: re.Pattern[str]
    keys: tuple[str, ...]

    @property
    def load(self) -> bool:
        return "running" in self.regex.groupindex


def _w(kind: str, evidence: str, regex: str, *keys: str) -> WorkloadLine:
    return WorkloadLine(WorkloadHint(kind, evidence), re.compile(regex), keys)


# First match wins: the load lines first (they also carry numbers). Servers print them only while they
# work (vLLM logs an idle engine at DEBUG; SGLang per batch), so a load's time says how current it is.
# TGI and Triton print no periodic load line; their start-up and router lines say what they are.
WORKLOAD_LINES: tuple[WorkloadLine, ...] = (
    # vLLM V0 (metrics.py): "Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 212.4
    # tokens/s, Running: 3 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 4.1%, ..."; V1
    # (loggers.py): "Engine 000: Avg prompt throughput: ..., Running: 3 reqs, Waiting: 0 reqs, ..."
    _w(
        "serving",
        "vLLM engine stats",
        r"\A(?>.*?Avg prompt throughput: [\d.]++ tokens/s, ).*?Running: (?P<running>\d++) reqs, "
        r"(?:Swapped: (?P<swapped>\d++) reqs, )?(?:Pending|Waiting): (?P<waiting>\d++) reqs",
        "Avg prompt throughput",
    ),
    # SGLang's scheduler: "Decode batch. #running-req: 3, #token: 1234, token usage: 0.05, gen throughput
    # (token/s): 210.5, #queue-req: 0"; "Prefill batch, #new-seq: 1, ..., #running-req: 2, #queue-req: 0"
    _w(
        "serving",
        "SGLang batch stats",
        r"\A(?>.*?(?:Prefill|Decode) batch\b)(?>.*?#running-req: (?P<running>\d++),)"
        r".*?#queue-req: (?P<waiting>\d+)",
        "#running-req",
    ),
    # "Starting vLLM API server 0 on http://0.0.0.0:8000"; older: "vLLM API server version 0.6.3"
    _w(
        "serving",
        "vLLM API server start-up",
        r"Starting vLLM API server|vLLM API server version",
        "Starting vLLM API server",
        "vLLM API server version",
    ),
    _w(
        "serving",
        "SGLang server ready",
        r"The server is fired up and ready to roll",
        "The server is fired up and ready to roll",
    ),
    # TGI's launcher and router name themselves in every line, plain or JSON:
    # "INFO text_generation_launcher: Starting Webserver",
    # "INFO text_generation_router::server: router/src/server.rs:2477: Connected"
    _w(
        "serving",
        "TGI launcher or router",
        r"text_generation_(?:launcher|router)",  # no \b before it: ANSI colour codes touch it
        "_generation_launcher",
        "_generation_router",
    ),
    # "I1002 21:58:57.891440 62 grpc_server.cc:3914] Started GRPCInferenceService at 0.0.0.0:8001"
    _w(
        "serving",
        "Triton server start-up",
        r"Started (?:GRPCInferenceService|HTTPService) at ",
        "Started GRPCInferenceService",
        "Started HTTPService",
    ),
    # uvicorn's access log (vLLM, SGLang, most Python servers):
    # 'INFO:     10.0.0.7:51234 - "POST /v1/chat/completions HTTP/1.1" 200 OK'
    _w(
        "serving",
        "inference API requests",
        r'"POST /(?:v1/(?:chat/)?completions|generate) HTTP/',
        '"POST /',
    ),
    # "[I 2024-08-02 09:49:50.063 ServerApp] Kernel started: 1acc847a-...", "[I 10:00:00.123 NotebookApp] ..."
    _w("interactive", "Jupyter kernel started", r"\bKernel started: ", "Kernel started: "),
    _w(
        "interactive",
        "Jupyter server",
        # no [ inside: each "[I " is looked after up to the next bracket only, so starts never overlap
        r"\[[DIWEC] [^\][]*(?:ServerApp|NotebookApp)\b",  # JupyterHub's SingleUserNotebookApp too
        "ServerApp",
        "NotebookApp",
    ),
    # vLLM's offline LLM.generate bar: "Processed prompts:  45%|####5     | 450/1000 [00:10<00:12, ...]"
    _w("batch", "vLLM offline batch", r"Processed prompts: ++\d++%", "Processed prompts"),
)
_WORKLOAD_KEYS = re.compile("|".join(re.escape(k) for line in WORKLOAD_LINES for k in line.keys))
_LOAD_LINES = tuple(line for line in WORKLOAD_LINES if line.load)
_LOAD_KEYS = re.compile("|".join(re.escape(k) for line in _LOAD_LINES for k in line.keys))
NCCL_HINT = WorkloadHint("training", "NCCL init")
_TOP_RANK = max(WORKLOAD_RANK.values())


def _match_workload(text: str, loads_only: bool = False) -> tuple[WorkloadHint, ServerLoad | None] | None:
    """The first WORKLOAD_LINES entry the line matches (the prefilter already passed), with its load."""
    for line in _LOAD_LINES if loads_only else WORKLOAD_LINES:
        if not any(key in text for key in line.keys):
            continue
        m = line.regex.search(text)
        if m is None:
            continue
        if not line.load:
            return line.hint, None
        waiting = int(m.group("waiting")) + int(m.groupdict().get("swapped") or 0)
        return line.hint, ServerLoad(int(m.group("running")), waiting)
    return None


def match_workload(text: str) -> tuple[WorkloadHint, ServerLoad | None] | None:
    """What one line says a pod runs, and the load it reports when it is a server's load line."""
    text = window(text)
    if _WORKLOAD_KEYS.search(text) is None:
        return None
    return _match_workload(text)


def workload_hint(text: str) -> WorkloadHint | None:
    found = match_workload(text)
    return found[0] if found is not None else None


def server_load(text: str) -> ServerLoad | None:
    found = match_workload(text)
    return found[1] if found is not None else None


def progress_hint(found: Progress) -> WorkloadHint:
    return WorkloadHint("training", f"progress lines ({found.pattern})")


_KEYS = re.compile(
    r"NCCL|[Bb]us error|DataLoader worker|out of memory|OutOfMemoryError|Watchdog caught|DistBackendError"
    r"|Connection closed by remote peer|Rem Allocator"
)
EVIDENCE_CHARS = 300  # an evidence line is cut here: the checklist shows it, it never becomes a label


def _cut(text: str) -> str:
    return text if len(text) <= EVIDENCE_CHARS else text[: EVIDENCE_CHARS - 3] + "..."


@dataclass
class LogState:
    """Derived numbers of one log stream (a container, or the files of an offline check)."""

    last_t: float | None = None  # timestamp of the newest line
    step: int | None = None
    step_t: float | None = None  # when the step last changed
    step_seconds: float | None = None
    version: str = ""
    network: str = ""
    gdrdma: bool = False
    transports: dict[str, set[str]] = field(default_factory=lambda: {"intra": set(), "inter": set()})
    warnings: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    plugin_failed: bool = False
    nccl_lines: int = 0
    lines: int = 0
    evidence: dict[str, str] = field(default_factory=dict)  # check item -> the first line that decided it
    bad: Counter[str] = field(default_factory=Counter)  # KNOWN_BAD name -> lines seen
    signs: Counter[str] = field(default_factory=Counter)  # ErrorSign item -> lines counted
    nodes: int = 0  # the most nNodes of any communicator (0: not said)
    hosts: set[str] = field(default_factory=set)  # hosts NCCL lines come from, at most HOSTS_KEPT
    no_ib: bool = False  # "NET/IB : No device found."
    load: ServerLoad | None = None  # the newest load line of an inference server
    load_t: float | None = None  # its time (None: not known yet, see load_line)
    # the load line's number among the lines fed (``lines``): a caller feeding without times stamps it
    # afterwards from that line's own timestamp
    load_line: int = 0
    workload: WorkloadHint | None = None  # the strongest hint of what runs (the first of equals)
    hint_lines: Counter[str] = field(default_factory=Counter)  # kind -> lines that said it
    first_hints: dict[str, WorkloadHint] = field(default_factory=dict)  # kind -> the first line's hint
    # the hint is of the strongest rank: no other line can change it, only load lines are looked for
    _settled: bool = field(default=False, init=False, repr=False)

    def feed(
        self,
        text: str,
        t: float | None = None,
        patterns: Iterable[Pattern] = PATTERNS,
        count: bool = True,
        progress: bool = True,
    ) -> None:
        """One whole line (CRI record already unwrapped, partials joined). ``t``: its timestamp when
        known. ``count=False`` reads state (transports, step) without counting warnings and errors: the
        tail of a log read at start belongs to the past. ``progress=False`` skips the progress table."""
        text = window(text)
        self.lines += 1
        if t is not None:
            self.last_t = t if self.last_t is None else max(self.last_t, t)
        if _KEYS.search(text) is not None:
            self._keyed(strip_prefix(text), count)
        # a settled hint needs only load lines: a busy server's access log passes the whole table's
        # prefilter with every request
        if (_LOAD_KEYS if self._settled else _WORKLOAD_KEYS).search(text) is not None:
            self._workload_line(text, t)
        if progress:
            self.see_progress(match_progress(text, patterns), t)

    def see_progress(self, found: Progress | None, t: float | None) -> None:
        if found is None:
            return
        if self.workload is None:  # training is the weakest hint: only where nothing else was said
            self.see_hint(progress_hint(found))
        if found.seconds is not None:
            self.step_seconds = found.seconds
        if found.step is None:
            return
        known = self.step is not None and t is not None and self.step_t is not None
        if known and found.step > self.step and found.seconds is None and t > self.step_t:  # type: ignore[operator]
            self.step_seconds = (t - self.step_t) / (found.step - self.step)
        if found.step != self.step:
            self.step, self.step_t = found.step, t

    def see_hint(self, hint: WorkloadHint) -> None:
        """A line saying what runs: it counts once ``workload.log_lines`` lines have said that kind."""
        self.hint_lines[hint.kind] += 1
        hint = self.first_hints.setdefault(hint.kind, hint)  # of equals the first stays
        if self.hint_lines[hint.kind] < WORKLOAD_LOG_LINES.value:
            return
        if self.workload is None or WORKLOAD_RANK[hint.kind] > WORKLOAD_RANK[self.workload.kind]:
            self.workload = hint
            self._settled = WORKLOAD_RANK[hint.kind] == _TOP_RANK

    def _workload_line(self, text: str, t: float | None) -> None:
        """A line the workload prefilter let through: a hint, and a server's load."""
        found = _match_workload(text, loads_only=self._settled)
        if found is None:
            return
        hint, load = found
        self.see_hint(hint)
        if load is not None:
            self.load, self.load_t, self.load_line = load, t, self.lines

    def _keyed(self, text: str, count: bool) -> None:
        if "NCCL" in text:
            self._nccl(text, count)
        for sign in ERROR_SIGNS:
            if sign.key in text and sign.regex.search(text):
                if count:
                    self.errors[sign.kind] += 1
                    self.signs[sign.item] += 1
                self.evidence.setdefault(f"error:{sign.item}", _cut(text))
                break

    def _nccl(self, text: str, count: bool) -> None:
        """One NCCL line: what it says of the job (version, hosts, nodes), its network and transports, a
        known bad sign. Each reader keeps the first line that decided its item as evidence."""
        self.nccl_lines += 1
        if "NCCL WARN" in text:
            if count:
                self.warnings += 1
            self.evidence.setdefault("warning", _cut(text))
        self._nccl_version_host(text)
        self._nccl_network(text)
        if "nNodes" in text and (m := _NODES.search(text)) and int(m.group(1)) > self.nodes:
            self.nodes = int(m.group(1))
            self.evidence["nodes"] = _cut(text)
        self._nccl_transports(text)
        if "NET/Plugin" in text and _PLUGIN_FAIL.search(text):
            self.plugin_failed = True
            self.evidence.setdefault("plugin", _cut(text))
        for name, (regex, _, _) in KNOWN_BAD.items():
            if regex.search(text):
                self.bad[name] += 1
                self.evidence.setdefault(f"bad:{name}", _cut(text))
        self._socket_between_nodes()

    def _nccl_version_host(self, text: str) -> None:
        """NCCL's version (its first statement), and the hosts its lines come from (a second one: the job
        spans nodes)."""
        if not self.version and (m := _VERSION.search(text)):
            self.version = m.group(1)
            self.evidence["version"] = _cut(text)
            self.see_hint(NCCL_HINT)
        if (m := _HOST.match(text)) and len(self.hosts) < HOSTS_KEPT and m.group(1) not in self.hosts:
            self.hosts.add(m.group(1))
            if len(self.hosts) == 2:
                self.evidence["hosts"] = _cut(text)

    def _nccl_network(self, text: str) -> None:
        """The network NCCL uses between nodes ("Using network", else the socket network coming up), and
        whether it found no InfiniBand device."""
        if m := _NETWORK.search(text):
            word = network_word(m.group(1))
            if word != self.network or "Using network" not in self.evidence["network"]:
                self.evidence["network"] = _cut(text)  # the first line that named this network
            self.network = word
        elif not self.network and "NET/Socket" in text and _SOCKET_NET.search(text):
            self.network = "Socket"  # the only network named so far; a later "Using network" wins
            self.evidence["network"] = _cut(text)
        if "NET/IB" in text and _NO_IB.search(text):
            self.no_ib = True
            self.evidence.setdefault("no_ib", _cut(text))

    def _nccl_transports(self, text: str) -> None:
        """A channel's transport ("via ..."), NVLink SHARP (NVLS), GPUDirect RDMA."""
        if " via " in text and (m := _VIA.search(text)):
            found = transport(m.group(1))
            if found is not None:
                scope, name = found
                if name not in self.transports[scope]:
                    self.transports[scope].add(name)
                    self.evidence.setdefault(f"transport:{name}", _cut(text))
        if "NVLS" in text and _NVLS.search(text):
            self.transports["intra"].add("NVLS")
            self.evidence.setdefault("transport:NVLS", _cut(text))
        if ("GDR" in text or "RDMA" in text) and _GDR.search(text):
            self.gdrdma = True
            self.evidence.setdefault("gdrdma", _cut(text))

    def _socket_between_nodes(self) -> None:
        """With the socket network, whatever NCCL sends between nodes goes via NET/Socket: a job known
        to span nodes has that inter-node transport even where its channel lines are not in the log
        (NCCL_DEBUG_SUBSYS without INIT, a log read from its tail). The live metrics say so
        (gpu_pod_nccl_transport, which GpuNcclSocketsWithRdma reads) as the checklist does."""
        if self.network != "Socket" or "NET/Socket" in self.transports["inter"]:
            return
        if self.nodes > 1 or len(self.hosts) > 1:
            self.transports["inter"].add("NET/Socket")
            self.evidence.setdefault(
                "transport:NET/Socket", self.evidence["nodes" if self.nodes > 1 else "hosts"]
            )

    def feed_cri(self, records: Iterable[str], patterns: Iterable[Pattern] = PATTERNS) -> int:
        """CRI records (one per line, no newline); partial records are joined. Returns the records that
        were not CRI (junk), which are skipped."""
        junk, pending, pending_t = 0, [], None
        for record in records:
            cri = parse_cri(record)
            if cri is None:
                junk += 1
                continue
            pending.append(cri.text)
            pending_t = cri.t
            if not cri.partial:
                self.feed("".join(pending), pending_t, patterns)
                pending = []
        return junk


# ---- the NCCL bring-up checklist ----------------------------------------------------------------------


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # pass | warn | fail
    evidence: str
    fix: str = ""

    def as_dict(self) -> dict[str, str]:
        return {"name": self.name, "status": self.status, "evidence": self.evidence, "fix": self.fix}


def checks(s: LogState) -> list[Check]:
    """The checklist of an NCCL_DEBUG=INFO log: each item pass, warn or fail with the line that says so."""
    ev = s.evidence
    out: list[Check] = [_version_check(s)]
    inter = s.transports["inter"]
    if s.network:
        out.append(_network_check(s))
    if s.plugin_failed:
        out.append(
            Check(
                "net_plugin",
                "fail" if s.network == "Socket" and inter else "warn",
                ev["plugin"],
                "the network plugin did not load: check that libnccl-net.so (aws-ofi-nccl, nccl-rdma-sharp) "
                "is on LD_LIBRARY_PATH in the image",
            )
        )
    if s.transports["intra"]:
        out.append(_intra_check(s))
    if inter - {"NET/Socket"}:
        out.append(
            Check(
                "gpudirect_rdma",
                "pass" if s.gdrdma else "warn",
                ev.get("gdrdma", "inter-node channels without /GDRDMA"),
                ""
                if s.gdrdma
                else "GPUDirect RDMA is off: load nvidia-peermem (or dmabuf), check NCCL_NET_GDR_LEVEL",
            )
        )
    for name, (_, status, fix) in KNOWN_BAD.items():
        if s.bad[name]:
            out.append(Check(name, status, ev[f"bad:{name}"], fix))
    out.append(
        Check("nccl_warnings", "warn", ev["warning"], "read the NCCL WARN lines: each is a fallback or fault")
        if s.warnings
        else Check("nccl_warnings", "pass", "no NCCL WARN line")
    )
    for sign in ERROR_SIGNS:
        if s.signs[sign.item]:
            out.append(Check(f"error_{sign.item}", "fail", ev[f"error:{sign.item}"], sign.fix))
    return out


def _version_check(s: LogState) -> Check:
    """NCCL's version line; a log without any NCCL line fails: NCCL_DEBUG is off."""
    if not s.nccl_lines:
        return Check(
            "nccl_debug",
            "fail",
            "no NCCL line in the log",
            "run with NCCL_DEBUG=INFO (and NCCL_DEBUG_SUBSYS=INIT,NET) so NCCL says what it uses",
        )
    if s.version:
        return Check("version", "pass", s.evidence["version"])
    return Check("version", "warn", "no 'NCCL version' line", "the log starts after NCCL's init")


def _intra_check(s: LogState) -> Check:
    """The transports inside the node: a warning for any that does not write over NVLink."""
    intra = s.transports["intra"]
    off = sorted(t for t in intra if t in OFF_NVLINK)
    return Check(
        "intra_node_transport",
        "warn" if off else "pass",
        s.evidence[f"transport:{off[0]}"] if off else s.evidence[f"transport:{sorted(intra)[0]}"],
        "GPUs inside the node do not write over NVLink ("
        + ", ".join(off)
        + "): on NVSwitch systems start nvidia-fabricmanager; check NCCL_P2P_DISABLE/NCCL_P2P_LEVEL "
        "and that the hypervisor allows P2P"
        if off
        else "",
    )


NET_PLUGIN_FIX = (
    "install/enable the network plugin (aws-ofi-nccl with libfabric for EFA, the IB or SHARP plugin), "
    "check NCCL_IB_DISABLE and NCCL_NET, that the RDMA device plugin exposes /dev/infiniband in the pod "
    "and that the pod requests the devices (vpc.amazonaws.com/efa, rdma/...)"
)


def _network_check(s: LogState) -> Check:
    """IB, EFA or a plugin pass. The socket network is the first failure of a multi-node bring-up: it
    fails where the log shows traffic between hosts (a channel via NET/Socket, or, since the socket
    network then carries it, nNodes > 1 or NCCL lines from several hosts; _socket_between_nodes adds
    the transport). It passes where every communicator says nNodes 1 from one host: nothing crosses the
    network. Otherwise it warns: a log without channel or nNodes lines (an older NCCL, INIT not in
    NCCL_DEBUG_SUBSYS, a cut log) cannot tell a single-node job, for which sockets cost nothing, from a
    multi-node one, for which they are the fault; so it is said, with the fix, without failing."""
    ev = s.evidence
    if s.network != "Socket":
        return Check("network", "pass", ev["network"])
    no_ib = " NCCL found no IB/EFA device ('NET/IB : No device found.') and" if s.no_ib else ""
    if "NET/Socket" in s.transports["inter"]:
        if s.nodes > 1:
            spans = f"the job spans {s.nodes} nodes"
        elif len(s.hosts) > 1:
            spans = "the log has NCCL lines from several hosts"
        else:
            spans = "channels between nodes run via NET/Socket"
        return Check(
            "network",
            "fail",
            ev["network"],
            f"{spans};{no_ib} inter-node traffic is on TCP sockets: {NET_PLUGIN_FIX}",
        )
    if s.nodes == 1 and len(s.hosts) <= 1 and not s.transports["inter"]:
        return Check("network", "pass", ev["network"])  # one node: the network carries nothing
    return Check(
        "network",
        "warn",
        ev["network"],
        f"NCCL uses TCP sockets;{no_ib} the log does not show whether the job spans nodes. A single-node "
        f"job can ignore this; for a multi-node one it is the first thing to fix: {NET_PLUGIN_FIX}",
    )


def summary(s: LogState) -> dict[str, object]:
    """The ``nccl-check --json`` object."""
    found = checks(s)
    return {
        "version": s.version or None,
        "network": s.network or None,
        "gdrdma": s.gdrdma,
        "transports": {scope: sorted(names) for scope, names in s.transports.items()},
        "warnings": s.warnings,
        "errors": {kind: n for kind, n in sorted(s.errors.items()) if n},
        "checks": [c.as_dict() for c in found],
    }


def exit_status(found: list[Check]) -> int:
    statuses = {c.status for c in found}
    return 2 if "fail" in statuses else 1 if "warn" in statuses else 0


JOINED_CHARS = 1 << 20  # partial records joined into one line: a log of endless P records stays bounded


def plain_lines(lines: Iterable[str]) -> Iterator[tuple[str, float | None]]:
    """Lines of a saved log: CRI records are unwrapped (partials joined up to JOINED_CHARS, the rest of
    them dropped), anything else is taken as is."""
    pending: list[str] = []
    size = 0
    for line in lines:
        cri = parse_cri(line) if line[:4].isdigit() else None
        if cri is None:
            if pending:
                yield "".join(pending), None
                pending, size = [], 0
            yield line, None
            continue
        if not cri.partial or size + len(cri.text) <= JOINED_CHARS:
            pending.append(cri.text)
            size += len(cri.text)
        if not cri.partial:
            yield "".join(pending), cri.t
            pending, size = [], 0
    if pending:
        yield "".join(pending), None


def dumps(obj: object) -> str:
    return json.dumps(obj, ensure_ascii=False)
