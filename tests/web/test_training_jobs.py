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


def train_config(student: str, **extra) -> dict:
    teacher = str(settings.DATA_DIR / "toy" / "test" / "teacher")
    return {"model": student, "teacher": teacher, "method": "opd", "loss": "full", "steps": 3, "batch_size": 8,
            "eval_every": 2, "eval_prompts": 16, "checkpoint_every": 2, "device": "cpu", **extra}


def test_a_worker_runs_a_training_job_and_keeps_its_checkpoints_in_the_jobs_run_directory(member, start_worker,
                                                                                          toy_student):
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


def test_a_config_cannot_choose_where_a_job_writes(member, toy_student, tmp_path):
    user, team = member
    with pytest.raises(Refused) as refused:
        do_submit_job(team=team, user=user, kind_name="train", config=train_config(toy_student, out=str(tmp_path)))
    assert refused.value.details == [{"field": "out", "message": "is set by the product, not by a job config"}]
    assert Job.objects.count() == 0


@pytest.mark.slow
def test_a_worker_trains_through_the_vllm_engine(member, start_worker, toy_student):
    user, team = member
    worker = start_worker()
    config = train_config(toy_student, rollout={"engine": "vllm", "dtype": "bf16"})
    job = do_submit_job(team=team, user=user, kind_name="train", config=config)
    assert job.config["rollout"]["engine"] == "vllm"
    wait_for(lambda: Job.objects.get(pk=job.pk).state in (JobState.SUCCEEDED, JobState.FAILED), 240,
             "the training job", process=worker, interval=0.5)
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED, job.traceback
    sync = TraceSeries.objects.get(job=job, key="time/weight_sync_s")
    assert (sync.first_step, sync.last_step) == (1, 3)


@pytest.mark.faults
def test_a_worker_killed_mid_training_resumes_from_its_last_checkpoint_without_duplicate_points(
        member, start_worker, toy_student, settings, service_env):
    import signal

    from opdweb.jobs.actions import do_reap_stale_jobs
    from opdweb.traces.models import TracePoint

    settings.JOB_STALE_SECONDS = float(service_env["JOB_STALE_SECONDS"])
    user, team = member
    first = start_worker("w1")
    job = do_submit_job(team=team, user=user, kind_name="train",
                        config=train_config(toy_student, steps=60, eval_every=0, checkpoint_every=5))
    run_dir = settings.RUNS_DIR / f"job-{job.pk}-{job.created_at:%Y%m%dT%H%M%S%f}"
    # Kill once a checkpoint exists and the run is past it (steps after it will be replayed).
    wait_for(lambda: (run_dir / "checkpoint-000010" / "trainer_state.json").is_file()
             and Job.objects.get(pk=job.pk).progress > 12 / 60, 240, "a checkpoint and steps past it",
             process=first, interval=0.05)
    first.kill(signal.SIGKILL)
    wait_for(lambda: (do_reap_stale_jobs(), Job.objects.get(pk=job.pk).attempts == 2)[1], 30, "the reaper")
    second = start_worker("w2")
    wait_for(lambda: Job.objects.get(pk=job.pk).state in (JobState.SUCCEEDED, JobState.FAILED), 300,
             "the resumed run", process=second, interval=0.5)
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED and job.worker.startswith("w2@"), job.traceback
    assert job.log_entries.filter(message__contains="checkpoint-0000").filter(message__contains="resum").exists()
    loss = TraceSeries.objects.get(job=job, key="train/loss")
    steps = list(TracePoint.objects.filter(series_id=loss.pk).order_by("step").values_list("step", flat=True))
    assert steps == list(range(1, 61))  # every step once: the replayed steps wrote no second point
    assert job.result["steps"] == 60
