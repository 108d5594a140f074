"""W&B's GraphQL endpoint (``POST <base>/graphql``), for the ``wandb`` client's run logging.

The schema (``wandb_schema.graphql``) is the part of W&B's that the client's runs use; a
query is validated against it by graphql-core (the reference implementation), so a field
the product does not keep is refused with GraphQL's own error, as W&B's server refuses
one.  Resolvers read and act through :mod:`.wandb_actions`; a refusal there is a GraphQL
error with its message, which the client prints as it is.  A mutation needs a read-write
token (:func:`~opdweb.tokens.authentication.check_write`)."""
from __future__ import annotations

import functools
import json
from pathlib import Path

from django.core import signing
from django.urls import reverse

from opdweb.refusals import Refused
from opdweb.runs import wandb_actions as act
from opdweb.runs.models import MlflowExperiment, WandbRun
from opdweb.tokens.authentication import check_write
from opdweb.tokens.models import ApiToken

#: The salt of the signed upload URLs that ``createRunFiles`` hands out (:mod:`.wandb_views`).
UPLOAD_SALT = "opdweb.wandb.upload"
#: How long an upload URL stays good (the client uploads a run's files at its end).
UPLOAD_URL_SECONDS = 24 * 3600


@functools.cache
def schema():
    import graphql

    return graphql.build_schema((Path(__file__).with_name("wandb_schema.graphql")).read_text())


def execute(token: ApiToken, request, body: dict) -> dict:
    """The answer (``{"data": ..., "errors": [...]}``) to one GraphQL request."""
    import graphql

    query, variables = body.get("query"), body.get("variables") or {}
    if not isinstance(query, str) or not isinstance(variables, dict):
        return {"errors": [{"message": "a GraphQL request is {'query': '...', 'variables': {...}}"}]}
    try:
        document = graphql.parse(query, max_tokens=10_000)
    except graphql.GraphQLError as exc:
        return {"errors": [exc.formatted]}
    problems = graphql.validate(schema(), document)
    if problems:
        return {"errors": [p.formatted for p in problems]}
    operation = graphql.get_operation_ast(document, body.get("operationName"))
    if operation is not None and operation.operation == graphql.OperationType.MUTATION:
        check_write(token)
    result = graphql.execute(schema(), document, root_value=Root(token, request), variable_values=variables,
                             operation_name=body.get("operationName"))
    answer: dict = {"data": result.data}
    if result.errors:
        answer["errors"] = [_error(e) for e in result.errors]
    return answer


def _error(error) -> dict:
    formatted = error.formatted
    original = error.original_error
    if original is not None and not isinstance(original, Refused):
        raise original  # not a refusal: the view's own handlers answer (503 for an outage, else a bug)
    return formatted


def _entity(slug: str) -> dict:
    return {"id": f"entity-{slug}", "name": slug, "isTeam": True, "organization": None}


def _project(exp: MlflowExperiment) -> dict:
    slug = exp.team.slug
    return {"id": f"project-{exp.pk}", "name": exp.name, "entityName": slug, "entity": _entity(slug),
            "bucket": lambda info, name, missingOk=True: _bucket(exp, name),
            "run": lambda info, name: _bucket(exp, name)}


def _bucket(exp: MlflowExperiment, name: str) -> dict | None:
    wb = WandbRun.objects.select_related("run", "run__job", "experiment__team").filter(
        experiment=exp, name=name).first()
    return run_shape(wb) if wb is not None else None


def run_shape(wb: WandbRun) -> dict:
    job = wb.run.job
    wandb_config = wb.config.get("_wandb", {}).get("value", {}) if isinstance(wb.config.get("_wandb"), dict) else {}
    return {"id": act.storage_id(wb), "name": wb.name, "displayName": job.name, "description": wb.notes,
            "notes": wb.notes, "group": wb.group, "jobType": wb.job_type, "config": json.dumps(wb.config),
            "summaryMetrics": json.dumps(wb.summary), "sweepName": None, "tags": wb.tags,
            "state": {"running": "running", "succeeded": "finished", "failed": "failed",
                      "cancelled": "killed"}.get(job.state, job.state),
            "stopped": job.cancel_requested, "project": _project(wb.experiment),
            "historyLineCount": wb.history_lines, "eventsLineCount": wb.events_lines,
            "logLineCount": wb.output_lines,
            "historyTail": json.dumps([wb.history_tail] if wb.history_tail else []),
            "eventsTail": json.dumps([wb.events_tail] if wb.events_tail else []),
            "wandbConfig": lambda info, keys=None: json.dumps(
                {k: v for k, v in wandb_config.items() if keys is None or k in keys})}


class Root:
    """The query and mutation fields (graphql-core calls ``Root.<field>(info, **args)``)."""

    def __init__(self, token: ApiToken, request):
        self.token = token
        self.request = request

    # -- queries ------------------------------------------------------------------------
    def viewer(self, info) -> dict:
        token, user = self.token, self.token.user
        return {"id": f"user-{user.pk}", "name": user.get_full_name() or user.username, "entity": token.team.slug,
                "username": user.username, "email": user.email, "admin": False, "flags": "{}",
                "teams": {"edges": [{"node": _entity(token.team.slug)}]}, "apiKeys": {"edges": []},
                "userInfo": "{}"}

    def serverInfo(self, info) -> dict:  # noqa: N802 - GraphQL's name
        return {"features": [], "cliVersionInfo": {}, "latestLocalVersionInfo": None, "frontendHost": None}

    def model(self, info, name=None, entityName=None) -> dict | None:  # noqa: N803
        exp = act.project(self.token, name, entityName)
        return _project(exp) if exp is not None else None

    project = model

    def entity(self, info, name=None) -> dict | None:
        act.check_entity(self.token, name)
        return _entity(self.token.team.slug)

    def organization(self, info, name=None) -> None:
        return None  # no organizations here: the client then uses no org-level flags

    def clientIDMapping(self, info, clientID) -> None:  # noqa: N802, N803
        return None

    # -- mutations ----------------------------------------------------------------------
    def upsertBucket(self, info, input) -> dict:  # noqa: N802, A002
        wb, inserted = act.do_upsert(self.token, input)
        return {"bucket": run_shape(wb), "inserted": inserted}

    def createRunFiles(self, info, input) -> dict:  # noqa: N802, A002
        wb = act.run_in(self.token, input["entityName"], input["projectName"], input["runName"])
        if wb is None:
            raise act.WandbRefused(f"no run {input['runName']!r} in project {input['projectName']!r}", status=404)
        files = []
        for name in input["files"]:
            signed = signing.dumps({"run": wb.run.run_id, "file": name, "token": self.token.pk}, salt=UPLOAD_SALT,
                                   compress=True)
            files.append({"name": name, "uploadUrl": self.request.build_absolute_uri(
                reverse("wandb_upload", args=[signed]))})
        return {"runID": act.storage_id(wb), "uploadHeaders": [], "files": files}

    def markRunFilesUploaded(self, info, input) -> dict:  # noqa: N802, A002
        return {"success": True}

    def notifyScriptableRunAlert(self, info, input) -> dict:  # noqa: N802, A002
        act.do_alert(self.token, input["entityName"], input["projectName"], input["runName"], title=input["title"],
                     text=input["text"], severity=input.get("severity") or "INFO")
        return {"success": True}

    def stopRun(self, info, input) -> dict:  # noqa: N802, A002
        return {"success": act.do_stop(self.token, input["id"])}
