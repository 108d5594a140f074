"""The estimate a job form gives before submitting: from the team's own runs of the model,
else from the model's size; hand values throughout."""
import json
from datetime import timedelta

import pytest
from django.utils import timezone

from opdweb.jobs.estimates import REFERENCE, compute_parameters, estimate
from opdweb.jobs.models import JobState
from opdweb.registry.models import CheckpointDescription
from opdweb.teams.models import Role
from tests.web.factories import JobFactory, MembershipFactory

#: SmolLM2-135M-Instruct's config.json (the shape fields of the checkpoint the product ships).
SMOLLM2 = {"hidden_size": 576, "num_hidden_layers": 30, "intermediate_size": 1536, "vocab_size": 49152,
           "num_attention_heads": 9, "num_key_value_heads": 3, "tie_word_embeddings": True}
#: The toy test student (tests/science/fixtures/toy-test/student/config.json).
TOY = {"hidden_size": 64, "num_hidden_layers": 1, "intermediate_size": 128, "vocab_size": 18,
       "num_attention_heads": 1, "num_key_value_heads": 1, "head_dim": 64}


def test_the_parameters_a_token_passes_through_by_hand():
    # SmolLM2: per layer q, o 576x576 (9 heads of 64), k, v 576x192 (3 KV heads), MLP 3 x 576x1536;
    # 30 layers and the (tied) LM head 49152 x 576; the embedding lookup costs nothing.
    per_layer = 2 * 576 * 576 + 2 * 576 * 192 + 3 * 576 * 1536
    assert per_layer == 3_538_944
    assert compute_parameters(SMOLLM2) == 30 * 3_538_944 + 49152 * 576 == 134_479_872
    assert compute_parameters(TOY) == 4 * 64 * 64 + 3 * 64 * 128 + 18 * 64 == 42_112
    assert compute_parameters({"text_config": SMOLLM2}) == 134_479_872  # a multimodal wrapper's text model
    assert compute_parameters({"hidden_size": 8}) is None


@pytest.fixture
def models_root(tmp_path, settings):
    for name, config in (("smollm2", SMOLLM2), ("toy", TOY), ("other", TOY)):
        (tmp_path / "models" / name).mkdir(parents=True)
        (tmp_path / "models" / name / "config.json").write_text(json.dumps(config))
    settings.OPDWEB_MODEL_ROOTS = [tmp_path / "models"]
    return tmp_path / "models"


def finished_job(team, model, seconds, prompts=None, state=JobState.SUCCEEDED, kind="mismatch", **config):
    end = timezone.now() - timedelta(minutes=5)
    config = {"model": str(model), **config}
    if prompts is not None:
        config["prompts"] = prompts
    return JobFactory(team=team, kind=kind, state=state, config=config, started_at=end - timedelta(seconds=seconds),
                      finished_at=end)


def test_a_model_the_team_ran_is_estimated_from_its_seconds_per_prompt(member, models_root):
    user, team = member
    model = models_root / "smollm2"
    finished_job(team, model, 100, prompts=100)  # 1.0 s a prompt
    finished_job(team, model, 60, prompts=30)  # 2.0
    finished_job(team, model, 90, prompts=60)  # 1.5: the median
    finished_job(team, model, 9_000, prompts=10, state=JobState.FAILED)  # not a finished run
    finished_job(MembershipFactory().team, model, 9_000, prompts=10)  # another team's: not theirs to go by
    finished_job(team, models_root / "other", 9_000, prompts=10)  # another model
    found = estimate(team.pk, "mismatch", {"model": str(model), "prompts": 256, "target_ci": 0.0})
    assert found.seconds == pytest.approx(1.5 * 256)
    assert not found.ceiling and found.words == "about 6 minutes"
    assert "median of the team's last 3 finished mismatch jobs of this model" in found.basis
    assert found.note == ""  # one round: target_ci 0
    more = estimate(team.pk, "mismatch", {"model": str(model), "prompts": 256, "target_ci": 0.25,
                                          "max_tokens": 200_000})
    assert "more rounds run, up to max_tokens (200,000 tokens)" in more.note


def at_reference(parameters: int, passes: int) -> float:
    """The reference machine's cost, written out: a start that grows with the model, then
    each sampled-and-scored token through its parameters."""
    return (REFERENCE.startup_s + REFERENCE.startup_per_parameter_s * parameters
            + passes * (REFERENCE.per_token_s + REFERENCE.per_parameter_token_s * parameters))


def test_a_model_never_run_is_priced_by_its_size_and_corrected_by_the_teams_workers(member, models_root):
    user, team = member
    smollm2, toy = models_root / "smollm2", models_root / "toy"
    CheckpointDescription.objects.create(uri=str(smollm2), digest="a" * 64, config_json=SMOLLM2)
    CheckpointDescription.objects.create(uri=str(toy), digest="b" * 64, config_json=TOY)
    asked = {"model": str(smollm2), "prompts": 256, "max_new_tokens": 128, "target_ci": 0.0}
    expected = at_reference(134_479_872, 2 * 256 * 128)  # the BF16 reference and the config
    found = estimate(team.pk, "mismatch", asked)
    assert found.seconds == pytest.approx(expected) and found.ceiling
    assert found.words.startswith("up to ") and "no finished job of the team yet" in found.basis
    # The rollout's max_new_tokens counts where the job sets none.
    rollout_tokens = estimate(team.pk, "mismatch", {**asked, "max_new_tokens": None,
                                                    "rollout": {"sampling": {"max_new_tokens": 128}}})
    assert rollout_tokens.seconds == pytest.approx(expected)
    # An admission adds its drift: 32 prompts through both engines.
    admission = estimate(team.pk, "admission", {**asked, "drift": True, "drift_prompts": 32})
    assert admission.seconds == pytest.approx(at_reference(134_479_872, 2 * 256 * 128 + 2 * 32 * 128))
    # The team's workers took 3x and 5x what the formula gave the toy: the median, 4x, scales SmolLM2.
    toy_at_reference = at_reference(42_112, 2 * 64 * 64)
    finished_job(team, toy, 3 * toy_at_reference, prompts=64, max_new_tokens=64)
    finished_job(team, toy, 5 * toy_at_reference, prompts=64, max_new_tokens=64)
    corrected = estimate(team.pk, "mismatch", asked)
    assert corrected.seconds == pytest.approx(4 * expected, rel=1e-6)
    assert "× 4 from the team's last 2 finished mismatch job(s) on other models" in corrected.basis


def test_a_sensitivity_scan_costs_a_pass_per_part(member, models_root):
    user, team = member
    smollm2 = models_root / "smollm2"
    CheckpointDescription.objects.create(uri=str(smollm2), digest="a" * 64, config_json=SMOLLM2)
    tokens = 128 * 64
    layers = estimate(team.pk, "sensitivity", {"model": str(smollm2), "prompts": 128, "max_new_tokens": 64})
    assert layers.seconds == pytest.approx(at_reference(134_479_872, (2 + 30) * tokens))
    modules = estimate(team.pk, "sensitivity", {"model": str(smollm2), "prompts": 128, "max_new_tokens": 64,
                                                "granularity": "module"})
    assert modules.seconds == pytest.approx(at_reference(134_479_872, (2 + 240) * tokens))


def test_nothing_to_go_by_says_so(member, models_root):
    user, team = member
    unread = estimate(team.pk, "mismatch", {"model": str(models_root / "other"), "prompts": 8})
    assert unread.seconds is None and unread.words == "no estimate" and "register it" in unread.basis
    selftest = estimate(team.pk, "selftest", {"steps": 10})
    assert selftest.seconds is None and selftest.basis == "no finished selftest job of the team yet"
    # A kind that names no model and samples no prompts goes by its median run time.
    for seconds in (40, 42, 90):
        JobFactory(team=team, kind="selftest", state=JobState.SUCCEEDED, config={"steps": 10},
                   started_at=timezone.now() - timedelta(seconds=seconds), finished_at=timezone.now())
    again = estimate(team.pk, "selftest", {"steps": 10})
    assert again.seconds == pytest.approx(42, abs=0.1) and again.words == "under a minute"
    assert again.basis == "the median run time of the team's last 3 finished selftest jobs"


def test_the_estimate_over_the_api_is_for_members_and_valid_configs(client, member, models_root, make_user):
    user, team = member
    model = models_root / "smollm2"
    finished_job(team, model, 64, prompts=32)  # 2 s a prompt
    body = {"kind": "mismatch", "team": team.slug, "config": {"model": str(model), "prompts": 45, "target_ci": 0}}
    client.force_login(user)
    response = client.post("/api/jobs/estimate", json.dumps(body), content_type="application/json")
    assert response.status_code == 200, response.content
    answer = response.json()
    assert answer["seconds"] == pytest.approx(90.0) and answer["words"] == "about 2 minutes"
    assert answer["ceiling"] is False and answer["note"] == ""
    bad = client.post("/api/jobs/estimate", json.dumps({**body, "config": {"model": str(model), "prompts": 0}}),
                      content_type="application/json")
    assert bad.status_code == 400 and bad["Content-Type"].startswith("application/json")
    assert {"field": "prompts", "message": "must be at least 1 (got 0)"} in bad.json()["errors"]
    viewer = make_user(team=team, role=Role.VIEWER)
    client.force_login(viewer)
    refused = client.post("/api/jobs/estimate", json.dumps(body), content_type="application/json")
    assert refused.status_code == 403 and "cannot submit jobs" in refused.json()["detail"]
