"""W&B's HTTP endpoints under ``/wandb/``: a trainer's ``wandb`` client reports here with
``WANDB_BASE_URL=<opdweb>/wandb`` and ``WANDB_API_KEY=<an API token>`` (sent as HTTP basic
auth, user ``api``): ``graphql`` (:mod:`.wandb_graphql`), the file stream
(:mod:`.wandb_stream`) and the upload URLs ``createRunFiles`` hands out, signed, which put
a run's files (``wandb.save``, its config, summary, requirements, console log) with its
artifacts.  Refusals are JSON ``{"errors": [{"message": ...}]}`` with a 4xx (the client
prints the message), an outage a 503 it retries."""
from __future__ import annotations

import base64
import binascii
import json
import logging

from django.conf import settings
from django.core import signing
from django.db import InterfaceError, OperationalError
from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt

from opdweb.refusals import RETRY_AFTER_OUTAGE, Refused
from opdweb.runs import mlflow_artifacts, wandb_actions, wandb_graphql, wandb_stream
from opdweb.runs.models import MlflowRun
from opdweb.tokens.authentication import check_write, live_token, token_of_secret, unauthenticated
from opdweb.tokens.models import ApiToken
from workers.science.checkpoints.files import StoreUnavailable, TooLarge
from workers.science.checkpoints.uri import clean_key

log = logging.getLogger(__name__)


def _refusal(message: str, status: int, headers=None) -> JsonResponse:
    return JsonResponse({"errors": [{"message": message}], "error": message}, status=status, headers=headers)


def answering(view):
    """``view``'s answer, or its refusal as W&B's JSON error with the refusal's status."""

    @csrf_exempt  # HTTP basic auth with an API token, never a session: nothing a browser could forge
    def wrapped(request, *args, **kwargs):
        try:
            return view(request, *args, **kwargs)
        except Refused as exc:
            return _refusal(str(exc), exc.status, exc.headers)
        except wandb_stream.BadStream as exc:
            return _refusal(f"{exc}; nothing was written", 400)
        except StoreUnavailable as exc:
            log.warning("wandb %s %s: %s", request.method, request.path, exc)
            return _refusal("the artifact store is unreachable; nothing was changed, try again in a moment", 503,
                            RETRY_AFTER_OUTAGE)
        except (OperationalError, InterfaceError):
            log.warning("wandb %s %s: database unreachable", request.method, request.path, exc_info=True)
            return _refusal("the database is unreachable; nothing was changed, try again in a moment", 503,
                            RETRY_AFTER_OUTAGE)

    return wrapped


def _token(request) -> ApiToken:
    """The API token of W&B's basic auth (``api:<key>``), or a bearer token."""
    header = request.META.get("HTTP_AUTHORIZATION", "")
    scheme, _, value = header.strip().partition(" ")
    secret = value.strip()
    if scheme.lower() == "basic":
        try:
            _, _, secret = base64.b64decode(secret, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            raise unauthenticated("the Authorization header's basic credentials are not base64 of 'api:<key>'") \
                from None
    elif scheme.lower() != "bearer":
        secret = ""
    if not secret:
        raise unauthenticated("send an opdweb API token as the W&B API key (WANDB_API_KEY=opd_...); make one on "
                              "/tokens/")
    return token_of_secret(secret)


def _body(request) -> bytes:
    limit = settings.WANDB_MAX_REQUEST_BYTES
    length = int(request.META.get("CONTENT_LENGTH") or 0)
    if length > limit:
        raise Refused(f"a request holds at most {limit:,} bytes; this one has {length:,}; nothing was written",
                      status=413)
    body = request.read(limit + 1)
    if len(body) > limit:
        raise Refused(f"a request holds at most {limit:,} bytes; nothing was written", status=413)
    if request.META.get("HTTP_CONTENT_ENCODING", "").lower() == "gzip":
        raise Refused("gzip bodies are not accepted (this server does not offer FILESTREAM_GZIP)", status=415)
    return body


@answering
def graphql(request):
    if request.method != "POST":
        raise Refused("GraphQL requests are POSTed", status=405)
    token = _token(request)
    try:
        body = json.loads(_body(request))
    except (ValueError, UnicodeDecodeError):
        raise Refused("the body is not JSON", status=400) from None
    if not isinstance(body, dict):
        raise Refused("a GraphQL request is a JSON object", status=400)
    return JsonResponse(wandb_graphql.execute(token, request, body))


@answering
def file_stream(request, entity: str, project: str, run: str):
    if request.method != "POST":
        raise Refused("the file stream is POSTed", status=405)
    token = _token(request)
    check_write(token)
    update = wandb_stream.parse(_body(request))
    return JsonResponse(wandb_actions.do_stream(token, entity, project, run, update))


@answering
def upload(request, signed: str):
    """PUT of one run file to the URL ``createRunFiles`` signed: the file goes with the
    run's artifacts, under ``wandb/``.  The URL names the run, the file and the token; the
    token must still be good and able to write."""
    if request.method != "PUT":
        raise Refused("an upload URL takes a PUT", status=405)
    try:
        grant = signing.loads(signed, salt=wandb_graphql.UPLOAD_SALT, max_age=wandb_graphql.UPLOAD_URL_SECONDS)
    except signing.BadSignature:
        raise Refused("this upload URL is not one this server signed, or it has expired", status=403) from None
    token = live_token(pk=grant["token"])
    check_write(token)
    run = MlflowRun.objects.select_related("job").filter(run_id=grant["run"], job__team=token.team_id).first()
    name = clean_key(str(grant["file"]))
    if run is None or not name:
        raise Refused("the run or file of this upload URL is gone", status=404)
    key = f"{mlflow_artifacts.run_prefix(run)}/wandb/{name}"
    limit = settings.OPDWEB_ARTIFACT_MAX_BYTES
    try:
        mlflow_artifacts.store().write(key, request, max_bytes=limit)
    except TooLarge:
        raise Refused(f"file {name!r} is larger than the limit of {limit} bytes; nothing was kept", status=413) \
            from None
    return JsonResponse({})



@answering
def not_served(request, rest: str):
    """Anything else of W&B's API (the client's own telemetry, ``sdk/otel/...``, included):
    a JSON 404 the client reads as "this server has none"."""
    log.info("wandb endpoint not served: %s /wandb/%s", request.method, rest)
    raise Refused(f"opdweb does not serve the W&B endpoint {request.method} /wandb/{rest} (it keeps runs: "
                  "GraphQL, the file stream and run files)", status=404)
