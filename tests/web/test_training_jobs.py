"""A training job through the whole stack: a real worker trains the toy student against
the toy teacher, traces every step, and writes its checkpoints in the job's own run
directory, which the product sets (a config may not)."""
import json

import pytest
from django.conf import settings

from opdweb.jobs.actions import do_submit_job
from opdweb.jobs.models import Job, JobState
from opdweb.refusals import Refused
from opdweb.traces.models import TraceSeries
from tests.web.conftest import wait_for
from tests.web.test_science_jobs import toy_student  # noqa: F401 - the session fixture


def train_config(student: str, **extra) -> dict:
    teacher = str(settings.DATA_DIR / "toy" / "test" / "teacher")
    return {"model": student, "teacher": teacher, "method": "opd", "loss": "full", "steps": 3, "batch_size": 8,
            "eval_every": 2, "eval_prompts": 16, "checkpoint_every": 2, "device": "cpu", **extra}


def test_a_worker_runs_a_training_job_and_keeps_its_checkpoints_in_the_jobs_run_directory(member, start_worker, toy_student):  # noqa: F811
    user, team = member
    worker = start_worker()
    job = do_submit_job(team=team, user=user, kind_name="train", config=train_config(toy_student))
    wait_for(lambda: Job.objects.get(pk=job.pk).state in (JobState.SUCCEEDED, JobState.FAILED), 240,
             "the training job", process=worker, interval=0.5)
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED, job.traceback
    run_dir = settings.RUNS_DIR / f"job-{job.pk}-{job.created_at:%Y%m%dT%H%M%S%f}"
    checkpoints = sorted(p.name for p in run_dir.glob("checkpoint-*"))
    assert checkpoints == ["checkpoint-000002", "checkpoint-000003"], checkpoints
    assert json.loads((run_dir / "checkpoint-000003" / "config.json").read_text())["model_type"] == "qwen2"
    series = {s.key: s for s in TraceSeries.objects.filter(job=job)}
    assert (series["train/loss"].first_step, series["train/loss"].last_step) == (1, 3)  # logged after each update
    assert "eval/accuracy" in series and "mismatch/k3" in series


def test_a_config_cannot_choose_where_a_job_writes(member, toy_student, tmp_path):  # noqa: F811
    user, team = member
    with pytest.raises(Refused) as refused:
        do_submit_job(team=team, user=user, kind_name="train", config=train_config(toy_student, out=str(tmp_path)))
    assert refused.value.details == [{"field": "out", "message": "is set by the product, not by a job config"}]
    assert Job.objects.count() == 0
