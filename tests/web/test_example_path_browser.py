"""The example path a newcomer walks, in Chromium against the whole stack (daphne, a gpu and a
cpu Celery worker as ``make run`` starts them, the Redis channel layer): the Budgets page's
example calibration (at a smoke size: fewer, shorter runs, a wide tolerance), the vLLM FP8
preset checked against the budget it stored, an approval asked for and given by a teammate
the first person invites, and the vLLM export (:mod:`tests.web.example_path`).  Screenshots
go to ``test-artifacts/example-path/``.

The full-size example is walked and timed by ``benchmarks/bench_example_path.py``."""
import json
from pathlib import Path

import pytest
from django.core.management import call_command

from opdweb.approvals.models import ApprovalRequest
from opdweb.budgets.models import MismatchBudget
from opdweb.jobs.models import Job, JobState
from opdweb.teams.models import Role
from tests.web.browser import JOB_CEILING_MS
from tests.web.example_path import SMOKE, walk
from tests.web.factories import PASSWORD, MembershipFactory

SHOTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "example-path"



@pytest.mark.slow
def test_a_newcomer_reaches_a_budget_a_verdict_an_approval_and_an_export(service_env, start_worker,
                                                                         start_asgi_server, page, toy_student):
    admin = MembershipFactory(role=Role.ADMIN)
    team = admin.team
    call_command("register_demo_models", team=team.slug)  # as make run does: the toy pair in the team
    start_worker("gpu", queues="gpu", OPDWEB_WORKER_DEVICE="cpu")
    start_worker("cpu", queues="cpu", OPDWEB_WORKER_DEVICE="cpu")
    base = "http://" + start_asgi_server()

    done = walk(page, base, admin.user.username, PASSWORD, ceiling_ms=4 * JOB_CEILING_MS, size=SMOKE, shots=SHOTS)

    calibration = Job.objects.get(kind="calibration")
    assert calibration.state == JobState.SUCCEEDED and calibration.result["status"] in ("reached", "not_reached")
    budget = MismatchBudget.objects.get(calibration_job=calibration)
    assert done.budget.endswith(f"/budgets/{budget.pk}/") and budget.checkpoint == toy_student
    admission = Job.objects.get(kind="admission")
    assert admission.config["budget"]["budget"] == budget.budget and admission.result["verdict"] == done.verdict
    assert done.verdict == "pass" and admission.result["multiple_ci"][1] < budget.budget
    approval = ApprovalRequest.objects.get()
    assert approval.state == "approved" and approval.decided_by.username == "reviewer"
    assert approval.requested_by == admin.user and approval.checkpoint == toy_student
    record = approval.config
    export = json.loads(done.export)
    engine_args = export["engine_args"]
    assert (engine_args["quantization"], engine_args["kv_cache_dtype"]) == ("fp8_per_tensor", "fp8_e4m3")
    assert engine_args["model"] == toy_student
    provenance = export["opdweb"]
    assert (provenance["config_hash"], provenance["approval_id"], provenance["admission_job_id"],
            provenance["approved_by"], provenance["verdict"]) == (record.config_hash, approval.pk, admission.pk,
                                                                  "reviewer", "pass")
