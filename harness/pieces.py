"""The pieces of a ledger: the results of consecutive units, as one file each on the store.

A piece is written once, to a temporary file renamed into place, by the process that computed
its units; its name ``<start>-<end>`` says which (``end`` excluded). A header holds the length
and CRC-32 of the body (a pickled list of each unit's pickled result), so a piece the store
truncated or damaged is found and set aside, not believed. The service reads the same format:
it copies an earlier task's intact pieces into ``reused/`` and says there which task computed
each (``.origins.json``).
"""

from __future__ import annotations

import json
import pickle
import struct
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.files import write_atomic

PIECE_MAGIC = b"SIMRUNP1"
_PIECE_HEADER = struct.Struct("<8sQI")
"""A piece's header: the magic, the length of the body and its CRC-32."""
DAMAGED_SUFFIX = ".damaged"
"""A damaged piece is renamed ``.<name>.damaged``: hidden from listings, kept to look at."""
PIECE_FOLDERS = ("done", "reused")
"""Where the pieces of a ledger are: those its workers wrote, those the service reused."""
REUSED = "reused"
ORIGINS = ".origins.json"
"""In ``reused/``: the task that computed each reused piece, ``{piece: "<run>/<task>"}``,
written by the service's copy (hidden: no piece)."""
ORIGINS_CAP = 16 * 2**20
"""The most read of ``reused/.origins.json``."""


def encode_piece(payloads: Sequence[bytes]) -> bytes:
    """A piece of the pickled results of consecutive units, with its length and checksum."""
    body = pickle.dumps(list(payloads), pickle.HIGHEST_PROTOCOL)
    return _PIECE_HEADER.pack(PIECE_MAGIC, len(body), zlib.crc32(body)) + body


def decode_piece(data: bytes, count: int) -> list[Any]:
    """The results of a piece of ``count`` units; ``ValueError`` when it is damaged.

    A piece without the header (of a harness before checksums) is a pickled list.
    """
    try:
        if data.startswith(PIECE_MAGIC):
            _, length, crc = _PIECE_HEADER.unpack_from(data)
            body = memoryview(data)[_PIECE_HEADER.size :]
            if len(body) != length or zlib.crc32(body) != crc:
                raise ValueError(f"{len(body)} bytes, the header says {length}, or a bad CRC")
            values = list(map(pickle.loads, pickle.loads(body)))
        else:
            values = pickle.loads(data)
    except ValueError:
        raise
    except Exception as error:  # whatever unpickling garbage raises
        raise ValueError(f"cannot be read: {error!r}") from None
    if not isinstance(values, list) or len(values) != count:
        raise ValueError(f"holds {len(values) if isinstance(values, list) else '?'} results")
    return values


def piece_units(name: str) -> tuple[int, int] | None:
    """The units ``start, end`` (end excluded) of a piece by its name ``<start>-<end>``; None
    for a name that is no piece's (a temporary file, one set aside)."""
    first, dash, last = name.partition("-")
    if dash and first.isdigit() and last.isdigit() and int(first) < int(last):
        return int(first), int(last)
    return None


def piece_intact(data: bytes) -> bool:
    """Whether a piece is whole as its header says (length and CRC-32), read without
    unpickling it: what the service checks of a piece it reuses (a piece of a harness before
    checksums cannot be checked so, and is not reused)."""
    if len(data) < _PIECE_HEADER.size or not data.startswith(PIECE_MAGIC):
        return False
    _, length, crc = _PIECE_HEADER.unpack_from(data)
    body = memoryview(data)[_PIECE_HEADER.size :]
    return bool(len(body) == length and zlib.crc32(body) == crc)


def store_pieces(done: Path, units: Sequence[int], payloads: Sequence[bytes]) -> None:
    """Store the pickled results of units (in the order computed), a piece per consecutive run."""
    if units and list(units) == list(range(units[0], units[0] + len(units))):  # in C: fast
        write_atomic(done / f"{units[0]}-{units[0] + len(units)}", encode_piece(payloads))
        return
    begin = 0
    for index in range(1, len(units) + 1):
        if index == len(units) or units[index] != units[index - 1] + 1:
            start, end = units[begin], units[index - 1] + 1
            write_atomic(done / f"{start}-{end}", encode_piece(payloads[begin:index]))
            begin = index


def read_origins(path: Path) -> dict[str, str]:
    """``reused/.origins.json`` as piece name to origin; nothing when absent or not what the
    service writes."""
    try:
        with open(path, "rb") as file:
            data = json.loads(file.read(ORIGINS_CAP))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str)}
