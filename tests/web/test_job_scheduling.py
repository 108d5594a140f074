"""Which job a free worker takes next (opdweb/jobs/scheduling.py), and a parent that holds
no worker while its children run: priorities and places by hand on the database, then
with real workers and the real broker."""
from __future__ import annotations

import shutil
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from opdweb.jobs.actions import do_cancel_job, do_reap_stale_jobs, do_submit_job
from opdweb.jobs.models import TERMINAL_STATES, Job, JobState
from opdweb.jobs.scheduling import next_up, priority_of, queue_place
from tests.web.conftest import wait_for
from tests.web.factories import MembershipFactory
from tests.web.test_budget_jobs import calibration_config
from workers.science.entrypoints import get_kind


def queued(team, user, kind: str, **fields) -> Job:
    """A queued job with the priority its message would be sent with now."""
    job = Job.objects.create(team=team, created_by=user, kind=kind, config={}, **fields)
    job.priority = priority_of(job)
    job.save(update_fields=["priority"])
    return job


def test_interactive_work_goes_first_and_each_person_and_team_gets_a_share(db):
    first = MembershipFactory()
    team, alice = first.team, first.user
    bob = MembershipFactory(team=team).user
    carol = MembershipFactory().user  # another team
    other_team = carol.memberships.get().team

    alice_trains = [queued(team, alice, "train") for _ in range(5)]
    # Hand values: 5, then one step later per train alice has queued, plus one per four the
    # team has queued; capped at 9.
    assert [j.priority for j in alice_trains] == [5, 6, 7, 8, 9]
    bobs = queued(team, bob, "train")
    assert bobs.priority == 5 + 0 + 5 // 4  # none of his own, five of the team's
    carols = queued(other_team, carol, "train")
    assert carols.priority == 5
    # A measurement a person waits on goes ahead of every training run; a calibration's
    # child measurement is batch work.
    measure = queued(team, alice, "mismatch")
    parent = Job.objects.create(team=team, created_by=alice, kind="calibration", config={}, state=JobState.WAITING)
    child_measure = queued(team, alice, "mismatch", parent=parent, child_key="measure-x")
    assert measure.priority == 0 and child_measure.priority == 9

    order = [job.pk for job in next_up("gpu", 20)]
    assert order[:4] == [measure.pk, alice_trains[0].pk, carols.pk, alice_trains[1].pk]
    assert order.index(bobs.pk) < order.index(alice_trains[2].pk)
    assert order[-1] == child_measure.pk


def test_a_queued_job_knows_its_place_and_when_it_may_start(db):
    m = MembershipFactory()
    team, user = m.team, m.user
    now = timezone.now()
    for seconds in (10, 20, 60):  # median 20 s
        Job.objects.create(team=team, created_by=user, kind="mismatch", config={}, state=JobState.SUCCEEDED,
                           started_at=now - timedelta(hours=1), finished_at=now - timedelta(hours=1, seconds=-seconds))
    Job.objects.create(team=team, created_by=user, kind="train", config={}, state=JobState.SUCCEEDED,
                       started_at=now - timedelta(hours=2), finished_at=now - timedelta(hours=2, seconds=-100))
    # Running for 30 s of its usual 100 s at half way: 70 s left (the larger of the two readings).
    Job.objects.create(team=team, created_by=user, kind="train", config={}, state=JobState.RUNNING,
                       started_at=now - timedelta(seconds=30), progress=0.5)
    ahead = [queued(team, user, "mismatch") for _ in range(2)]
    mine = queued(team, user, "train")
    other = MembershipFactory()
    theirs = queued(other.team, other.user, "mismatch")  # interactive: ahead of the train, though later

    place = queue_place(mine)
    assert place.queue == "gpu" and place.running == 1
    assert place.position == 4 and place.ahead_mine == 2 and place.ahead_others == 1
    # 70 s + 3 x 20 s: the other team's measurement goes by its own team's history, which has none.
    assert place.start_in_s is None and "mismatch" in place.basis
    Job.objects.create(team=other.team, created_by=other.user, kind="mismatch", config={}, state=JobState.SUCCEEDED,
                       started_at=now - timedelta(hours=1), finished_at=now - timedelta(hours=1, seconds=-5))
    place = queue_place(mine)
    assert place.start_in_s == pytest.approx(70 + 20 + 20 + 5, abs=1.0)
    # The team's second measurement sends a step later (one of its person's is queued), so the
    # other team's first, sent after it, goes ahead of it.
    assert [ahead[0].priority, ahead[1].priority, theirs.priority] == [0, 1, 0]
    assert [queue_place(j).position for j in (ahead[0], theirs, ahead[1])] == [1, 2, 3]
    assert queue_place(Job.objects.filter(state=JobState.RUNNING).get()) is None


def test_the_job_page_and_the_status_page_show_the_line(client, db):
    m = MembershipFactory()
    team, user = m.team, m.user
    outsider = MembershipFactory()
    queued(outsider.team, outsider.user, "mismatch")
    job = queued(team, user, "train")
    client.force_login(user)
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert 'id="queue-place"' in page and "Number <b>2</b> in line on the gpu queue" in page
    assert "0 of this team's and 1 of other teams' jobs ahead" in page
    status = client.get("/status/").content.decode()
    assert f'href="/jobs/{job.pk}/"' in status and "1 of other teams among the next 20" in status


@pytest.mark.slow
def test_a_measurement_goes_ahead_of_training_queued_before_it(member, start_worker, toy_student):
    """Two training runs are queued first, then a measurement; the one worker that starts
    afterwards takes the measurement first.  (The training runs name student copies that are
    gone by then, so they fail at once: only the order is looked at.)"""
    user, team = member
    trains, copies = [], [Path(toy_student).parent / f"gone-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    for copy in copies:
        shutil.copytree(toy_student, copy)
        config = {**get_kind("train").example(toy_student), "model": str(copy), "device": "cpu"}
        trains.append(do_submit_job(team=team, user=user, kind_name="train", config=config))
    measure = do_submit_job(team=team, user=user, kind_name="mismatch", config={
        **get_kind("mismatch").example(toy_student), "prompts": 8, "max_new_tokens": 4, "device": "cpu"})
    for copy in copies:
        shutil.rmtree(copy)
    assert [Job.objects.get(pk=j.pk).priority for j in (*trains, measure)] == [5, 6, 0]
    start_worker("g1", queues="gpu")
    wait_for(lambda: all(Job.objects.get(pk=j.pk).state in TERMINAL_STATES for j in (*trains, measure)), 240,
             "the three jobs")
    started = {j.pk: Job.objects.get(pk=j.pk).started_at for j in (*trains, measure)}
    assert Job.objects.get(pk=measure.pk).state == JobState.SUCCEEDED
    assert started[measure.pk] < min(started[t.pk] for t in trains)


@pytest.mark.slow
def test_a_calibration_waits_without_holding_a_worker_and_a_waiting_parent_cancels(
        member, start_worker, toy_student, settings):
    """The only cpu worker runs the calibration's parent only while it looks at its
    children: while they train, a selftest on the same worker runs to its end.  Cancelled
    while it waits, the parent runs again, cancels its children and ends within seconds."""
    user, team = member
    start_worker("cpu1", queues="cpu")
    start_worker("g1", queues="gpu")
    parent = do_submit_job(team=team, user=user, kind_name="calibration", config=calibration_config(toy_student))
    wait_for(lambda: Job.objects.get(pk=parent.pk).state == JobState.WAITING, 120, "the calibration to wait")
    assert Job.objects.get(pk=parent.pk).worker == ""
    selftest = do_submit_job(team=team, user=user, kind_name="selftest", config={"steps": 5, "sleep_s": 0.01})
    wait_for(lambda: Job.objects.get(pk=selftest.pk).state in TERMINAL_STATES, 120, "the selftest")
    assert Job.objects.get(pk=selftest.pk).state == JobState.SUCCEEDED
    assert not Job.objects.get(pk=parent.pk).is_terminal  # it ran while the calibration's children did
    assert Job.objects.filter(parent=parent).exclude(state__in=TERMINAL_STATES).exists()

    # A child ended since the parent last looked: the parent was woken and waits again.  (A
    # child is recorded as succeeded a moment before it wakes its parent: the wake's log entry,
    # written with the parent's own move to queued, is what says the parent looked again.)
    wait_for(lambda: Job.objects.get(pk=parent.pk).log_entries.filter(
                 message__regex=r"^woken: child job #[0-9]+ succeeded").exists()
             and Job.objects.get(pk=parent.pk).state == JobState.WAITING, 300, "a child to end and the parent to wait")
    progress = Job.objects.get(pk=parent.pk).progress
    assert progress > 0.0

    # The reaper wakes a parent no child woke for a while; it looks and waits again.
    settings.JOB_PARENT_RECHECK_SECONDS = 0.0
    do_reap_stale_jobs()
    wait_for(lambda: Job.objects.get(pk=parent.pk).log_entries.filter(message__contains="no child woke it").exists()
             and Job.objects.get(pk=parent.pk).state == JobState.WAITING, 60, "the reaper's wake")

    do_cancel_job(Job.objects.get(pk=parent.pk), user=user)
    wait_for(lambda: Job.objects.get(pk=parent.pk).state == JobState.CANCELLED, 30, "the waiting parent to cancel")
    wait_for(lambda: not Job.objects.filter(parent=parent).exclude(state__in=TERMINAL_STATES).exists(), 60,
             "its children to end")
    assert Job.objects.get(pk=parent.pk).progress >= progress


@pytest.mark.slow
def test_a_training_run_makes_way_for_a_measurement_and_resumes_exactly(member, start_worker, toy_student):
    """One gpu worker trains; a measurement submitted meanwhile waits a second, the run stops
    at its next step (checkpoint saved), the measurement runs, and the run resumes from its
    checkpoint: it ends with the evaluations of the same run trained without a stop."""
    user, team = member
    start_worker("g1", queues="gpu", JOB_PREEMPT_AFTER_SECONDS="1")
    config = {**get_kind("train").example(toy_student), "steps": 200, "batch_size": 8, "eval_every": 100,
              "eval_prompts": 50, "device": "cpu"}
    stopped = do_submit_job(team=team, user=user, kind_name="train", config=config)
    wait_for(lambda: Job.objects.get(pk=stopped.pk).progress > 0.02, 240, "the run to be under way")
    measure = do_submit_job(team=team, user=user, kind_name="mismatch", config={
        **get_kind("mismatch").example(toy_student), "prompts": 8, "max_new_tokens": 4, "device": "cpu"})
    wait_for(lambda: Job.objects.get(pk=measure.pk).state in TERMINAL_STATES, 240, "the measurement")
    assert Job.objects.get(pk=measure.pk).state == JobState.SUCCEEDED
    wait_for(lambda: Job.objects.get(pk=stopped.pk).state in TERMINAL_STATES, 600, "the run to resume and end")
    stopped.refresh_from_db()
    assert stopped.state == JobState.SUCCEEDED, stopped.error
    assert stopped.log_entries.filter(message__contains=f"made way for interactive job #{measure.pk}").exists()
    assert Job.objects.get(pk=measure.pk).finished_at < stopped.finished_at
    assert stopped.attempts == 2 and stopped.max_attempts == 4  # its retry did not count against its attempts

    straight = do_submit_job(team=team, user=user, kind_name="train", config=config)
    wait_for(lambda: Job.objects.get(pk=straight.pk).state in TERMINAL_STATES, 600, "the same run without a stop")
    straight.refresh_from_db()
    assert straight.state == JobState.SUCCEEDED and straight.attempts == 1
    assert stopped.result["evals"] == straight.result["evals"]
    assert stopped.result["final_accuracy"] == straight.result["final_accuracy"]
