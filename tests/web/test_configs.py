"""Rollout configs as team objects: content hash, the form, presets, YAML, editing, and the
jobs a config page lists."""
import hashlib
import json

import pytest
from django.test import Client

from opdweb.rollouts.actions import do_create_config
from opdweb.rollouts.canonical import canonical_rollout, config_hash
from opdweb.rollouts.models import RolloutConfigRecord
from opdweb.rollouts.presets import PRESETS
from opdweb.teams.models import AuditEntry, Role
from tests.web.factories import JobFactory, MembershipFactory, TeamFactory
from tests.web.results import admission_result

pytestmark = pytest.mark.django_db

# RolloutConfig's defaults, written out by hand from workers/science/config.py.
DEFAULTS = {
    "engine": "hf", "dtype": "bf16", "weights": "bf16", "weight_scale": "tensor", "block_size": 128,
    "activations": "none", "fp8_matmul": "auto", "kv_cache": "none", "kv_scale": "tensor", "keep_bf16": [],
    "noise_sigma": 0.0, "noise_seed": 0, "staleness": 0,
    "sampling": {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 64, "ignore_eos": False}, "seed": 0,
    "kv_scales": "calibrated", "correction": {"kind": "none", "cap": 2.0, "low": 0.5, "high": 2.0}, "targets": [],
}
#: Fields added after the first configs were hashed: they enter the hash only when set.
ADDED_LATER = {"kv_scales": "calibrated", "correction": {"kind": "none", "cap": 2.0, "low": 0.5, "high": 2.0},
               "targets": []}


# The budget an admission check was measured against (budget #1: the config names it by id).
BUDGET_SPEC = {"id": 1, "checkpoint": "/m", "checkpoint_hash": None, "task": "arithmetic:3", "method": "opd",
               "metric": "k3", "unit_engine": "hf", "reference_value": None, "budget": 50.0, "status": "reached",
               "step": 0, "tolerance": 1.4}


def sha256_of(config: dict) -> str:
    hashed = {k: v for k, v in config.items() if ADDED_LATER.get(k, object()) != v}
    return hashlib.sha256(json.dumps(hashed, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


@pytest.fixture
def member_client(member):
    user, team = member
    client = Client()
    client.force_login(user)
    return client, user, team


def form_data(team, **fields):
    """The form as a browser posts it: every input, defaults where not given."""
    data = {"source": "form", "team": team.slug, "name": fields.pop("name", ""), "engine": "hf", "dtype": "bf16",
            "weights": "bf16", "weight_scale": "tensor", "block_size": "128", "activations": "none",
            "fp8_matmul": "auto", "kv_cache": "none", "kv_scale": "tensor", "keep_bf16": "", "noise_sigma": "0.0",
            "noise_seed": "0", "staleness": "0", "sampling.temperature": "1.0", "sampling.top_p": "1.0",
            "sampling.max_new_tokens": "64", "seed": "0", "kv_scales": "calibrated", "correction.kind": "none",
            "correction.cap": "2.0", "correction.low": "0.5", "correction.high": "2.0", "targets": ""}
    data.update(fields)
    return data


def test_it_hashes_the_canonical_config_so_two_spellings_share_a_hash():
    assert canonical_rollout({}) == DEFAULTS
    spelled_out = dict(DEFAULTS, dtype="bfloat16", weights="bfloat16")
    assert config_hash(canonical_rollout(spelled_out)) == config_hash(canonical_rollout({})) == sha256_of(DEFAULTS)
    fp8 = canonical_rollout({"weights": "fp8_e4m3", "sampling": {"temperature": 1}})
    assert config_hash(fp8) == sha256_of(dict(DEFAULTS, weights="fp8_e4m3"))
    assert canonical_rollout({"dtype": "float32"})["dtype"] == "fp32"


def test_it_creates_a_config_from_the_form_and_audits_it(member_client):
    client, user, team = member_client
    response = client.post("/configs/new/", form_data(team, name="fp8 kv", weights="fp8_e4m3", kv_cache="fp8_e4m3",
                                                      keep_bf16="0\nmodel.layers.1.mlp.*"))
    record = RolloutConfigRecord.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/configs/{record.pk}/"
    expected = dict(DEFAULTS, weights="fp8_e4m3", kv_cache="fp8_e4m3", keep_bf16=[0, "model.layers.1.mlp.*"])
    assert record.config == expected and record.config_hash == sha256_of(expected)
    assert (record.team, record.created_by, record.name) == (team, user, "fp8 kv")
    entry = AuditEntry.objects.get(team=team)
    assert (entry.action, entry.actor, entry.subject_id) == ("config.created", user, record.pk)
    page = client.get(f"/configs/{record.pk}/")
    assert page.status_code == 200 and record.config_hash.encode() in page.content


def test_the_same_config_again_is_the_same_record(member_client):
    client, user, team = member_client
    client.post("/configs/new/", form_data(team, name="first", weights="fp8_e4m3"))
    response = client.post("/configs/new/", {"source": "yaml", "team": team.slug, "name": "again",
                                             "yaml": "weights: fp8_e4m3\ndtype: bfloat16\n"})
    record = RolloutConfigRecord.objects.get()
    assert response["Location"] == f"/configs/{record.pk}/" and record.name == "first"


def test_invalid_field_values_are_named_next_to_the_field_and_nothing_is_created(member_client):
    client, user, team = member_client
    response = client.post("/configs/new/", form_data(team, noise_sigma="-0.5", block_size="many",
                                                      **{"sampling.top_p": "2"}))
    assert response.status_code == 400
    errors = {(e["field"], e["message"]) for e in response.context["problems"]}
    assert errors == {("noise_sigma", "must be at least 0.0 (got '-0.5')"),
                      ("block_size", "must be a whole number (got 'many')"),
                      ("sampling.top_p", "must be at most 1.0 (got '2')")}
    html = response.content.decode()
    assert 'data-field="noise_sigma">must be at least 0.0' in html
    assert 'data-field="sampling.top_p">must be at most 1.0' in html
    # What was typed stays in the form.
    assert 'name="noise_sigma" value="-0.5"' in html
    assert RolloutConfigRecord.objects.count() == 0 and AuditEntry.objects.count() == 0


def test_a_combination_the_schema_refuses_is_explained(member_client):
    client, user, team = member_client
    response = client.post("/configs/new/", form_data(team, weight_scale="channel"))
    assert response.status_code == 400
    assert "weight_scale is set but weights is bf16" in response.content.decode()
    assert RolloutConfigRecord.objects.count() == 0


def test_an_unknown_yaml_key_gets_a_did_you_mean(member_client):
    client, user, team = member_client
    response = client.post("/configs/new/", {"source": "yaml", "team": team.slug,
                                             "yaml": "noise_sigam: 0.1\nsampling:\n  temprature: 0.5\n"})
    assert response.status_code == 400
    problems = response.context["problems"]
    assert {"field": "noise_sigam",
            "message": "unknown field; did you mean 'noise_sigma'?"} in problems
    assert {"field": "sampling.temprature",
            "message": "unknown field; did you mean 'temperature'?"} in problems
    assert "did you mean &#x27;noise_sigma&#x27;?" in response.content.decode()
    assert RolloutConfigRecord.objects.count() == 0


def test_yaml_that_is_not_a_mapping_not_yaml_or_a_bomb_is_refused(member_client):
    client, user, team = member_client
    laughs = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(9))
    cases = (("- 1\n- 2\n", "must be a mapping"), ("weights: [unclosed\n", "cannot be read"),
             (laughs, "anchors and aliases"), ("keep_bf16: " + "[" * 20_000 + "]" * 20_000, "nested"))
    for text, words in cases:
        response = client.post("/configs/new/", {"source": "yaml", "team": team.slug, "yaml": text})
        assert response.status_code == 400 and words in response.content.decode(), text
    assert RolloutConfigRecord.objects.count() == 0


def test_an_uploaded_yaml_file_with_dtype_aliases_creates_the_config(member_client):
    from django.core.files.uploadedfile import SimpleUploadedFile

    client, user, team = member_client
    upload = SimpleUploadedFile("cfg.yaml", b"dtype: float32\nweights: fp8_e4m3\nstaleness: 1\n", "text/yaml")
    response = client.post("/configs/new/", {"source": "yaml", "team": team.slug, "name": "up", "yaml_file": upload})
    assert response.status_code == 302
    assert RolloutConfigRecord.objects.get().config == dict(DEFAULTS, dtype="fp32", weights="fp8_e4m3", staleness=1)


def test_a_huge_upload_is_refused_with_413_and_nothing_created(member_client):
    from django.core.files.uploadedfile import SimpleUploadedFile

    client, user, team = member_client
    big = b"# padding\n" * 10_000  # 100 kB: over the 64 kB a config may be, under the request limit
    response = client.post("/configs/new/", {"source": "yaml", "team": team.slug,
                                             "yaml_file": SimpleUploadedFile("big.yaml", big, "text/yaml")})
    assert response.status_code == 413 and "at most 65,536" in response.content.decode()
    huge = b"x" * 400_000  # over the request body limit: refused before any view
    response = client.post("/configs/new/", {"source": "yaml", "team": team.slug,
                                             "yaml_file": SimpleUploadedFile("huge.yaml", huge, "text/yaml")})
    assert response.status_code == 413
    assert RolloutConfigRecord.objects.count() == 0


def test_every_preset_fills_the_form_with_a_valid_distinct_config(member_client):
    client, user, team = member_client
    hashes = set()
    for preset in PRESETS:
        response = client.get(f"/configs/new/?preset={preset.slug}")
        assert response.status_code == 200
        rows = {row["field"].name: row["value"] for row in response.context["rows"]}
        for key, value in preset.config.items():
            shown = "\n".join(map(str, value)) if isinstance(value, list) else value
            assert rows[key] == shown, (preset.slug, key)
        hashes.add(config_hash(canonical_rollout(preset.config)))
    assert len(hashes) == len(PRESETS)


def test_the_form_has_every_schema_field_with_choices_and_help(member_client):
    client, user, team = member_client
    html = client.get("/configs/new/").content.decode()
    nested = [f"{group}.{name}" for group in ("sampling", "correction") for name in DEFAULTS[group]]
    for name in list(DEFAULTS) + nested:
        if name not in ("sampling", "correction"):
            assert f'name="{name}"' in html, name
    assert '<option value="fp8_e5m2"' in html and "one of none, fp8_e4m3, fp8_e5m2" in html
    assert "Keep sampling after EOS" in html  # the schema's own description


def test_editing_makes_a_new_record_and_leaves_the_old_one(member_client):
    client, user, team = member_client
    old, _ = do_create_config(team=team, user=user, name="base", data={"weights": "fp8_e4m3"})
    assert client.get(f"/configs/{old.pk}/edit/").status_code == 200
    response = client.post(f"/configs/{old.pk}/edit/", form_data(team, name="base + kv", weights="fp8_e4m3",
                                                                 kv_cache="fp8_e4m3"))
    new = RolloutConfigRecord.objects.exclude(pk=old.pk).get()
    assert response["Location"] == f"/configs/{new.pk}/"
    assert new.derived_from == old and new.config["kv_cache"] == "fp8_e4m3"
    old.refresh_from_db()
    assert old.config == dict(DEFAULTS, weights="fp8_e4m3")


def test_a_record_cannot_be_changed_in_place(member):
    from opdweb.rollouts.models import ImmutableConfig

    user, team = member
    record, _ = do_create_config(team=team, user=user, name="base", data={})
    record.config = dict(DEFAULTS, weights="fp8_e4m3")
    with pytest.raises(ImmutableConfig):
        record.save()
    record.refresh_from_db()
    assert record.config == DEFAULTS


def test_a_config_page_lists_exactly_the_jobs_that_ran_it(member_client):
    client, user, team = member_client
    record, _ = do_create_config(team=team, user=user, name="fp8", data={"weights": "fp8_e4m3"})
    full = JobFactory(team=team, kind="mismatch", config={"model": "/m", "rollout": dict(DEFAULTS, weights="fp8_e4m3")})
    partial = JobFactory(team=team, kind="admission", state="succeeded",
                         config={"model": "/m", "rollout": {"weights": "fp8_e4m3", "sampling": {"temperature": 1.0}},
                                 "budget": 1},
                         result=admission_result("pass", 3.0, budget=BUDGET_SPEC))
    JobFactory(team=team, kind="mismatch", config={"model": "/m", "rollout": {"weights": "fp8_e4m3", "seed": 1}})
    JobFactory(team=team, kind="mismatch", config={"model": "/m", "rollout": {}})
    JobFactory(team=TeamFactory(), kind="mismatch", config={"model": "/m", "rollout": {"weights": "fp8_e4m3"}})
    JobFactory(team=team, kind="selftest", config={"steps": 3})
    response = client.get(f"/configs/{record.pk}/")
    assert [job.pk for job in response.context["jobs"]] == [partial.pk, full.pk]
    assert response.context["jobs"][0].verdict == "pass"


def test_viewers_cannot_create_and_other_teams_configs_are_not_found(db):
    team = TeamFactory()
    viewer = MembershipFactory(team=team, role=Role.VIEWER).user
    client = Client()
    client.force_login(viewer)
    assert client.get("/configs/new/").status_code == 403
    response = client.post("/configs/new/", form_data(team, weights="fp8_e4m3"))
    assert response.status_code == 403
    other = MembershipFactory(role=Role.ADMIN)
    record, _ = do_create_config(team=other.team, user=other.user, name="theirs", data={})
    assert client.get(f"/configs/{record.pk}/").status_code == 404
    assert client.get(f"/configs/{record.pk}/edit/").status_code == 404
    assert RolloutConfigRecord.objects.count() == 1


def test_an_edit_stays_in_its_configs_team(member_client):
    client, user, team = member_client
    elsewhere = MembershipFactory(user=user, role=Role.MEMBER).team
    old, _ = do_create_config(team=team, user=user, name="base", data={})
    response = client.post(f"/configs/{old.pk}/edit/", form_data(elsewhere, name="moved", staleness="1"))
    assert response.status_code == 403
    assert RolloutConfigRecord.objects.count() == 1


def test_configs_compare_field_by_field_with_their_latest_verdict_per_checkpoint(member_client):
    client, user, team = member_client
    bf16, _ = do_create_config(team=team, user=user, name="bf16", data={})
    fp8, _ = do_create_config(team=team, user=user, name="fp8 w+kv",
                              data={"weights": "fp8_e4m3", "kv_cache": "fp8_e4m3"})

    def check(record, model, verdict, multiple):
        return JobFactory(team=team, kind="admission", state="succeeded",
                          config={"model": model, "rollout": record.config, "budget": 1},
                          result=admission_result(verdict, multiple, [multiple / 2, multiple * 2], budget=BUDGET_SPEC))
    check(fp8, "/m/a", "fail", 80.0)
    newest = check(fp8, "/m/a", "pass", 16.0)  # the newest check on /m/a is the one shown
    check(bf16, "/m/b", "pass", 1.0)

    response = client.get(f"/configs/compare/?ids={bf16.pk},{fp8.pk}")
    assert response.status_code == 200
    rows = {row["key"]: row for row in response.context["parameters"]}
    assert rows["weights"]["values"] == ['"bf16"', '"fp8_e4m3"'] and rows["weights"]["differs"]
    assert rows["kv_cache"]["differs"] and not rows["dtype"]["differs"]
    # 14 top-level fields (lists kept whole), 4 sampling and 4 correction ones, from DEFAULTS.
    assert len(rows) == len(DEFAULTS) - 2 + len(DEFAULTS["sampling"]) + len(DEFAULTS["correction"])
    verdicts = response.context["verdicts"]
    assert [v["checkpoint"] for v in verdicts] == ["/m/a", "/m/b"]
    assert verdicts[0]["checks"][0] is None and verdicts[0]["checks"][1].pk == newest.pk
    assert verdicts[1]["checks"][0].result["verdict"] == "pass" and verdicts[1]["checks"][1] is None
    # Every multiple shown names the unit pair it is of (these checks' unit: the hf engine, no trainer recorded).
    page = response.content.decode()
    assert page.count('<span class="meta pair">(hf BF16 engine / fp32 trainer)</span>') == 2
    only = client.get(f"/configs/compare/?ids={bf16.pk},{fp8.pk}&diff=1").content.decode()
    assert 'data-key="weights"' in only and 'data-key="dtype"' not in only

    # From the list: the checked boxes arrive as repeated ids.
    assert client.get(f"/configs/compare/?ids={bf16.pk}&ids={fp8.pk}").status_code == 200
    # Bad input: one id, a word, another team's config.
    theirs, _ = do_create_config(team=TeamFactory(), user=None, name="theirs", data={})
    assert client.get(f"/configs/compare/?ids={bf16.pk}").status_code == 400
    assert "config ids are whole numbers" in client.get(f"/configs/compare/?ids={bf16.pk},x").content.decode()
    assert client.get(f"/configs/compare/?ids={bf16.pk},{theirs.pk}").status_code == 404


# Input limits: what YAML or the form can say that the schema never sees as a value.

HUGE_DIGITS = "1" + "0" * 4999  # past Python's 4,300-digit limit on int(str)


@pytest.mark.parametrize(("text", "field", "words"), [
    ("seed: " + HUGE_DIGITS + "\n", "seed", "too large"),
    ("keep_bf16: [0, " + HUGE_DIGITS + "]\n", "keep_bf16.1", "too large"),
    ("sampling:\n  max_new_tokens: " + HUGE_DIGITS + "\n", "sampling.max_new_tokens", "too large"),
    ("seed: 0x" + "f" * 4000 + "\n", "seed", "too large"),  # 4,817 decimal digits, built without int(str)
    ("seed: " + ":".join(["59"] * 3000) + "\n", "seed", "too large"),  # YAML 1.1 base 60
    ("seed: -" + "9" * 30 + "\n", "seed", "too large"),
    ("1: 2\n", "1", "read as a number"),
    ("on: 1\n", "on", "read as true or false"),
    ("~: 1\n", "~", "read as null"),
    ("2024-01-01: 1\n", "2024-01-01", "read as a date"),
    ("1.5: x\n", "1.5", "read as a number"),
    ("sampling:\n  on: 1\n", "sampling.on", "read as true or false"),
    ("sampling:\n  temperature: 0.5\n  1: 2\n", "sampling.1", "read as a number"),
    ("keep_bf16:\n- {null: 1}\n", "keep_bf16.0.null", "read as null"),
    ("? [a, b]\n: 1\n", "(top level)", "has a key that is a list"),
    ("seed: !!int abc\n", "seed", "is not a whole number"),
], ids=["5000-digits", "5000-digits-in-keep_bf16", "5000-digits-nested", "hex", "base-60", "negative", "int-key",
        "on-key", "null-key", "date-key", "float-key", "on-key-nested", "int-key-nested", "null-key-in-a-list",
        "list-key", "tagged-int"])
def test_yaml_past_the_input_limits_is_refused_with_the_key_named(member_client, text, field, words):
    client, user, team = member_client
    response = client.post("/configs/new/", {"source": "yaml", "team": team.slug, "name": "x", "yaml": text})
    assert response.status_code == 400
    html = response.content.decode()
    assert words in html
    assert [p["field"] for p in response.context["problems"]] == [field]
    assert f"<b>{field}</b>" in html
    assert response.context["yaml_text"] == text  # what was pasted stays in the box
    assert RolloutConfigRecord.objects.count() == 0 and AuditEntry.objects.count() == 0


def test_an_explicit_tag_on_what_it_cannot_be_is_refused(member_client):
    client, user, team = member_client
    for text in ("noise_sigma: !!float abc\n", "keep_bf16: [!!timestamp abc]\n"):
        response = client.post("/configs/new/", {"source": "yaml", "team": team.slug, "yaml": text})
        assert response.status_code == 400 and "the YAML cannot be read" in response.content.decode(), text
    assert RolloutConfigRecord.objects.count() == 0


def test_an_uploaded_yaml_with_a_huge_integer_is_refused(member_client):
    from django.core.files.uploadedfile import SimpleUploadedFile

    client, user, team = member_client
    upload = SimpleUploadedFile("cfg.yaml", b"noise_seed: " + HUGE_DIGITS.encode() + b"\n", "text/yaml")
    response = client.post("/configs/new/", {"source": "yaml", "team": team.slug, "yaml_file": upload})
    assert response.status_code == 400 and "noise_seed" in response.content.decode()
    assert RolloutConfigRecord.objects.count() == 0


def test_a_5000_digit_keep_bf16_line_in_the_form_is_refused_next_to_the_field(member_client):
    client, user, team = member_client
    response = client.post("/configs/new/", form_data(team, name="big", keep_bf16="3\n" + HUGE_DIGITS))
    assert response.status_code == 400
    problems = response.context["problems"]
    assert [p["field"] for p in problems] == ["keep_bf16.1"] and "too large" in problems[0]["message"]
    html = response.content.decode()
    assert 'data-field="keep_bf16">entry 1: ' in html
    assert "3\n" + HUGE_DIGITS in html  # what was typed stays in the form
    assert 'name="name" value="big"' in html
    assert RolloutConfigRecord.objects.count() == 0 and AuditEntry.objects.count() == 0


def test_whole_numbers_up_to_the_limits_and_quoted_keys_still_work(member_client):
    client, user, team = member_client
    # A superscript digit is a digit to str.isdigit() but not to int(): it stays a pattern.
    response = client.post("/configs/new/", form_data(team, name="form", keep_bf16="0\n9223372036854775807\n²"))
    assert response.status_code == 302
    assert RolloutConfigRecord.objects.get(name="form").config["keep_bf16"] == [0, 9223372036854775807, "²"]
    text = ("'seed': 2147483647\nkeep_bf16: [0x1f, 9223372036854775807, '2024-01-01']\n"
            "sampling:\n  \"temperature\": 0.5\n  max_new_tokens: 1_024\n")
    response = client.post("/configs/new/", {"source": "yaml", "team": team.slug, "name": "yaml", "yaml": text})
    assert response.status_code == 302
    config = RolloutConfigRecord.objects.get(name="yaml").config
    assert config["seed"] == 2147483647 and config["keep_bf16"] == [31, 9223372036854775807, "2024-01-01"]
    assert config["sampling"]["temperature"] == 0.5 and config["sampling"]["max_new_tokens"] == 1024
    # Past the schema's own bound (not the input limit): the schema's message, as before.
    response = client.post("/configs/new/", {"source": "yaml", "team": team.slug, "yaml": "seed: 99999999999\n"})
    assert response.status_code == 400 and "must be at most 2147483647" in response.content.decode()


def test_a_config_that_names_a_trainer_must_be_an_engine_that_trainer_builds(member_client):
    client, user, team = member_client
    response = client.post("/configs/new/", form_data(team, name="weight-only for verl", weights="fp8_e4m3",
                                                      targets="verl\nvllm"))
    text = response.content.decode()
    assert response.status_code == 400 and not RolloutConfigRecord.objects.exists()
    assert "verl 0.9.1: weights fp8_e4m3 / weight_scale tensor / activations none" in text
    assert "vLLM 0.32.0: FP8 weight-only" in text
    response = client.post("/configs/new/", form_data(team, name="block fp8 for verl", weights="fp8_e4m3",
                                                      weight_scale="block", activations="fp8_e4m3", targets="verl"))
    assert response.status_code == 302
    assert RolloutConfigRecord.objects.get().config["targets"] == ["verl"]
    response = client.post("/configs/new/", form_data(team, name="twice", targets="verl\nverl"))
    assert response.status_code == 400 and "each target is named once" in response.content.decode()


def test_the_job_form_and_the_config_form_word_a_bad_value_alike(member_client):
    """One wording for field errors: the same bad rollout values, sent through a job's config
    and through the config form's YAML, get the same message (the product's words, with the
    value as sent), not pydantic's on one form and the product's on the other."""
    client, user, team = member_client
    bad = {"noise_sigma": -0.5, "block_size": 0, "sampling": {"top_p": 2, "temperature": "hot"}, "wieghts": "bf16"}
    expected = {"noise_sigma": "must be at least 0.0 (got -0.5)", "block_size": "must be at least 1 (got 0)",
                "sampling.top_p": "must be at most 1.0 (got 2)", "sampling.temperature": "must be a number (got 'hot')",
                "wieghts": "unknown field; did you mean 'weights'?"}
    response = client.post("/configs/new/", {"source": "yaml", "team": team.slug, "yaml": json.dumps(bad)})
    assert response.status_code == 400
    on_config_form = {p["field"]: p["message"] for p in response.context["problems"]}
    response = client.post("/jobs/new/", {"kind": "mismatch", "team": team.slug, "view": "json",
                                          "config": json.dumps({"model": "student", "rollout": bad})})
    assert response.status_code == 400
    on_job_form = {p["field"].removeprefix("rollout."): p["message"] for p in response.context["general_problems"]}
    assert on_config_form == expected
    assert {field: on_job_form[field] for field in expected} == expected
