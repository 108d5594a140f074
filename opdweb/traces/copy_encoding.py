"""PostgreSQL's binary COPY format, encoded from numpy columns in whole-array operations,
and the COPY itself."""
from __future__ import annotations

from typing import Iterable

import numpy as np

# PostgreSQL binary COPY: signature, flags, header extension; each tuple is a field
# count followed by (length, big-endian value) per field; -1 ends the stream.
_COPY_SIGNATURE = b"PGCOPY\n\xff\r\n\x00" + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x00"
_COPY_TRAILER = b"\xff\xff"
_PG_TYPES = {"int8": (">i8", 8), "int2": (">i2", 2), "float8": (">f8", 8)}


def encode_binary_copy(columns: list[tuple[str, np.ndarray]]) -> memoryview:
    """The whole ``COPY ... FROM STDIN (FORMAT BINARY)`` stream for parallel columns of
    ``(pg_type, array)``, in one buffer filled by whole-array operations: every row's
    field count and lengths are one row pattern broadcast over the rows, then each column
    goes into its field (byte-swapped on the way).  No Python object per row, and no copy
    of the buffer afterwards."""
    n = len(columns[0][1])
    fields = [("count", ">i2")]
    for i, (pg_type, _) in enumerate(columns):
        fields += [(f"len{i}", ">i4"), (f"val{i}", _PG_TYPES[pg_type][0])]
    row = np.zeros(1, dtype=np.dtype(fields))
    row["count"] = len(columns)
    for i, (pg_type, _) in enumerate(columns):
        row[f"len{i}"] = _PG_TYPES[pg_type][1]
    stream = np.empty(len(_COPY_SIGNATURE) + n * row.itemsize + len(_COPY_TRAILER), dtype=np.uint8)
    stream[: len(_COPY_SIGNATURE)] = np.frombuffer(_COPY_SIGNATURE, dtype=np.uint8)
    stream[len(stream) - len(_COPY_TRAILER):] = np.frombuffer(_COPY_TRAILER, dtype=np.uint8)
    body = stream[len(_COPY_SIGNATURE): len(stream) - len(_COPY_TRAILER)]
    body.reshape(n, row.itemsize)[:] = row.view(np.uint8)
    rows = body.view(row.dtype)
    for i, (_, values) in enumerate(columns):
        rows[f"val{i}"] = values
    return memoryview(stream)


def copy_into(cursor, table: str, names: Iterable[str], data: bytes | memoryview) -> None:
    with cursor.copy(f"COPY {table} ({', '.join(names)}) FROM STDIN (FORMAT BINARY)") as copy:
        copy.write(data)
