"""The BF16 reference measurement, measured once: the last few kept in memory and, with a
job's ``cache_dir``, on disk as ``bf16-reference-KEY.npz``, under the content key of
everything it depends on (:meth:`.measurement.MeasurementSession.reference_key`).

It stores a measurement's token records and its few scalars; the session turns them back
into a :class:`~.measurement.Measurement`."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .atomic_files import write_atomically

REFERENCE_MEMO: dict[str, Any] = {}
REFERENCE_MEMO_SIZE = 32
_RECORD_FIELDS = ("lp_roll", "lp_train", "seq", "pos", "kl_full", "tv_full")


def remembered(key: str) -> Any | None:
    """The measurement kept in memory under ``key``, or None."""
    return REFERENCE_MEMO.get(key)


def remember(key: str, measurement: Any) -> None:
    """Keep ``measurement`` in memory under ``key`` (the oldest go first)."""
    REFERENCE_MEMO[key] = measurement
    while len(REFERENCE_MEMO) > REFERENCE_MEMO_SIZE:
        REFERENCE_MEMO.pop(next(iter(REFERENCE_MEMO)))


def forget_all() -> None:
    """Drop every measurement kept in memory (the files stay)."""
    REFERENCE_MEMO.clear()


def path_of(key: str, cache_dir: str | None) -> Path | None:
    return Path(cache_dir) / f"bf16-reference-{key}.npz" if cache_dir else None


def stored(key: str, cache_dir: str | None) -> tuple[Any, dict] | None:
    """The token records and scalars stored under ``key`` in ``cache_dir``, or None."""
    path = path_of(key, cache_dir)
    if path is None or not path.is_file():
        return None
    import numpy as np

    from .metrics import TokenRecords

    with np.load(path) as z:
        meta = json.loads(str(z["meta"]))
        arrays: dict[str, Any] = {f: (z[f] if f in z.files else None) for f in _RECORD_FIELDS}
    return TokenRecords(**arrays, n_sequences=meta["n_sequences"]), meta


def store(key: str, cache_dir: str | None, records: Any, meta: dict) -> None:
    """Store token ``records`` and JSON-able ``meta`` under ``key`` in ``cache_dir`` (none: nothing)."""
    path = path_of(key, cache_dir)
    if path is None:
        return
    import numpy as np

    arrays = {f: getattr(records, f) for f in _RECORD_FIELDS if getattr(records, f) is not None}
    scalars = np.array(json.dumps({"n_sequences": records.n_sequences, **meta}))
    write_atomically(path, lambda tmp: np.savez(tmp, meta=scalars, **arrays), suffix=".npz")


__all__ = ["REFERENCE_MEMO", "forget_all", "remember", "remembered", "store", "stored"]
