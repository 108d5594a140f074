"""Configs stay in the sandbox: a job config cannot point a worker at a model, a prompt
file or a cache directory outside the configured roots, by absolute path, ``..``, a
symlink, ``/proc`` or a hub id; each is a 400 naming the field, and nothing is written."""
import json
import os

import pytest

from opdweb.jobs.models import Job, JobState
from opdweb.jobs.tasks import run_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def roots(settings, tmp_path):
    """A model root holding one checkpoint, a data root holding one prompt file, and,
    outside both, a checkpoint and a prompt file a config must not reach."""
    models, data, outside = tmp_path / "models", tmp_path / "data", tmp_path / "outside"
    for checkpoint in (models / "student", outside / "secret-model"):
        checkpoint.mkdir(parents=True)
        (checkpoint / "config.json").write_text("{}")
    data.mkdir()
    (data / "gsm8k.jsonl").write_text('{"question": "1+1?", "answer": "#### 2"}\n')
    (outside / "prompts.jsonl").write_text('{"question": "1+1?", "answer": "#### 2"}\n')
    os.symlink(outside / "secret-model", models / "link-out")
    settings.OPDWEB_MODEL_ROOTS = [models]
    settings.OPDWEB_DATA_ROOTS = [data]
    settings.OPDWEB_ALLOW_HUB = False
    return {"models": models, "data": data, "outside": outside}


@pytest.fixture
def submit(client, member, monkeypatch):
    user, _ = member
    client.force_login(user)
    monkeypatch.setattr("opdweb.jobs.actions.enqueue", lambda job_id, attempt: None)

    def post(**config):
        config = {"prompts": 4, **config}
        return client.post("/api/jobs", data=json.dumps({"kind": "mismatch", "config": config}),
                           content_type="application/json")

    return post


def refusal(response) -> dict:
    assert response.status_code == 400, response.content
    assert Job.objects.count() == 0
    return {e["field"]: e["message"] for e in response.json()["errors"]}


def test_a_model_under_a_root_is_accepted_and_stored_resolved(roots, submit):
    response = submit(model="student")
    assert response.status_code == 201, response.content
    assert response.json()["config"]["model"] == str((roots["models"] / "student").resolve())
    assert submit(model=str(roots["models"] / "student" / ".." / "student")).status_code == 201


@pytest.mark.parametrize("model, message", [
    ("{outside}/secret-model", "is outside the model roots"),
    ("{models}/../outside/secret-model", "is outside the model roots"),
    ("../outside/secret-model", "is outside the model roots"),
    ("link-out", "is outside the model roots"),
    ("/proc/self/root/etc", "is outside the model roots"),
    ("/etc", "is outside the model roots"),
    ("nothing-here", "does not exist under the model roots"),
    ("Qwen/Qwen2.5-0.5B", "looks like a hub id"),
    ("0" * 900, "is not a usable path (File name too long)"),
    ("~nobody-here/model", "is not a usable path"),
])
def test_a_model_outside_the_roots_is_refused(roots, submit, model, message):
    errors = refusal(submit(model=model.format(**roots)))
    assert message in errors["model"]


def test_a_directory_that_is_not_a_checkpoint_is_refused(roots, submit):
    (roots["models"] / "empty").mkdir()
    assert "no config.json" in refusal(submit(model="empty"))["model"]


def test_hub_ids_pass_only_where_the_installation_allows(roots, submit, settings):
    settings.OPDWEB_ALLOW_HUB = True
    response = submit(model="Qwen/Qwen2.5-0.5B")
    assert response.status_code == 201 and response.json()["config"]["model"] == "Qwen/Qwen2.5-0.5B"


@pytest.mark.parametrize("task, message", [
    ("/etc/shadow", "is outside the data roots"),
    ("{outside}/prompts.jsonl", "is outside the data roots"),
    ("missing.jsonl", "does not exist under the data roots"),
])
def test_a_prompt_file_outside_the_data_roots_is_refused(roots, submit, task, message):
    assert message in refusal(submit(model="student", task=task.format(**roots)))["task"]


def test_built_in_tasks_and_files_under_the_data_roots_are_accepted(roots, submit):
    assert submit(model="student", task="arithmetic:3").status_code == 201
    response = submit(model="student", task="gsm8k.jsonl")
    assert response.status_code == 201
    assert response.json()["config"]["task"] == str((roots["data"] / "gsm8k.jsonl").resolve())


def test_the_cache_directory_is_the_products(roots, submit, tmp_path):
    errors = refusal(submit(model="student", cache_dir=str(tmp_path / "anywhere")))
    assert errors == {"cache_dir": "is set by the product, not by a job config"}
    assert not (tmp_path / "anywhere").exists()


def test_the_worker_checks_again_before_it_reads_anything(roots, member, transactional_db):
    """A row written past the web process (or a symlink swapped after submit) is refused
    by the worker: the job fails naming the field, and the model is never loaded."""
    _, team = member
    job = Job.objects.create(team=team, kind="mismatch",
                             config={"model": str(roots["outside"] / "secret-model"), "prompts": 4})
    assert run_job.apply(args=[job.pk, 1]).get() == JobState.FAILED
    job.refresh_from_db()
    assert "model:" in job.error and "is outside the model roots" in job.error
