"""Streaming full-data download of a job's points (CSV or JSON lines).

Under ASGI a synchronous iterator would be read whole into memory before sending, so the
rows are pulled chunk by chunk from a server-side cursor through ``sync_to_async``, on the
executor's threads rather than the one thread every request's sync code shares (a long
export would otherwise stand between every other request and its view); the cursor has a
database connection of its own (:func:`~opdweb.traces.queries.iter_points`).
"""
from __future__ import annotations

import csv
import io
import json

from asgiref.sync import sync_to_async
from django.http import StreamingHttpResponse

from opdweb.traces.queries import iter_points


def _format_chunk(rows, fmt: str) -> str:
    if fmt == "csv":
        out = io.StringIO()
        csv.writer(out, lineterminator="\n").writerows(rows)
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
