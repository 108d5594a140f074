"""MLflow's proxied artifact API, as its server offers it with ``--serve-artifacts``: a run's
``artifact_uri`` is ``mlflow-artifacts:/<experiment_id>/<run_id>/artifacts``, which the
official client resolves against the tracking URI to
``<opdweb>/mlflow/api/2.0/mlflow-artifacts/artifacts/<experiment_id>/<run_id>/artifacts``
and then PUTs a file to (``log_artifact``, ``log_text``, ``log_dict``, ``log_image``...),
GETs it back (``load_text``, ``download_artifacts``), lists a folder
(``GET .../artifacts?path=``) and DELETEs.

Files go to the store of ``OPDWEB_ARTIFACT_ROOT`` (a folder under ``var/``, or an S3
prefix), under the same key.  Every path is checked (no ``..``, no control character) and
must lie in a run of the token's team: another team's run is refused as the tracking
endpoints refuse it; writing needs a read-write token; one file is at most
``OPDWEB_ARTIFACT_MAX_BYTES`` (413, nothing kept).  Bodies stream through: an upload is
never read whole into memory, a download never either.
"""
from __future__ import annotations

import posixpath
from typing import AsyncIterator
from urllib.parse import unquote

from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import HttpResponse, JsonResponse, StreamingHttpResponse

from opdweb.runs import actions
from opdweb.runs.mlflow_errors import ENDPOINT_NOT_FOUND, MlflowRefused, invalid, not_found
from opdweb.runs.mlflow_shapes import artifact_path
from opdweb.runs.models import MlflowRun
from opdweb.tokens.authentication import check_write
from opdweb.tokens.models import ApiToken
from workers.science.checkpoints.files import StoredFile, StoreUnavailable, TooLarge
from workers.science.checkpoints.stores import Store, store_at
from workers.science.checkpoints.uri import BadURI, clean_key

PATH = "api/2.0/mlflow-artifacts/artifacts"
MULTIPART = "api/2.0/mlflow-artifacts/mpu/"
CHUNK = 1 << 20


def store() -> Store:
    return store_at(str(settings.OPDWEB_ARTIFACT_ROOT))


def run_prefix(run: MlflowRun) -> str:
    return artifact_path(run)


def multipart(request, token: ApiToken) -> HttpResponse:
    """``mlflow-artifacts/mpu/create|complete|abort``: not offered; the 501 (with MLflow's own
    words) is what makes the client send the file in one PUT instead."""
    raise MlflowRefused("Multipart upload is not supported for the current artifact repository",
                        "NOT_IMPLEMENTED", 501)


def answer(request, rest: str, token: ApiToken) -> HttpResponse:
    """The answer to ``request`` on ``<PATH>/<rest>``."""
    if not rest:
        if request.method != "GET":
            raise MlflowRefused(f"{request.method} of the artifact root: list it with GET ?path=", ENDPOINT_NOT_FOUND,
                                405)
        return JsonResponse(listing(token, request.GET.get("path") or ""))
    if request.method == "GET":
        return download(token, rest)
    if request.method == "PUT":
        return upload(token, rest, request)
    if request.method == "DELETE":
        return delete(token, rest)
    raise MlflowRefused(f"{request.method} of an artifact: use GET, PUT or DELETE", ENDPOINT_NOT_FOUND, 405)


def checked(token: ApiToken, path: str, *, file: bool = False) -> tuple[MlflowRun, str]:
    """The run ``path`` lies in (of the token's team) and the path as a store key.  As
    MLflow's server checks it: decoded as often as it decodes, no ``..``, no absolute or
    empty segment, no control character."""
    decoded = path
    for _ in range(5):  # %252e%252e is .. twice over
        decoded, before = unquote(decoded), decoded
        if decoded == before:
            break
    try:
        if decoded.startswith("/") or "//" in decoded or decoded.endswith("/."):
            raise BadURI(f"{path!r} is absolute or has an empty segment")
        clean_key(decoded)
        key = clean_key(path)
    except BadURI as exc:
        raise invalid(f"Invalid artifact path: {exc}") from None
    parts = key.split("/") if key else []
    if len(parts) < 2:
        raise not_found(f"artifacts are kept per run, under <experiment_id>/<run_id>/artifacts: {path!r} names no run")
    run = actions.run_for(token, parts[1])
    if str(run.experiment_id) != parts[0]:
        raise not_found(f"Run with id={parts[1]} is not in experiment {parts[0]}")
    if file and (len(parts) < 4 or parts[2] != "artifacts"):
        raise invalid(f"Invalid artifact path: a file goes under {run_prefix(run)}/, not {path!r}")
    return run, key


def listing(token: ApiToken, path: str) -> dict:
    """MLflow's ``ListArtifacts`` answer: the files and folders directly in ``path``, each
    named relative to it, folders without a size; ``{}`` for nothing."""
    _, key = checked(token, path)
    seen: dict[str, dict] = {}
    for f in store().list(key):
        rest = f.key[len(key):].lstrip("/")
        if not rest:
            continue  # ``path`` is a file: MLflow lists nothing in a file
        name, _, below = rest.partition("/")
        seen[name] = {"path": name, "is_dir": True} if below else {"path": name, "is_dir": False,
                                                                    "file_size": f.size}
    return {"files": [seen[name] for name in sorted(seen)]} if seen else {}


def download(token: ApiToken, path: str) -> StreamingHttpResponse:
    _, key = checked(token, path)
    return file_response(key)


def file_response(key: str) -> StreamingHttpResponse:
    """The file at ``key``, streamed as a download (404 in MLflow's shape when missing)."""
    found = [f for f in store().list(key) if f.key == key]
    if not found:
        raise not_found(f"No artifact at {key!r}")
    response = StreamingHttpResponse(_stream(key), content_type="application/octet-stream")
    response["Content-Length"] = str(found[0].size)
    response["Content-Disposition"] = f'attachment; filename="{_safe_name(posixpath.basename(key))}"'
    response["X-Content-Type-Options"] = "nosniff"
    return response


def _stream(key: str) -> AsyncIterator[bytes]:
    """The file's bytes, a chunk at a time, each read off the event loop: under ASGI, Django
    would gather a plain iterator whole in memory before sending a byte."""
    opened = store().open(key)
    fh = opened.__enter__()

    async def chunks() -> AsyncIterator[bytes]:
        try:
            while chunk := await sync_to_async(fh.read, thread_sensitive=False)(CHUNK):
                yield chunk
        finally:
            await sync_to_async(opened.__exit__, thread_sensitive=False)(None, None, None)

    return chunks()


def _safe_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._-+" else "_" for c in name)[:200] or "artifact"


def upload(token: ApiToken, path: str, request) -> JsonResponse:
    check_write(token)
    _, key = checked(token, path, file=True)
    limit = settings.OPDWEB_ARTIFACT_MAX_BYTES
    try:
        store().write(key, request, max_bytes=limit)
    except TooLarge:
        raise MlflowRefused(f"artifact {path!r} is larger than the limit of {limit} bytes; nothing was kept",
                            status=413) from None
    except StoreUnavailable:
        raise
    except OSError as exc:  # a file where a folder is (or the reverse), a name too long for the disk
        raise invalid(f"Invalid artifact path {path!r}: {exc.strerror or exc}") from None
    return JsonResponse({})


def delete(token: ApiToken, path: str) -> JsonResponse:
    check_write(token)
    _, key = checked(token, path, file=True)
    target = store()
    for f in target.list(key):
        target.delete(f.key)
    return JsonResponse({})


def files_of(run: MlflowRun) -> list[StoredFile]:
    """Every file of the run (for its page), keyed relative to its artifacts folder."""
    prefix = run_prefix(run)
    return [StoredFile(f.key[len(prefix) + 1:], f.size) for f in store().list(prefix)]
