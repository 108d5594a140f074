"""The budget loop through the whole stack: a calibration fans its ladder out as child jobs
that several real workers share (one of them killed mid-run), its budget is stored, and an
admission check names it by id and gets a verdict."""
from __future__ import annotations

import signal

import pytest
from django.conf import settings

from opdweb.budgets.models import ImmutableBudget, MismatchBudget
from opdweb.jobs.actions import do_reap_stale_jobs, do_submit_job
from opdweb.jobs.models import TERMINAL_STATES, Job, JobState
from opdweb.jobs.runner import record_outcome
from opdweb.refusals import Refused
from opdweb.teams.models import Team
from tests.web.conftest import wait_for
from tests.web.results import calibration_result

pytestmark = pytest.mark.slow


def calibration_config(student: str, **extra) -> dict:
    """A calibration whose baseline learns (37 -> 76 % in 150 steps, on seeds 0 and 1 alike) with a fixed set of
    children: 2 seeds and no more, no bisection, and a tolerance of 100 points so every level is within (the
    rule itself is tested on planted worlds in tests/science/test_calibration_loop.py)."""
    teacher = str(settings.DATA_DIR / "toy" / "test" / "teacher")
    return {"model": student, "teacher": teacher, "levels": [10.0, 100.0], "seeds": 2, "max_seeds": 2, "steps": 150,
            "batch_size": 8, "eval_prompts": 200, "measure_prompts": 256, "reference_engine": "hf",
            "max_extensions": 0, "max_bisections": 0, "tolerance": 100.0, "min_gain": 5.0, "device": "cpu", **extra}


def children_states(parent: Job) -> str:
    return "\n".join(f"  #{c.pk} {c.child_key}: {c.state} on {c.worker or '-'} at {c.progress:.0%} {c.error}"
                     for c in Job.objects.filter(parent=parent).order_by("pk"))


@pytest.mark.faults
def test_the_calibration_plumbing_shares_children_among_workers_survives_a_kill_and_feeds_an_admission(
        member, start_worker, toy_student, settings, service_env):
    """Plumbing, not a budget decision: with a 100-point tolerance every level is within, so
    this checks the fan-out, the kill, the stored budget and the admission that names it; the
    rule that decides a budget is tested on planted worlds (tests/science/test_calibration_loop.py)."""
    # Long enough that a live worker starved of CPU for a moment is not taken for lost
    # (the reaper looks at every running job, the planner's and the survivor's too).
    settings.JOB_STALE_SECONDS = 5.0
    user, team = member
    planner = start_worker("parent", queues="cpu")
    gpu_workers = {name: start_worker(name, queues="gpu") for name in ("g1", "g2")}
    parent = do_submit_job(team=team, user=user, kind_name="calibration", config=calibration_config(toy_student))

    # Kill a gpu worker while it holds a training child; the reaper requeues the child for the other worker.
    def a_training_child_mid_way():
        if Job.objects.filter(pk=parent.pk, state__in=TERMINAL_STATES).exists():
            raise AssertionError(f"the calibration ended before a training child was mid-way: "
                                 f"{Job.objects.get(pk=parent.pk).error}")
        return Job.objects.filter(parent=parent, kind="train", state=JobState.RUNNING,
                                  progress__gt=0.0, progress__lt=0.6).first()
    try:
        killed = wait_for(a_training_child_mid_way, 300, "a training child to be mid-way", interval=0.05,
                          process=[planner, *gpu_workers.values()])
    except AssertionError as failed:
        raise AssertionError(f"{failed}\nthe calibration's children:\n{children_states(parent)}") from None
    doomed = killed.worker.split("@")[0]
    (survivor,) = set(gpu_workers) - {doomed}
    gpu_workers[doomed].kill(signal.SIGKILL)
    wait_for(lambda: (do_reap_stale_jobs(), Job.objects.get(pk=killed.pk).attempts == 2)[1], 30,
             f"the reaper to requeue child #{killed.pk}")

    wait_for(lambda: Job.objects.get(pk=parent.pk).state in TERMINAL_STATES, 600, "the calibration", interval=0.5,
             process=[planner, gpu_workers[survivor]])
    parent.refresh_from_db()
    assert parent.state == JobState.SUCCEEDED, (parent.error, parent.traceback)
    # The parent let the planner's worker go while its children ran, and was woken by them.
    assert parent.log_entries.filter(message__contains="its worker is free").exists()
    assert parent.log_entries.filter(message__startswith="woken: child job #").exists()
    children = list(Job.objects.filter(parent=parent))
    # 2 noise solves, 2 baseline seeds, 2 levels x 2 seeds: each exactly once, all succeeded
    assert sorted(c.child_key for c in children) == sorted(
        ["noise-10", "noise-100", "train-baseline-s0", "train-baseline-s1",
         "train-10x-s0", "train-10x-s1", "train-100x-s0", "train-100x-s1"])
    assert all(c.state == JobState.SUCCEEDED for c in children)
    assert (Job.objects.get(pk=killed.pk).attempts == 2
            and Job.objects.get(pk=killed.pk).worker.startswith(f"{survivor}@"))

    budget = MismatchBudget.objects.get(calibration_job=parent)
    assert budget.team == team and budget.method == "opd:full" and budget.unit_engine == "hf"
    assert [row["target"] for row in budget.curve] == [10.0, 100.0]
    baseline = sorted(c.result["final_accuracy"] for c in children if c.child_key.startswith("train-baseline"))
    assert sorted(budget.baseline["accuracies"]) == baseline

    # An admission check names the budget by id; BF16 is the unit, so it passes any reached budget.
    admission = do_submit_job(team=team, user=user, kind_name="admission",
                              config={"model": toy_student, "budget": budget.pk, "prompts": 32})
    assert admission.config["budget"]["id"] == budget.pk and admission.config["budget"]["metric"] == "k3"
    wait_for(lambda: Job.objects.get(pk=admission.pk).state in (JobState.SUCCEEDED, JobState.FAILED), 240,
             "the admission check", interval=0.5)
    admission.refresh_from_db()
    assert admission.state == JobState.SUCCEEDED, admission.traceback
    assert budget.budget > 1.0  # the measured multiple of a level: a stored budget is never below its lowest
    assert admission.result["verdict"] == "pass" and admission.result["budget"]["id"] == budget.pk


def stored_calibration(team, user, student, budget=50.0):
    """A calibration job recorded as succeeded through the runner's path (no worker needed)."""
    job = Job.objects.create(team=team, created_by=user, kind="calibration", config={}, state=JobState.RUNNING)
    result = calibration_result(student, budget)
    assert record_outcome(job, JobState.SUCCEEDED, {"result": result})
    return MismatchBudget.objects.get(calibration_job=job)


def test_a_newer_calibration_supersedes_and_budgets_are_immutable(member, toy_student):
    user, team = member
    first = stored_calibration(team, user, toy_student, 50.0)
    second = stored_calibration(team, user, toy_student, 20.0)
    first.refresh_from_db()
    assert first.superseded_by_id == second.pk and second.is_current and first.budget == 50.0
    first.budget = 99.0
    with pytest.raises(ImmutableBudget):
        first.save()
    assert MismatchBudget.objects.get(pk=first.pk).budget == 50.0
    with pytest.raises(Refused, match=f"superseded by #{second.pk}"):
        do_submit_job(team=team, user=user, kind_name="admission", config={"model": toy_student, "budget": first.pk})


def test_bad_budget_references_and_calibration_configs_are_refused_and_write_nothing(member, toy_student):
    user, team = member
    other_team = Team.objects.create(name="other", slug="other")
    theirs = stored_calibration(other_team, None, toy_student)
    teacher = str(settings.DATA_DIR / "toy" / "test" / "teacher")
    ours_on_the_teacher = stored_calibration(team, user, teacher)
    before = Job.objects.count()
    for config, message in [
        ({"model": toy_student, "budget": ours_on_the_teacher.pk}, "was calibrated on checkpoint"),
        ({"model": toy_student, "budget": theirs.pk}, f"no budget #{theirs.pk}"),
        ({"model": toy_student, "budget": 10**9}, "no budget #1000000000"),
        ({"model": toy_student, "budget": {"budget": 1e9, "status": "reached"}}, "give the id"),
        ({"model": toy_student}, "give the id"),
    ]:
        with pytest.raises(Refused, match=message) as refused:
            do_submit_job(team=team, user=user, kind_name="admission", config=config)
        assert refused.value.status == 400
    for extra, field in [({"tolerance": -1}, "tolerance"), ({"levels": [10.0]}, "levels"),
                         ({"metric": "k9"}, "metric")]:
        with pytest.raises(Refused) as refused:
            do_submit_job(team=team, user=user, kind_name="calibration",
                          config=calibration_config(toy_student, **extra))
        assert [d["field"] for d in refused.value.details] == [field], refused.value.details
    assert Job.objects.count() == before
