"""The batched reads a page makes for whole series' history (``/api/jobs/<id>/series/batch``),
laid out by the view so the page can start them from its head."""
from __future__ import annotations

from urllib.parse import urlencode

from opdweb.jobs.api import MAX_SERIES_PER_READ

#: Keys per request, half what the API takes: the first charts come back while the next
#: batch is read.
HISTORY_BATCH_KEYS = MAX_SERIES_PER_READ // 2


def history_reads(job_id: int, keys: list[str], buckets: int = 1000) -> list[str]:
    """One read per ``HISTORY_BATCH_KEYS`` of ``keys``, in their order."""
    chunks = (keys[i:i + HISTORY_BATCH_KEYS] for i in range(0, len(keys), HISTORY_BATCH_KEYS))
    return [f"/api/jobs/{job_id}/series/batch?" + urlencode([("buckets", buckets)] + [("key", key) for key in chunk])
            for chunk in chunks]
