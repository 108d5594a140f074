"""Approvals: a member asks, another approver decides on the evidence of the latest
admission check of exactly that config on that checkpoint; an approval lapses when the
budget is recalibrated or the checkpoint changes; only a current approval exports."""
import pytest
from django.test import Client

from opdweb.approvals.models import ApprovalRequest, ApprovalState
from opdweb.rollouts.actions import do_create_config
from opdweb.rollouts.models import RolloutConfigRecord
from opdweb.teams.models import AuditEntry, Role
from tests.web.approval_world import admission_job, make_budget, make_checkpoint, read_by_worker, recalibrate
from tests.web.factories import MembershipFactory, TeamFactory

pytestmark = pytest.mark.django_db

# verl's FP8 rollout engine (block W8A8, KV at scale 1.0): what the verl export writes as admitted
FP8 = {"weights": "fp8_e4m3", "weight_scale": "block", "activations": "fp8_e4m3", "kv_cache": "fp8_e4m3",
       "kv_scales": "unit"}


class World:
    def __init__(self, tmp_path, settings):
        settings.OPDWEB_MODEL_ROOTS = [tmp_path / "models"]
        self.checkpoint = make_checkpoint(tmp_path / "models")
        self.team = TeamFactory()
        self.member = MembershipFactory(team=self.team, role=Role.MEMBER).user
        self.approver = MembershipFactory(team=self.team, role=Role.APPROVER).user
        self.record, _ = do_create_config(team=self.team, user=self.member, name="fp8 w+kv", data=FP8)
        self.budget = make_budget(self.team, self.checkpoint)

    def client(self, user) -> Client:
        client = Client()
        client.force_login(user)
        return client

    def request(self, user=None) -> ApprovalRequest:
        response = self.client(user or self.member).post(f"/configs/{self.record.pk}/request-approval/",
                                                         {"checkpoint": self.checkpoint, "comment": "for run 12"})
        assert response.status_code == 302, response.content
        return ApprovalRequest.objects.order_by("-pk").first()

    def approved(self, name: str, data: dict, **result) -> ApprovalRequest:
        """A new config of ``data``, checked (a pass, ``result`` in its result) on the
        checkpoint, requested and approved."""
        self.record, _ = do_create_config(team=self.team, user=self.member, name=name, data=data)
        admission_job(self.team, self.checkpoint, data, self.budget, **result)
        approval = self.request()
        self.decide(approval)
        return approval

    def decide(self, approval, decision="approve", user=None, comment="looks fine"):
        return self.client(user or self.approver).post(f"/approvals/{approval.pk}/decide/",
                                                       {"decision": decision, "comment": comment})


@pytest.fixture
def world(tmp_path, settings):
    return World(tmp_path, settings)


def test_an_approver_approves_on_the_latest_passing_check_and_the_config_exports(world):
    admission_job(world.team, world.checkpoint, FP8, world.budget, verdict="fail", multiple=80.0)
    latest = admission_job(world.team, world.checkpoint, {**FP8, "sampling": {"top_p": 1.0}}, world.budget,
                           verdict="pass", multiple=3.2)
    admission_job(world.team, world.checkpoint, {"weights": "fp8_e4m3"}, world.budget)  # another config
    approval = world.request()
    assert (approval.state, approval.checkpoint, approval.requested_by) == ("pending", world.checkpoint, world.member)

    page = world.client(world.approver).get(f"/approvals/{approval.pk}/")
    assert page.status_code == 200 and page.context["evidence"] == latest and page.context["can_decide"]
    html = page.content.decode()
    assert ("3.2×" in html and "95% CI [2.56, 3.84]" in html
            and f"Budget #{world.budget.pk} (opd, k3, arithmetic:3):" in html)
    assert "50× of the unit pair hf BF16 engine / fp32 trainer" in html
    assert '<b>3.2×</b> BF16 <span class="meta pair" id="evidence-pair">(hf BF16 engine / fp32 trainer)</span>' in html

    response = world.decide(approval)
    assert response.status_code == 302
    approval.refresh_from_db()
    assert approval.state == ApprovalState.APPROVED and approval.decided_by == world.approver
    assert (approval.admission_job, approval.budget) == (latest, world.budget)
    assert approval.checkpoint_hash == latest.result["checkpoint_hash"]

    response = world.client(world.member).post(f"/approvals/{approval.pk}/export/verl/")
    assert response.status_code == 200
    assert response["X-Opdweb-Target"] == "verl 0.9.1"
    assert response["X-Opdweb-Checked"].startswith("a Hydra compose of the overrides on the config tree")
    assert response["Content-Disposition"] == f'attachment; filename="{world.record.short_hash}-verl.txt"'
    text = response.content.decode()
    assert world.record.config_hash in text and f"admission check #{latest.pk}" in text
    assert f"by {world.approver.username}" in text
    assert "actor_rollout_ref.rollout.quantization=fp8" in text.splitlines()
    actions = list(AuditEntry.objects.filter(team=world.team).order_by("id").values_list("action", flat=True))
    assert actions == ["config.created", "approval.requested", "approval.approved", "config.exported"]
    assert world.client(world.member).get(f"/teams/{world.team.slug}/audit/").status_code == 200


def test_self_approval_is_refused_and_changes_nothing(world):
    admission_job(world.team, world.checkpoint, FP8, world.budget)
    approval = world.request(user=world.approver)
    response = world.decide(approval, user=world.approver)
    assert response.status_code == 403 and "your own approval request" in response.content.decode()
    approval.refresh_from_db()
    assert approval.state == ApprovalState.PENDING and approval.decided_by is None
    assert not AuditEntry.objects.filter(action__in=["approval.approved", "approval.rejected"]).exists()


def test_a_second_decision_is_a_409_and_changes_nothing(world):
    admission_job(world.team, world.checkpoint, FP8, world.budget)
    approval = world.request()
    assert world.decide(approval).status_code == 302
    approval.refresh_from_db()
    decided = (approval.state, approval.decided_by_id, approval.decided_at, approval.decision_comment)
    other = MembershipFactory(team=world.team, role=Role.ADMIN).user
    for decision, user in (("approve", world.approver), ("reject", other)):
        response = world.decide(approval, decision=decision, user=user, comment="again")
        assert response.status_code == 409 and "already decided" in response.content.decode()
    approval.refresh_from_db()
    assert (approval.state, approval.decided_by_id, approval.decided_at, approval.decision_comment) == decided
    assert AuditEntry.objects.filter(action="approval.approved").count() == 1


@pytest.mark.parametrize("evidence", ["none", "fail", "inconclusive", "other checkpoint"])
def test_approval_needs_a_passing_check_of_this_config_on_this_checkpoint(world, evidence, tmp_path):
    if evidence in ("fail", "inconclusive"):
        admission_job(world.team, world.checkpoint, FP8, world.budget, verdict="pass")
        admission_job(world.team, world.checkpoint, FP8, world.budget, verdict=evidence)  # the latest
    elif evidence == "other checkpoint":
        other = make_checkpoint(tmp_path / "models", "teacher")
        admission_job(world.team, other, FP8, make_budget(world.team, other))
    approval = world.request()
    response = world.decide(approval)
    assert response.status_code == 409
    text = response.content.decode()
    if evidence in ("fail", "inconclusive"):
        assert f"gives {evidence}; approval needs a pass" in text
    else:
        assert "no admission check of this config on this checkpoint has succeeded" in text
    approval.refresh_from_db()
    assert approval.state == ApprovalState.PENDING and approval.admission_job is None
    # Rejecting needs no evidence.
    assert world.decide(approval, decision="reject").status_code == 302
    approval.refresh_from_db()
    assert approval.state == ApprovalState.REJECTED


def test_export_before_approval_or_after_rejection_is_refused(world):
    admission_job(world.team, world.checkpoint, FP8, world.budget)
    approval = world.request()
    client = world.client(world.member)
    for fmt in ("verl", "vllm", "prime-rl", "slime", "yaml"):
        response = client.post(f"/approvals/{approval.pk}/export/{fmt}/")
        assert (response.status_code == 409
                and "only a currently approved config can be exported" in response.content.decode())
    world.decide(approval, decision="reject")
    assert client.post(f"/approvals/{approval.pk}/export/verl/").status_code == 409
    assert client.post(f"/approvals/{approval.pk}/export/word/").status_code == 404
    assert not AuditEntry.objects.filter(action="config.exported").exists()


def test_an_export_for_a_gpu_that_runs_another_kernel_is_refused(world):
    """The approved engine is FP8 W8A8 (block): an A100 (sm_80) has no FP8 tensor cores and runs
    it as Marlin weight-only, another engine; a Hopper (sm_90) runs it as admitted, byte for byte
    the file a download without a GPU gets."""
    admission_job(world.team, world.checkpoint, FP8, world.budget)
    approval = world.request()
    world.decide(approval)
    client = world.client(world.member)
    plain = client.post(f"/approvals/{approval.pk}/export/verl/")
    hopper = client.post(f"/approvals/{approval.pk}/export/verl/", {"gpu": "sm_90"})
    assert plain.status_code == hopper.status_code == 200 and hopper["X-Opdweb-GPU"] == "sm_90"
    assert hopper.content == plain.content and "X-Opdweb-GPU" not in plain
    for fmt in ("verl", "vllm", "slime"):
        ampere = client.post(f"/approvals/{approval.pk}/export/{fmt}/", {"gpu": "sm_80"})
        text = ampere.content.decode()
        assert ampere.status_code == 409 and "on sm_80" in text and "Marlin weight-only" in text, text
    assert client.post(f"/approvals/{approval.pk}/export/yaml/", {"gpu": "sm_80"}).status_code == 200  # no engine
    unknown = client.post(f"/approvals/{approval.pk}/export/verl/", {"gpu": "sm_99"})
    assert unknown.status_code == 400 and "unknown GPU architecture &#x27;sm_99&#x27;" in unknown.content.decode()
    exported = AuditEntry.objects.filter(action="config.exported").order_by("id")
    # verl plain, verl on sm_90, the YAML on sm_80: the refusals left no entry
    assert [(e.detail["format"], e.detail.get("gpu")) for e in exported] == [("verl", None), ("verl", "sm_90"),
                                                                            ("yaml", "sm_80")]
    page = client.get(f"/approvals/{approval.pk}/").content.decode()
    assert '<option value="sm_80">Ampere (A100, A30), sm_80</option>' in page


def test_an_approval_lapses_when_the_budget_is_recalibrated(world):
    admission_job(world.team, world.checkpoint, FP8, world.budget)
    approval = world.request()
    world.decide(approval)
    client = world.client(world.member)
    assert client.post(f"/approvals/{approval.pk}/export/yaml/").status_code == 200
    recalibrate(world.budget)
    response = client.post(f"/approvals/{approval.pk}/export/yaml/")
    assert response.status_code == 409 and "recalibrated" in response.content.decode()
    assert client.get(f"/approvals/{approval.pk}/").context["lapse"] is not None


def test_an_approval_lapses_when_the_checkpoint_changes(world):
    from pathlib import Path

    admission_job(world.team, world.checkpoint, FP8, world.budget)
    approval = world.request()
    world.decide(approval)
    client = world.client(world.member)
    assert client.post(f"/approvals/{approval.pk}/export/verl/").status_code == 200
    (Path(world.checkpoint) / "model.safetensors").write_bytes(b"weights v2")
    assert client.post(f"/approvals/{approval.pk}/export/verl/").status_code == 200  # nobody has read it since
    read_by_worker(world.checkpoint)  # a worker reads the new weights (a describe job)
    response = client.post(f"/approvals/{approval.pk}/export/verl/")
    assert response.status_code == 409 and "changed since it was approved" in response.content.decode()


def test_a_check_made_against_a_superseded_budget_or_an_older_checkpoint_cannot_approve(world):
    from pathlib import Path

    admission_job(world.team, world.checkpoint, FP8, world.budget)
    recalibrate(world.budget)
    approval = world.request()
    response = world.decide(approval)
    assert response.status_code == 409 and "recalibrated" in response.content.decode()
    (Path(world.checkpoint) / "model.safetensors").write_bytes(b"weights v2")
    approval.refresh_from_db()
    assert approval.state == ApprovalState.PENDING


def test_request_input_is_checked(world, tmp_path):
    client = world.client(world.member)
    url = f"/configs/{world.record.pk}/request-approval/"
    response = client.post(url, {"checkpoint": "/etc"})
    assert response.status_code == 400 and "outside the model roots" in response.content.decode()
    world.request()
    response = client.post(url, {"checkpoint": world.checkpoint})
    assert response.status_code == 409 and "already requested" in response.content.decode()
    assert ApprovalRequest.objects.count() == 1


def test_roles_and_teams_bound_who_decides(world):
    admission_job(world.team, world.checkpoint, FP8, world.budget)
    approval = world.request()
    for role in (Role.VIEWER, Role.MEMBER):
        response = world.decide(approval, user=MembershipFactory(team=world.team, role=role).user)
        assert response.status_code == 403 and "needs approver" in response.content.decode()
    outsider = MembershipFactory(role=Role.ADMIN).user
    assert world.decide(approval, user=outsider).status_code == 404
    assert world.client(outsider).get(f"/approvals/{approval.pk}/").status_code == 404
    assert world.client(outsider).post(f"/approvals/{approval.pk}/export/verl/").status_code == 404
    viewer = MembershipFactory(team=world.team, role=Role.VIEWER).user
    response = world.client(viewer).post(f"/configs/{world.record.pk}/request-approval/",
                                         {"checkpoint": world.checkpoint})
    assert response.status_code == 403
    approval.refresh_from_db()
    assert approval.state == ApprovalState.PENDING and ApprovalRequest.objects.count() == 1


def test_a_check_that_names_its_budget_by_id_is_evidence_too(world):
    from tests.web.factories import JobFactory
    from tests.web.results import admission_result
    from workers.science.fingerprint import checkpoint_digest

    check = JobFactory(team=world.team, kind="admission", state="succeeded",
                       config={"model": world.checkpoint, "rollout": FP8, "budget": world.budget.pk},
                       result=admission_result("pass", 2.0, [1.5, 2.5], budget=world.budget.spec(),
                                               checkpoint_hash=checkpoint_digest(world.checkpoint)))
    approval = world.request()
    assert world.decide(approval).status_code == 302
    approval.refresh_from_db()
    assert (approval.state, approval.admission_job, approval.budget) == ("approved", check, world.budget)


def test_a_check_against_another_teams_budget_is_no_evidence(world):
    other_budget = make_budget(TeamFactory(), world.checkpoint)
    admission_job(world.team, world.checkpoint, FP8, other_budget)
    approval = world.request()
    response = world.decide(approval)
    assert response.status_code == 409 and "names no mismatch budget of this team" in response.content.decode()


def test_the_evidence_places_the_config_on_the_budgets_curve(world):
    import re

    level = {"target": 0, "multiple_ci": None, "setting": {}, "accuracies": [], "allowance_points": 2.0}
    curve = [dict(level, multiple=60.0, accuracy_mean=0.30, accuracy_sd=0.01, drop_points=6.0, within=False),
             dict(level, multiple=1.5, accuracy_mean=0.36, accuracy_sd=0.005, drop_points=0.0, within=True),
             dict(level, multiple=10.0, accuracy_mean=0.355, accuracy_sd=0.02, drop_points=0.5, within=True)]
    budget = make_budget(world.team, world.checkpoint, value=10.0, curve=curve)
    admission_job(world.team, world.checkpoint, FP8, budget, multiple=3.2)
    approval = world.request()
    html = world.client(world.approver).get(f"/approvals/{approval.pk}/").content.decode()
    table = html[html.index('id="budget-curve"'):html.index("</table>", html.index('id="budget-curve"'))]
    rows = re.findall(r"<tr[^>]*>\s*<td>(?:<b>)?([\d.]+)", table)
    assert rows == ["1.5", "3.2", "10", "60"]  # the one formatter: 3 significant digits
    assert "36.0 % ± 0.5" in table and "30.0 % ± 1.0" in table and "← this config (pass)" in table


def test_the_approvals_list_filters_by_state(world):
    pending = world.request()
    client = world.client(world.approver)
    assert [a.pk for a in client.get("/approvals/?state=pending").context["approvals"]] == [pending.pk]
    assert list(client.get("/approvals/?state=approved").context["approvals"]) == []
    assert [a.pk for a in client.get("/approvals/").context["approvals"]] == [pending.pk]


def test_an_export_the_trainer_would_build_differently_is_a_409_naming_each_difference(world):
    """FP8 weight-only with calibrated KV scales: vLLM and prime-rl run W8A8 and scale 1.0,
    verl and slime block W8A8: every trainer export is refused, and says why; YAML is not."""
    approval = world.approved("weight-only", {"weights": "fp8_e4m3", "kv_cache": "fp8_e4m3"})
    client = world.client(world.member)
    response = client.post(f"/approvals/{approval.pk}/export/vllm/")
    text = response.content.decode()
    assert response.status_code == 409 and "cannot be exported for vLLM 0.32.0" in text
    assert "FP8 weight-only" in text and "kv_scales calibrated" in text
    response = client.post(f"/approvals/{approval.pk}/export/verl/")
    assert response.status_code == 409 and "128x128 block FP8" in response.content.decode()
    assert client.post(f"/approvals/{approval.pk}/export/yaml/").status_code == 200
    assert AuditEntry.objects.filter(action="config.exported").count() == 1  # the YAML only

    page = client.get(f"/approvals/{approval.pk}/")
    refused = {e["format"].slug: e["refused"] for e in page.context["exports"]}
    assert refused["yaml"] is None and all(refused[slug] for slug in ("vllm", "verl", "prime-rl", "slime"))
    html = page.content.decode()
    assert 'data-format="yaml"' in html and "FP8 weight-only: vLLM&#x27;s online FP8" in html
    assert f'<form method="post" action="/approvals/{approval.pk}/export/yaml/"' in html
    assert "a Hydra compose of the overrides on the config tree of the verl 0.9.1 wheel" in html


def test_an_approval_request_is_refused_where_a_named_trainer_cannot_build_the_config_on_that_checkpoint(world):
    """Saved without a checkpoint, the config passes; on this checkpoint (no KV scales, no
    module names in its config.json) vLLM would run scale 1.0 and cannot place keep_bf16."""
    data = {"kv_cache": "fp8_e4m3", "keep_bf16": [0], "targets": ["vllm"]}
    world.record, _ = do_create_config(team=world.team, user=world.member, name="for vllm", data=data)
    response = world.client(world.member).post(f"/configs/{world.record.pk}/request-approval/",
                                               {"checkpoint": world.checkpoint})
    text = response.content.decode()
    assert response.status_code == 409 and "vLLM 0.32.0: keep_bf16 needs the checkpoint&#x27;s module names" in text
    assert "kv_scales calibrated" in text
    assert not ApprovalRequest.objects.filter(config=world.record).exists()


def test_a_download_by_get_is_refused_and_writes_nothing(world):
    """A download is audited, so it is a POST with the CSRF token: a link on another site
    (a GET, or a POST without the token) downloads nothing and writes nothing."""
    admission_job(world.team, world.checkpoint, FP8, world.budget)
    approval = world.request()
    world.decide(approval)
    assert world.client(world.member).get(f"/approvals/{approval.pk}/export/yaml/").status_code == 405
    cross_site = Client(enforce_csrf_checks=True)
    cross_site.force_login(world.member)
    assert cross_site.post(f"/approvals/{approval.pk}/export/yaml/").status_code == 403
    assert not AuditEntry.objects.filter(action="config.exported").exists()


def test_the_approval_records_each_exports_hash_and_the_page_shows_the_bytes(world, monkeypatch):
    """The hash recorded at the decision is the sha256 of the file downloaded; the page shows
    that file byte for byte; a download the product would now write differently is refused."""
    import hashlib

    admission_job(world.team, world.checkpoint, FP8, world.budget)
    approval = world.request()
    world.decide(approval)
    approval.refresh_from_db()
    assert set(approval.export_hashes) == {"verl", "slime", "yaml"}  # vLLM and prime-rl refuse block W8A8
    client = world.client(world.member)
    response = client.post(f"/approvals/{approval.pk}/export/verl/")
    assert hashlib.sha256(response.content).hexdigest() == approval.export_hashes["verl"]
    assert response["X-Opdweb-Sha256"] == approval.export_hashes["verl"]
    page = client.get(f"/approvals/{approval.pk}/")
    shown = {e["format"].slug: e for e in page.context["exports"]}
    assert shown["verl"]["text"] == response.content.decode() and shown["verl"]["sha256"] == response["X-Opdweb-Sha256"]
    assert "(as approved)" in page.content.decode()

    from opdweb.exports import verl

    monkeypatch.setattr(verl, "ROLLOUT", "actor_rollout_ref.rollout")  # unchanged: still the approved bytes
    assert client.post(f"/approvals/{approval.pk}/export/verl/").status_code == 200
    monkeypatch.setattr(verl, "TARGET", "verl 0.9.2")  # the mapping changed since the approval
    response = client.post(f"/approvals/{approval.pk}/export/verl/")
    assert response.status_code == 409 and "not the file approved" in response.content.decode()


def test_admit_for_this_trainer_is_one_click_from_a_refused_export(world):
    """A weight-only FP8 config refused by verl: the approval page links to the config form
    filled with the engine verl builds; saved, it is a new config naming verl, derived from the first."""
    approval = world.approved("weight-only", {"weights": "fp8_e4m3", "kv_cache": "fp8_e4m3"})
    client = world.client(world.member)
    link = f"/configs/{world.record.pk}/for/verl/"
    assert f'href="{link}"' in client.get(f"/approvals/{approval.pk}/").content.decode()
    form = client.get(link)
    assert form.status_code == 200 and form.context["name"] == "weight-only for verl"
    shown = {row["field"].name: row["value"] for row in form.context["rows"]}
    assert (shown["weight_scale"], shown["activations"], shown["kv_scales"]) == ("block", "fp8_e4m3", "unit")
    from tests.web.test_configs import form_data

    response = client.post(link, form_data(world.team, name="weight-only for verl", weights="fp8_e4m3",
                                           weight_scale="block", activations="fp8_e4m3", kv_cache="fp8_e4m3",
                                           kv_scales="unit", targets="verl"))
    assert response.status_code == 302
    made = RolloutConfigRecord.objects.get(name="weight-only for verl")
    assert made.derived_from == world.record and made.config["targets"] == ["verl"]
    assert client.get(f"/configs/{world.record.pk}/for/megatron/").status_code == 404


# what an HF admission check records of calibrated FP8 KV scales: one key / value scale per layer
CALIBRATED = {"kv_scales": {"source": "calibrated", "path": None,
                            "per_layer": {"format": "fp8_e4m3", "k": [0.03125, 0.5], "v": [0.25, 0.0625]}}}


def test_calibrated_kv_scales_ship_as_a_content_hashed_file_the_vllm_export_references(world):
    """BF16 weights with a calibrated FP8 KV cache, for vLLM: the approval is granted on a
    checkpoint that ships no scales, because the admission check's scales travel as a file;
    the file's bytes are the check's scales, its hash is recorded and named by the export."""
    import hashlib
    import json

    from safetensors.numpy import load

    data = {"kv_cache": "fp8_e4m3", "targets": ["vllm"]}
    approval = world.approved("calibrated kv", data, engine=CALIBRATED)
    approval.refresh_from_db()
    assert approval.state == ApprovalState.APPROVED
    client = world.client(world.member)
    scales = client.post(f"/approvals/{approval.pk}/kv-scales/")
    assert scales.status_code == 200 and scales["Content-Disposition"].endswith('"opdweb-kv-scales.safetensors"')
    sha = hashlib.sha256(scales.content).hexdigest()
    assert scales["X-Opdweb-Sha256"] == sha == approval.export_hashes["kv-scales"]
    tensors = load(scales.content)
    assert {name: float(t) for name, t in tensors.items()} == {
        "model.layers.0.self_attn.k_scale": 0.03125, "model.layers.1.self_attn.k_scale": 0.5,
        "model.layers.0.self_attn.v_scale": 0.25, "model.layers.1.self_attn.v_scale": 0.0625}

    export = json.loads(client.post(f"/approvals/{approval.pk}/export/vllm/").content)
    assert export["opdweb"]["kv_scales_sha256"] == sha and export["opdweb"]["kv_scales_file"]["sha256"] == sha
    assert export["engine_args"]["hf_overrides"]["quantization_config"]["kv_cache_scheme"]["strategy"] == "tensor"
    page = client.get(f"/approvals/{approval.pk}/").content.decode()
    assert f'<code class="sha256">{sha}</code>, as approved' in page
    assert '<span id="verdict-targets">for <b>vLLM 0.32.0</b></span>' in page  # the verdict names its target
    job_page = client.get(f"/jobs/{approval.admission_job_id}/").content.decode()
    assert "For <b>vLLM 0.32.0</b>: the engine each builds from this config is the one measured." in job_page
    yaml_export = client.post(f"/approvals/{approval.pk}/export/yaml/").content.decode()
    assert f"kv_scales_sha256: {sha}" in yaml_export  # every export's provenance names it
    assert AuditEntry.objects.filter(action="config.exported", detail__format="kv-scales").count() == 1
    assert client.get(f"/approvals/{approval.pk}/kv-scales/").status_code == 405


def test_no_scale_file_where_none_applies_and_a_check_without_scales_cannot_ship_calibrated_kv(world):
    unit = world.approved("unit kv", {"kv_cache": "fp8_e4m3", "kv_scales": "unit"}, engine=CALIBRATED)
    client = world.client(world.member)
    response = client.post(f"/approvals/{unit.pk}/kv-scales/")
    assert response.status_code == 404
    assert "no export of this approval ships a KV-scale file" in response.content.decode()
    assert "kv-scales" not in (unit.export_hashes or {}) and 'id="kv-scales"' not in \
        client.get(f"/approvals/{unit.pk}/").content.decode()
    # a check that recorded no per-layer scales: vLLM would run scale 1.0, so a config naming vLLM is refused
    world.record, _ = do_create_config(team=world.team, user=world.member, name="old check",
                                       data={"kv_cache": "fp8_e4m3", "targets": ["vllm"]})
    admission_job(world.team, world.checkpoint, {"kv_cache": "fp8_e4m3", "targets": ["vllm"]}, world.budget)
    response = client.post(f"/configs/{world.record.pk}/request-approval/", {"checkpoint": world.checkpoint})
    assert response.status_code == 409 and "would run scale 1.0" in response.content.decode()


def test_where_a_trainer_cannot_keep_layers_the_page_shows_what_the_all_quantized_fallback_measures(world):
    """Block W8A8 with layer 0 (its modules and its KV cache) kept BF16: verl's SGLang path
    has no per-layer KV exception and slime keeps nothing, so the page shows the fallback,
    every layer quantized: unmeasured at first, then the admission check of that engine
    (whatever trainer it named), and the KV capacity of each (4 layers, by hand: all FP8 2x
    BF16's tokens; layer 0 in BF16: 4 * 2 / (2 + 3 * 1) = 1.6x)."""
    import json
    from pathlib import Path

    from tests.web.approval_world import make_budget

    geometry = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "num_hidden_layers": 4,
                "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 64}
    (Path(world.checkpoint) / "config.json").write_text(json.dumps(geometry))
    read_by_worker(world.checkpoint)
    world.budget = make_budget(world.team, world.checkpoint)
    block = {"weights": "fp8_e4m3", "weight_scale": "block", "activations": "fp8_e4m3", "kv_cache": "fp8_e4m3",
             "kv_scales": "unit"}
    approval = world.approved("layer 0 kept", {**block, "keep_bf16": [0]})
    client = world.client(world.member)
    page = client.get(f"/approvals/{approval.pk}/")
    fallback = page.context["fallback"]
    assert fallback["trainers"] == ["verl 0.9.1", "slime 624b824a898a (SGLang 0.5.15.post1)"]
    assert fallback["job"] is None and 'id="fallback-unmeasured"' in page.content.decode()
    assert fallback["capacity"] == {"admitted": pytest.approx(1.6), "fallback": pytest.approx(2.0)}
    assert "KV cache: 2× BF16's tokens with every layer quantized, 1.6× as approved." in page.content.decode()

    measured = admission_job(world.team, world.checkpoint, {**block, "targets": ["slime"]}, world.budget,
                             multiple=4.5)
    admission_job(world.team, world.checkpoint, {**block, "kv_scales": "calibrated"}, world.budget, multiple=9.0)
    page = client.get(f"/approvals/{approval.pk}/")
    assert page.context["fallback"]["job"] == measured
    assert '<b id="fallback-multiple">4.5×</b>' in page.content.decode()
    plain = world.approved("nothing kept", block)
    assert world.client(world.member).get(f"/approvals/{plain.pk}/").context["fallback"] is None


def test_an_admission_checks_page_leads_to_its_config_and_the_next_step(world):
    """From the verdict: the config it checked, "Request approval" for that checkpoint (a
    passing check only), and "Admit for" each trainer the config does not name yet."""
    import re

    passing = admission_job(world.team, world.checkpoint, FP8, world.budget)
    client = world.client(world.member)
    page = client.get(f"/jobs/{passing.pk}/").content.decode()
    assert f'<a id="admission-config" href="/configs/{world.record.pk}/">fp8 w+kv</a>' in page
    assert re.findall(r'href="/configs/\d+/for/([a-z-]+)/"', page) == ["vllm", "verl", "prime-rl", "slime", "skyrl"]
    form = re.search(r'<form method="post" action="(/configs/\d+/request-approval/)".*?name="checkpoint" '
                     r'value="([^"]+)"', page, re.S)
    assert form and form.group(2) == world.checkpoint
    response = client.post(form.group(1), {"checkpoint": form.group(2)})  # the button's request
    assert response.status_code == 302 and ApprovalRequest.objects.filter(config=world.record).count() == 1
    failing = admission_job(world.team, world.checkpoint, FP8, world.budget, verdict="fail", multiple=80.0)
    page = client.get(f"/jobs/{failing.pk}/").content.decode()
    assert 'id="admission-config"' in page and 'id="request-approval"' not in page
    unsaved = admission_job(world.team, world.checkpoint, {"weights": "fp8_e4m3"}, world.budget)
    assert 'id="admission-next"' not in client.get(f"/jobs/{unsaved.pk}/").content.decode()


def test_an_admission_checks_page_says_which_gpus_kernels_it_stands_for(world):
    """The engine's ``kernels`` record (issue 38): FP8 W8A8 measured by emulation on a CPU
    stands for Ada / Hopper's kernels; a check stored before the record says nothing."""
    kernels = {"gemm": "w8a8", "backend": "emulated", "ran_on": "cpu",
               "stands_for": "Ada (sm_89), Hopper (sm_90) and newer: FP8 W8A8 kernels"}
    recorded = admission_job(world.team, world.checkpoint, FP8, world.budget, engine={"kernels": kernels})
    client = world.client(world.member)
    page = client.get(f"/jobs/{recorded.pk}/").content.decode()
    assert ('<p class="meta" id="kernels">Measured w8a8 GEMMs (emulated, on cpu): they stand for Ada (sm_89), '
            "Hopper (sm_90) and newer: FP8 W8A8 kernels.</p>") in page
    older = admission_job(world.team, world.checkpoint, FP8, world.budget)
    assert 'id="kernels"' not in client.get(f"/jobs/{older.pk}/").content.decode()


def test_a_refused_approval_request_redraws_the_config_page_with_the_input_kept(world):
    page_url = f"http://testserver/configs/{world.record.pk}/"
    before = ApprovalRequest.objects.count()
    response = world.client(world.member).post(
        f"/configs/{world.record.pk}/request-approval/",
        {"checkpoint": "/nowhere/student", "comment": "for run 12 <b>"}, HTTP_REFERER=page_url)
    html = response.content.decode()
    assert response.status_code == 400 and 'id="request-approval"' in html  # the config page, under the 4xx
    message = html.split('id="refusal" role="alert">', 1)[1].split("<", 1)[0].strip()
    assert message and html.count(message) == 1  # said once, above the page
    assert 'value="/nowhere/student"' in html and "for run 12 &lt;b&gt;</textarea>" in html  # kept, escaped
    assert ApprovalRequest.objects.count() == before
    # Without a page of ours behind the post (an API-like client), the styled refusal page, as before.
    bare = world.client(world.member).post(f"/configs/{world.record.pk}/request-approval/",
                                           {"checkpoint": "/nowhere/student"})
    assert bare.status_code == 400 and 'class="card problem"' in bare.content.decode()


def test_an_upgrade_reads_what_approvals_rely_on_and_they_hold_again(world, tmp_path):
    """Approvals granted before checkpoints were read by workers: their checkpoint has no
    description, so they say so and do not export; ``read_checkpoints`` (run at every start)
    queues one describe job per unread checkpoint, and once a worker ran it they export."""
    from django.core.management import call_command

    from opdweb.jobs.models import Job
    from opdweb.registry.models import CheckpointDescription
    from tests.web.approval_world import worker_runs
    from workers.science.kinds import Kind

    admission_job(world.team, world.checkpoint, FP8, world.budget)
    approval = world.request()
    world.decide(approval)
    CheckpointDescription.objects.all().delete()  # as an installation from before descriptions
    client = world.client(world.member)
    response = client.post(f"/approvals/{approval.pk}/export/verl/")
    assert response.status_code == 409 and "no worker has read the checkpoint" in response.content.decode()

    call_command("read_checkpoints", verbosity=0)
    call_command("read_checkpoints", verbosity=0)  # a second start queues nothing more
    describes = list(Job.objects.filter(kind=Kind.DESCRIBE))
    assert [job.config["model"] for job in describes] == [world.checkpoint]
    worker_runs(describes[0])
    assert client.post(f"/approvals/{approval.pk}/export/verl/").status_code == 200
    call_command("read_checkpoints", verbosity=0)  # read now: nothing queued
    assert Job.objects.filter(kind=Kind.DESCRIBE).count() == 1


def test_trainer_state_beside_the_weights_never_lapses_an_approval_and_older_hashes_hold(world):
    """An installation of before December 2026 hashed a checkpoint with the trainer state
    saved beside its weights (optimizer, scheduler, training arguments): its admission check
    and approval hold that hash.  ``read_checkpoints`` reads the checkpoint again, the
    approval holds on; a new approval rests on the weights alone, so a copy without trainer
    state is the same checkpoint, and only other weights lapse it."""
    from pathlib import Path

    from django.core.management import call_command

    from opdweb.approvals.currency import lapse_reason
    from opdweb.jobs.models import Job
    from opdweb.registry.models import CheckpointDescription
    from tests.web.approval_world import worker_runs
    from workers.science.fingerprint import checkpoint_digest, checkpoint_digest_with_trainer_state
    from workers.science.kinds import Kind

    folder = Path(world.checkpoint)
    weights_only = checkpoint_digest(folder)
    for name in ("optimizer.pt", "scheduler.pt", "training_args.bin"):
        (folder / name).write_bytes(f"{name} at step 100".encode())
    before = checkpoint_digest_with_trainer_state(folder)
    assert checkpoint_digest(folder) == weights_only != before

    # Before: the worker's description and the admission check hold the hash with trainer state.
    CheckpointDescription.objects.all().delete()
    read_by_worker(world.checkpoint)
    CheckpointDescription.objects.update(digest=before, digest_with_trainer_state="")  # as a worker of before read it
    old_check = admission_job(world.team, world.checkpoint, FP8, world.budget)
    old_check.result["checkpoint_hash"] = before
    old_check.save(update_fields=["result"])
    old = world.request()
    assert world.decide(old).status_code == 302
    old.refresh_from_db()
    assert (old.state, old.checkpoint_hash) == (ApprovalState.APPROVED, before)

    # The upgrade: read again at the next start (once), and the approval holds.
    call_command("read_checkpoints", verbosity=0)
    call_command("read_checkpoints", verbosity=0)
    [describe] = Job.objects.filter(kind=Kind.DESCRIBE)
    worker_runs(describe)
    assert CheckpointDescription.objects.filter(uri=world.checkpoint).first().digest == weights_only
    assert lapse_reason(old) is None
    assert world.client(world.member).post(f"/approvals/{old.pk}/export/verl/").status_code == 200
    call_command("read_checkpoints", verbosity=0)
    assert Job.objects.filter(kind=Kind.DESCRIBE).count() == 1

    # Today: approved on the weights; the trainer state saved again, then dropped, changes nothing.
    new = world.approved("fp8 w+kv, checked today", {**FP8, "sampling": {"top_p": 1.0}})
    new.refresh_from_db()
    assert (new.state, new.checkpoint_hash) == (ApprovalState.APPROVED, weights_only)
    (folder / "optimizer.pt").write_bytes(b"optimizer.pt at step 101")
    read_by_worker(world.checkpoint)
    assert lapse_reason(new) is None and lapse_reason(old) == (
        f"the checkpoint {world.checkpoint} changed since it was approved (approval #{old.pk} lapsed)")
    for name in ("optimizer.pt", "scheduler.pt", "training_args.bin"):
        (folder / name).unlink()
    read_by_worker(world.checkpoint)
    assert lapse_reason(new) is None
    exported = world.client(world.member).post(f"/approvals/{new.pk}/export/verl/")
    assert exported.status_code == 200, exported.content.decode()[-3000:]
    (folder / "model.safetensors").write_bytes(b"weights v2")
    read_by_worker(world.checkpoint)
    assert "changed since it was approved" in lapse_reason(new)


def test_a_measurements_page_leads_to_its_config_and_its_admission_check(world):
    """A "Measure…" of a saved config ends with the way on: its config, whose page checks
    admission against a budget (then approval)."""
    from tests.web.factories import JobFactory
    from tests.web.results import mismatch_report

    measured = JobFactory(team=world.team, kind="mismatch", state="succeeded",
                          config={"model": world.checkpoint, "rollout": FP8},
                          result=mismatch_report(rollout=FP8, model=world.checkpoint))
    page = world.client(world.member).get(f"/jobs/{measured.pk}/").content.decode()
    assert f'<a id="check-admission-next" href="/configs/{world.record.pk}/#check-admission">' in page
    unsaved = JobFactory(team=world.team, kind="mismatch", state="succeeded",
                         config={"model": world.checkpoint, "rollout": {"weights": "int8"}},
                         result=mismatch_report(rollout={"weights": "int8"}, model=world.checkpoint))
    assert 'id="measurement-next"' not in world.client(world.member).get(f"/jobs/{unsaved.pk}/").content.decode()
