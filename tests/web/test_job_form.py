"""The job form built from each kind's schema: its inputs, what they submit, the refusals
shown at the inputs with what was sent, the pickers, and the links that fill it."""
from __future__ import annotations

import html
import json
import re

from opdweb.jobs.models import Job
from opdweb.registry.models import RegisteredModel
from opdweb.rollouts.models import RolloutConfigRecord
from tests.web.test_budget_jobs import stored_calibration


def form_page(client, user, url="/jobs/new/") -> str:
    client.force_login(user)
    response = client.get(url)
    assert response.status_code == 200
    return response.content.decode()


def kind_fields(page: str, kind: str) -> str:
    return page.split(f'data-kind="{kind}"')[1].split('<fieldset class="kind-fields"')[0]


def selected(fields: str, input_id: str) -> str:
    select = fields.split(f'id="{input_id}"')[1].split("</select>")[0]
    return html.unescape(re.search(r'<option value="([^"]*)" selected>', select).group(1))


def test_it_draws_one_input_per_field_of_each_kind_with_its_type_default_and_help(member, client):
    user, _ = member
    page = form_page(client, user)
    selftest = kind_fields(page, "selftest")
    assert 'id="f-selftest-steps" name="steps" value="200" inputmode="decimal"' in selftest  # the example's value
    assert "a whole number" not in selftest and "default 100." in selftest  # the schema's default in the help
    train = kind_fields(page, "train")
    assert '<select id="f-train-method" name="method"' in train and selected(train, "f-train-method") == "opd"
    assert 'type="checkbox" id="f-train-resume" name="resume" checked' in train
    # a nested object is a fieldset of its fields, an object inside it a JSON box
    assert '<fieldset class="config-group" data-group="rollout">' in train
    assert selected(train, "f-train-rollout-weights") == "fp8_e4m3"
    assert '<textarea id="f-train-rollout-sampling" name="rollout.sampling"' in train
    # the product's own fields (a cache directory, an output folder) are not offered
    assert 'name="out"' not in train and 'name="cache_dir"' not in kind_fields(page, "mismatch")
    assert 'data-kind="mismatch" disabled hidden' in page  # only the chosen kind's fields are sent


def test_a_kinds_settings_at_their_defaults_wait_folded(member, client):
    """The calibration form shows what its example sets and what is required; the rest (some
    60 settings) waits in one folded section whose summary counts it."""
    from workers.science.entrypoints import get_kind

    user, _ = member
    fields = kind_fields(form_page(client, user), "calibration")
    shown, folded = fields.split('<details class="more-settings" data-more-for="calibration">')
    example = get_kind("calibration").example("student")
    shown_names = re.findall(r'data-field="([^"]+)"', shown)
    assert set(shown_names) >= set(example) and "eval_every" not in shown_names
    folded_names = re.findall(r'data-field="([^"]+)"', folded.split("</details>")[0])
    assert "eval_every" in folded_names and not set(folded_names) & set(shown_names)
    assert f"<summary>{len(folded_names)} more settings, at their defaults</summary>" in folded
    assert len(shown_names) <= len(example) + 2 and len(folded_names) > 30


def test_the_fields_submit_a_config_as_the_json_box_would(member, client):
    user, team = member
    client.force_login(user)
    response = client.post("/jobs/new/", {"view": "fields", "kind": "selftest", "team": team.slug, "name": "f",
                                          "steps": "12", "sleep_s": "0.5", "fail_at_step": "", "log_every": ""})
    assert response.status_code == 302
    assert Job.objects.get(name="f").config == {"steps": 12, "sleep_s": 0.5, "fail_at_step": None, "log_every": None}


def test_a_refused_field_is_shown_under_its_input_with_what_was_typed(member, client):
    user, team = member
    client.force_login(user)
    response = client.post("/jobs/new/", {"view": "fields", "kind": "selftest", "team": team.slug,
                                          "steps": "many", "sleep_s": "99"})
    assert response.status_code == 400 and Job.objects.count() == 0
    page = response.content.decode()
    assert "Not submitted: 2 problems in the config, shown at their fields." in page
    assert 'name="steps" value="many"' in page and 'name="sleep_s" value="99"' in page
    assert ('<small class="error field-error" data-field="steps">must be a whole number (got &#x27;many&#x27;)</small>'
            in page)
    assert '<small class="error field-error" data-field="sleep_s">must be at most 10.0 (got 99)' in page


def test_a_tampered_select_shows_what_was_sent_with_its_error(member, client):
    user, team = member
    client.force_login(user)
    response = client.post("/jobs/new/", {"view": "fields", "kind": "mismatch", "team": team.slug,
                                          "model": "/models/student", "trainer_dtype": "fp64", "metric": "k3"})
    assert response.status_code == 400
    fields = kind_fields(response.content.decode(), "mismatch")
    assert selected(fields, "f-mismatch-trainer_dtype") == "fp64"  # not "auto", the first option
    assert "fp64 (not a choice)" in fields
    assert re.search(r'data-field="trainer_dtype">must be one of .auto., .fp32., .bf16. or .fp16. \(got .fp64.\)',
                     html.unescape(fields))


def test_the_json_box_offers_did_you_mean_and_keeps_the_text(member, client):
    user, team = member
    client.force_login(user)
    text = '{"stpes": 5}'
    response = client.post("/jobs/new/", {"kind": "selftest", "team": team.slug, "config": text})
    page = html.unescape(response.content.decode())
    assert response.status_code == 400 and "stpes: unknown field; did you mean 'steps'?" in page
    assert f">{text}</textarea>" in page and '<details id="advanced" open>' in page


def test_the_model_picker_offers_the_teams_models_and_keeps_one_it_does_not_list(member, client):
    user, team = member
    RegisteredModel.objects.create(team=team, name="toy student", kind="student", path="/models/student")
    page = form_page(client, user, "/jobs/new/?kind=train")
    train = kind_fields(page, "train")
    assert '<option value="/models/student" >toy student (student)</option>' in train
    example_model = selected(train, "f-train-model")
    assert example_model.endswith("toy/test/student")  # the example's, not in the registry: shown as chosen
    assert f"{example_model} (not one of the team&#x27;s)" in train


def test_check_admission_fills_the_budget_picker_and_the_rollout_fields(member, client):
    user, team = member
    budget = stored_calibration(team, user, "/models/student", 9.1)
    record = RolloutConfigRecord.objects.create(team=team, created_by=user, name="fp8",
                                                config={"weights": "fp8_e4m3", "kv_cache": "fp8_e4m3"},
                                                config_hash="f" * 64)
    page = form_page(client, user, f"/jobs/new/?kind=admission&rollout={record.pk}&budget={budget.pk}")
    admission = kind_fields(page, "admission")
    assert 'data-kind="admission" >' in page or 'data-kind="admission">' in page  # the chosen kind, shown
    assert selected(admission, "f-admission-budget") == str(budget.pk)
    assert f"#{budget.pk} 9.1× on student (arithmetic:1)" in admission
    assert selected(admission, "f-admission-model") == "/models/student"
    assert selected(admission, "f-admission-rollout-weights") == "fp8_e4m3"
    assert selected(admission, "f-admission-rollout-kv_cache") == "fp8_e4m3"
    assert selected(admission, "f-admission-reference_engine") == "hf"


def test_measure_fills_the_mismatch_fields(member, client):
    user, team = member
    record = RolloutConfigRecord.objects.create(team=team, created_by=user, name="fp8", config={"weights": "fp8_e4m3"},
                                                config_hash="e" * 64)
    page = form_page(client, user, f"/jobs/new/?kind=mismatch&rollout={record.pk}&model=/models/student")
    mismatch = kind_fields(page, "mismatch")
    assert selected(mismatch, "f-mismatch-model") == "/models/student"
    assert selected(mismatch, "f-mismatch-rollout-weights") == "fp8_e4m3"
    assert json.loads(html.unescape(page.split('name="config" rows="10" spellcheck="false">')[1]
                                    .split("</textarea>")[0]))["rollout"] == {"weights": "fp8_e4m3"}
