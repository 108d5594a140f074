"""Science job kinds through the whole stack: a real worker runs the admission
measurement on the toy student and stores its report and traces."""

import pytest
from django.conf import settings

from opdweb.jobs.actions import check_job_config, do_submit_job
from opdweb.jobs.models import Job, JobState
from opdweb.refusals import Refused
from opdweb.traces.models import TraceSeries
from tests.web.conftest import wait_for


def test_the_toy_pair_the_web_tests_use_is_the_shipped_one_bit_for_bit(toy_student):
    """The pair every science test and figure uses (``tests/science/fixtures/toy-test``), not a
    rebuild: a rebuild's bits depend on the CPU and the thread count (``test_toy.py``)."""
    from pathlib import Path

    from tests.web.conftest import SHIPPED_TOY_PAIR
    from workers.science.fingerprint import checkpoint_digest

    built = Path(toy_student).parent
    for role in ("student", "teacher"):
        assert checkpoint_digest(built / role) == checkpoint_digest(SHIPPED_TOY_PAIR / role), role
    assert (built / "student" / "snapshots").is_dir()  # the staleness ring travels with it


def test_a_science_config_is_validated_before_anything_is_written(db):
    with pytest.raises(Refused) as refused:
        check_job_config("mismatch", {"model": "x", "rollout": {"dtype": "fp7", "noise_sigma": -1}})
    fields = {d["field"] for d in refused.value.details}
    assert {"rollout.dtype", "rollout.noise_sigma"} <= fields
    assert Job.objects.count() == 0


@pytest.mark.slow
def test_a_worker_runs_an_admission_measurement(member, start_worker, toy_student):
    user, team = member
    worker = start_worker()
    config = {
        "model": toy_student,
        "rollout": {"weights": "fp8_e4m3", "weight_scale": "tensor"},
        "prompts": 16,
        "max_new_tokens": 8,
        "bootstrap": 50,
        "device": "cpu",
    }
    job = do_submit_job(team=team, user=user, kind_name="mismatch", config=config)
    wait_for(lambda: Job.objects.get(pk=job.pk).state in (JobState.SUCCEEDED, JobState.FAILED), 240,
             "the measurement", process=worker, interval=0.5)
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED, job.traceback
    report = job.result
    assert report["metric"] == "k3" and report["tokens"] > 0
    assert report["multiple"] == pytest.approx(report["value"] / report["reference_value"])
    assert report["multiple_ci"][0] <= report["multiple"] <= report["multiple_ci"][1]
    assert TraceSeries.objects.filter(job=job, key__startswith="mismatch/").exists()


def test_a_model_path_that_vanished_fails_the_job_with_a_clear_error(member, start_worker, toy_student, tmp_path):
    """Checked at submit, and again by the worker: a checkpoint removed in between fails the job."""
    import shutil

    user, team = member
    worker = start_worker()
    gone = settings.DATA_DIR / "models" / f"vanishing-{tmp_path.name}"
    shutil.copytree(toy_student, gone)
    try:
        job = do_submit_job(team=team, user=user, kind_name="mismatch",
                            config={"model": str(gone), "prompts": 4, "device": "cpu"})
    finally:
        shutil.rmtree(gone)
    wait_for(lambda: Job.objects.get(pk=job.pk).state == JobState.FAILED, 120, "the failure", process=worker,
             interval=0.5)
    job.refresh_from_db()
    assert "does not exist under the model roots" in job.error and str(gone) in job.error
