"""Keep of a real W&B ``.wandb`` file only what ``replay`` reads, gzipped: the labelled real runs stay small.

    python -m devtools.trim_wandb RUN.wandb OUT.wandb.gz

The records kept are the run (its name, id and config), its config updates, its history (what it logged:
the times and its step counter are read) and its system stats; console output, file uploads, telemetry
and the like are left out. Each kept record is written back unchanged, in the log framing the client
wrote (32 KiB blocks, each piece behind its checksum), which exporter/offline/trackers/wandb_run.py reads.
"""

from __future__ import annotations

import gzip
import sys
import zlib
from pathlib import Path

from exporter.offline.trackers.wandb_run import (
    BLOCK,
    FIRST,
    FULL,
    HEADER,
    LAST,
    MAGIC,
    MIDDLE,
    RECORD,
    records,
)

KEPT = ("run", "config", "history", "stats")
VERSION = 0  # the header's version byte, as the client writes it
W_AND_B = 0xBEE1  # the header's second field, as the client writes it


def kept(path: Path) -> list[bytes]:
    """The records of ``path`` that replay reads, in order."""
    from wandb.proto import wandb_internal_pb2 as pb

    out = []
    for data in records(path):
        record = pb.Record()
        record.ParseFromString(data)
        if record.WhichOneof("record_type") in KEPT:
            out.append(data)
    return out


def framed(datas: list[bytes]) -> bytes:
    """The records in the log's framing: 32 KiB blocks, each piece behind its checksum, length and type;
    a block's tail too short for a header is zeros."""
    out = bytearray(HEADER.pack(MAGIC, W_AND_B, VERSION))
    for data in datas:
        first, rest = True, data
        while True:
            left = BLOCK - len(out) % BLOCK
            if left < RECORD.size:
                out += b"\0" * left
                continue
            piece, rest = rest[: left - RECORD.size], rest[left - RECORD.size :]
            kind = (FULL if not rest else FIRST) if first else (LAST if not rest else MIDDLE)
            checksum = zlib.crc32(piece, zlib.crc32(bytes([kind]))) & 0xFFFFFFFF
            out += RECORD.pack(checksum, len(piece), kind) + piece
            first = False
            if not rest:
                break
    return bytes(out)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    source, target = Path(argv[0]), Path(argv[1])
    datas = kept(source)
    target.write_bytes(gzip.compress(framed(datas), compresslevel=9, mtime=0))
    print(f"{target}: {len(datas)} records, {target.stat().st_size} bytes (from {source.stat().st_size})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
