"""``dcgmi dmon -e FIELDS`` saved to a file: a header of the fields' short names, an ``ID`` line (with
units where the fields have them), then one line per entity per sample; the header may come again.

    #Entity   GPUTL  FBUSD  POWER    SMACT  TENSO
    ID
    GPU 0     97     61234  612.31   0.853  0.412

Fields read (DCGM field id): GPUTL (203, utilization %), MCUTL (204, memory copy utilization %), FBUSD /
FBTTL / FBFRE (252 / 250 / 251, frame buffer MiB; total = used + free without FBTTL), POWER (155, W),
EPLMT / PMLMT (enforced and management power limit, W), PMDEF (default power limit, W), TMPTR (150, C),
MMTMP (memory temperature, C), SMCLK (100, MHz), SMMAX (maximum SM clock, MHz), GRACT (1001, graphics
engine active 0-1: the utilization where GPUTL is not watched), SMACT (1002, SM active 0-1), TENSO (1004,
tensor active 0-1), PCITX / PCIRX (1009 / 1010, PCIe bytes/s), NVLTX / NVLRX (1011 / 1012, NVLink bytes/s),
DVNAM (50, the GPU's name). Other fields are read as unknown columns and ignored. Only ``GPU N``
entities are read (not MIG instances, switches or links). ``N/A`` is a missing value. dcgmi prints no
time: samples come every ``-d`` milliseconds, 1000 by default: ``--period``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from exporter.offline.traceformats.base import MIB, Context, Lines, Sample, Skip, Ticker, gpu_index, number

NAME = "dcgmi dmon"
COMMAND = "dcgmi dmon -e 203,252,155,150,100,1002,1004 > dcgm.log"
TIMED = False
NAMES_GPUS = True
DEFAULT_PERIOD = 1.0  # dcgmi dmon -d 1000

# short name -> (GpuPoint attribute, factor from the field's unit to the base unit)
FIELDS: dict[str, tuple[str, float]] = {
    "GPUTL": ("util", 0.01),
    "MCUTL": ("mem_util", 0.01),
    "FBUSD": ("mem_used_bytes", MIB),
    "FBTTL": ("mem_total_bytes", MIB),
    "POWER": ("power_w", 1.0),
    "EPLMT": ("power_limit_w", 1.0),
    "PMLMT": ("power_limit_w", 1.0),
    "PMDEF": ("power_default_w", 1.0),
    "TMPTR": ("temp_c", 1.0),
    "MMTMP": ("temp_mem_c", 1.0),
    "SMCLK": ("sm_clock_hz", 1e6),
    "SMMAX": ("sm_clock_max_hz", 1e6),
    "SMACT": ("sm_active", 1.0),
    "TENSO": ("tensor_active", 1.0),
    "PCITX": ("pcie_tx_bps", 1.0),
    "PCIRX": ("pcie_rx_bps", 1.0),
    "NVLTX": ("nvlink_tx_bps", 1.0),
    "NVLRX": ("nvlink_rx_bps", 1.0),
}
FREE, NAME_FIELD, GRAPHICS = "FBFRE", "DVNAM", "GRACT"
_ENTITY = re.compile(r"^([A-Za-z][\w-]*)\s+(\S+)(?=\s|$)")


def sniff(head: list[str]) -> bool:
    return any(re.match(r"^#\s*Entity\b", line.strip(), re.I) for line in head)


class _Header:
    def __init__(self, line: str) -> None:
        text = line.rstrip()
        self.tags = text.lstrip()[1:].split()[1:]  # after "#Entity"
        self.starts = [m.start() for m in re.finditer(r"\S+", text)][1:]  # where each tag's column starts
        if text.lstrip().startswith("# "):  # "# Entity": the "#" is a word of its own
            self.starts = self.starts[1:]
        fields = dict(FIELDS)
        if "GPUTL" not in self.tags:
            fields[GRAPHICS] = ("util", 1.0)
        self.columns = [(i, fields[t]) for i, t in enumerate(self.tags) if t in fields]
        self.labels = {attr: self.tags[i] for i, (attr, _) in self.columns}
        self.free = self.tags.index(FREE) if FREE in self.tags else None
        self.name = self.tags.index(NAME_FIELD) if NAME_FIELD in self.tags else None
        self.unused = [t for t in self.tags if t not in fields and t not in (FREE, NAME_FIELD)]
        if self.free is not None and "FBTTL" not in self.tags:
            self.labels = {**self.labels, "mem_total_bytes": "FBUSD+FBFRE"}

    def cells(self, line: str) -> list[str] | None:
        """The row's values: split at blanks, or cut at the header's columns where a value has blanks
        (a name) or is empty."""
        match = _ENTITY.match(line.strip())
        rest = line.strip()[match.end() :] if match else ""
        cells = rest.split()
        if len(cells) == len(self.tags):
            return cells
        if len(self.starts) != len(self.tags) or not self.tags:
            return None
        cut = [line[a:b] for a, b in zip(self.starts, [*self.starts[1:], len(line)], strict=True)]
        return [c.strip() for c in cut]


def read(lines: Lines, ctx: Context) -> Iterator[Sample | Skip]:
    ticker = Ticker()
    header: _Header | None = None
    for number_, line in lines():
        text = line.strip()
        if not text:
            continue
        if text.startswith("#"):
            if re.match(r"^#\s*Entity\b", text, re.I):
                header = _Header(line)
                for tag in header.unused:
                    ctx.unknown(tag)  # remembered once, a bounded number of them
            continue
        if re.match(r"^(ID|Id)\b", text):  # the units line
            continue
        match = _ENTITY.match(text)
        if not match or header is None:
            why = "not a row of dcgmi dmon (ENTITY ID values...)" if header else "a row before dcgmi's header"
            yield Skip(number_, why)
            continue
        if match.group(1).upper() != "GPU":
            continue  # a MIG instance, switch, link or CPU
        cells = header.cells(line)
        if cells is None or len(cells) != len(header.tags):
            yield Skip(number_, f"not one value per field of the header ({len(header.tags)})")
            continue
        try:
            gpu = gpu_index(match.group(2))
            values: dict[str, float | None] = {}
            for i, (attr, scale) in header.columns:
                value = number(cells[i])
                values[attr] = None if value is None else value * scale
            if header.free is not None and "mem_total_bytes" not in values:
                free = number(cells[header.free])
                used = values.get("mem_used_bytes")
                values["mem_total_bytes"] = None if free is None or used is None else used + free * MIB
        except ValueError as exc:
            yield Skip(number_, str(exc))
            continue
        name = cells[header.name] if header.name is not None else ""
        name = "" if name.upper() == "N/A" else name[:200]
        yield Sample(number_, gpu, values, header.labels, name=name, tick=ticker.see(gpu))
