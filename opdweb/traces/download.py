"""Streaming full-data download of a job's points (CSV or JSON lines).

Under ASGI a synchronous iterator would be read whole into memory before sending, so the
rows are pulled chunk by chunk from a server-side cursor through ``sync_to_async``, on the
executor's threads rather than the one thread every request's sync code shares (a long
export would otherwise stand between every other request and its view); the cursor has a
database connection of its own (:func:`~opdweb.traces.queries.iter_points`).

CSV for spreadsheets as much as for parsers: every key is quoted (a key may hold any
character, ``\r`` included, and must read back as it was) and numbers are not; a key a
spreadsheet would run as a formula (starting with ``=``, ``+``, ``-``, ``@``, a tab or a
carriage return) gets a leading ``'``, as OWASP's "CSV injection" advice says, unless it
is a plain number.  Steps, wall times and values are numbers and stay numbers (``-0.5``
is not a formula).  JSON lines carry the keys as they are.
"""
from __future__ import annotations

import csv
import io
import json
import re

from asgiref.sync import sync_to_async
from django.http import StreamingHttpResponse

from opdweb.traces.queries import iter_points

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
_PLAIN_NUMBER = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def spreadsheet_text(text: str) -> str:
    """``text`` as a spreadsheet shows it rather than runs it (see the module docstring)."""
    if text.startswith(FORMULA_STARTS) and not _PLAIN_NUMBER.fullmatch(text):
        return "'" + text
    return text


def _format_chunk(rows, fmt: str) -> str:
    if fmt == "csv":
        out = io.StringIO()
        safe: dict[str, str] = {}  # a chunk holds few keys, each many times
        csv.writer(out, lineterminator="\n", quoting=csv.QUOTE_NONNUMERIC).writerows(
            (safe.get(key) or safe.setdefault(key, spreadsheet_text(key)), step, wall, value)
            for key, step, wall, value in rows)
        return out.getvalue()
    return "".join(
        json.dumps({"key": key, "step": step, "wall_time": wall, "value": value}) + "\n"
        for key, step, wall, value in rows
    )


def export_response(job, fmt: str, keys: list[str] | None) -> StreamingHttpResponse:
    rows = iter_points(job.pk, keys=keys)

    def next_chunk():
        chunk = next(rows, None)
        return None if chunk is None else _format_chunk(chunk, fmt)

    async def stream():
        if fmt == "csv":
            yield "key,step,wall_time,value\n"
        try:
            while (chunk := await sync_to_async(next_chunk, thread_sensitive=False)()) is not None:
                yield chunk
        finally:
            await sync_to_async(rows.close, thread_sensitive=False)()

    content_type = "text/csv" if fmt == "csv" else "application/x-ndjson"
    response = StreamingHttpResponse(stream(), content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="job-{job.pk}-points.{fmt}"'
    return response
