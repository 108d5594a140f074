"""The home page (``/``): for each person, what waits for them (approvals they may decide,
not their own; open alerts; runs past a budget; their failed jobs), the jobs that ended
since their last visit, and each recent config's next step from a check to an export."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from opdweb.home.models import HomeVisit
from opdweb.jobs.models import Job
from opdweb.rollouts.actions import do_create_config
from opdweb.runs.models import Alert
from tests.web.approval_world import admission_job
from tests.web.factories import JobFactory, MembershipFactory, TeamFactory
from tests.web.test_run_watch import FP8, Watched

pytestmark = pytest.mark.django_db


def section(page: str, element_id: str) -> str:
    """The element of ``page`` with ``element_id``, up to its closing tag."""
    start = page.index(f'id="{element_id}"')
    tag = page[page.rindex("<", 0, start) + 1:start].split()[0]
    return page[start:page.index(f"</{tag}>", start)]


def test_a_pending_request_waits_for_the_approver_not_for_the_one_who_asked(tmp_path, settings):
    world = Watched(tmp_path, settings)
    record, _ = do_create_config(team=world.team, user=world.member, name="fp8 kv only",
                                 data={**FP8, "kv_cache": "none"})
    admission_job(world.team, world.checkpoint, record.config, world.budget)
    member = world.client(world.member)
    assert member.post(f"/configs/{record.pk}/request-approval/", {"checkpoint": world.checkpoint}).status_code == 302
    pending = record.approval_requests.get()

    approver_page = world.client(world.approver).get("/").content.decode()
    assert f'href="/approvals/{pending.pk}/"' in section(approver_page, "to-decide")
    member_page = member.get("/").content.decode()
    assert 'id="to-decide"' not in member_page  # one does not decide one's own request
    assert f'href="/approvals/{pending.pk}/"' in section(member_page, "waiting-on-others")
    outsider = MembershipFactory(team=TeamFactory()).user
    assert f"/approvals/{pending.pk}/" not in world.client(outsider).get("/").content.decode()


def test_each_recent_config_shows_its_next_step_from_a_check_to_an_export(tmp_path, settings):
    world = Watched(tmp_path, settings)  # "fp8 w+kv": checked, approved
    unchecked, _ = do_create_config(team=world.team, user=world.member, name="int8", data={"weights": "int8"})
    failing, _ = do_create_config(team=world.team, user=world.member, name="int4", data={"weights": "int4"})
    admission_job(world.team, world.checkpoint, failing.config, world.budget, verdict="fail", multiple=900.0)
    passing, _ = do_create_config(team=world.team, user=world.member, name="fp8 w", data={"weights": "fp8_e4m3"})
    admission_job(world.team, world.checkpoint, passing.config, world.budget)

    rows = section(world.client(world.member).get("/").content.decode(), "config-steps")

    def row(record) -> str:
        start = rows.index(f'data-config-id="{record.pk}"')
        return rows[start:rows.index("</tr>", start)]

    assert "Export" in row(world.record) and f"/approvals/{world.approval.pk}/#exports" in row(world.record)
    assert "Check admission" in row(unchecked) and f"/configs/{unchecked.pk}/#check-admission" in row(unchecked)
    assert "Request approval" in row(passing) and f"passed on {world.checkpoint}" in row(passing)
    assert "See the check" in row(failing) and "fail on" in row(failing)


def test_alerts_breaches_and_failures_need_someone_until_acknowledged(tmp_path, settings):
    world = Watched(tmp_path, settings)
    run = JobFactory(team=world.team, kind="external", state="running", name="verl fp8", created_by=world.member)
    alert = Alert.objects.create(job=run, kind="budget", step=30, value=52.0, threshold=50.0, message="above")
    world.approval.breached_at_step, world.approval.breached_by, world.approval.breached_at = 30, run, timezone.now()
    world.approval.save()
    failed = JobFactory(team=world.team, state="failed", created_by=world.member, error="out of memory",
                        finished_at=timezone.now())
    old = JobFactory(team=world.team, state="failed", created_by=world.member, finished_at=timezone.now()
                     - timedelta(days=30))
    page = world.client(world.member).get("/").content.decode()
    assert f"/jobs/{run.pk}/#run-alerts" in section(page, "open-alerts")
    assert "breached at step 30" in section(page, "breaching")
    failures = section(page, "failed-jobs")
    assert f"/jobs/{failed.pk}/" in failures and "out of memory" in failures and f"/jobs/{old.pk}/" not in failures
    alert.acknowledged_at = timezone.now()
    alert.save()
    assert 'id="open-alerts"' not in world.client(world.member).get("/").content.decode()


def test_since_the_last_visit_counts_from_the_visit_before_and_a_reload_keeps_the_window(client):
    membership = MembershipFactory()
    user, team = membership.user, membership.team
    client.force_login(user)
    now = timezone.now()
    before = JobFactory(team=team, state="succeeded", finished_at=now - timedelta(days=2), name="two days ago")
    page = client.get("/").content.decode()  # a first visit: the last week
    assert "The last week" in page and "two days ago" in section(page, "since-jobs")

    HomeVisit.objects.filter(user=user).update(seen_at=now - timedelta(hours=5))  # that visit was 5 hours ago
    after = JobFactory(team=team, state="failed", finished_at=now - timedelta(hours=1), name="an hour ago")
    child = JobFactory(team=team, state="succeeded", finished_at=now - timedelta(hours=1), parent=after)
    for _ in range(2):  # a reload within the visit shows the same window
        jobs = section(client.get("/").content.decode(), "since-jobs")
        assert f"/jobs/{after.pk}/" in jobs and f"/jobs/{before.pk}/" not in jobs
        assert f"/jobs/{child.pk}/" not in jobs  # a calibration's pieces are its parent's
    assert Job.objects.count() == 3


def test_nothing_waiting_says_so_and_a_stranger_is_sent_to_log_in(client):
    user = MembershipFactory().user
    assert client.get("/")["Location"].startswith("/login/")
    client.force_login(user)
    page = client.get("/").content.decode()
    assert 'id="nothing-waits"' in page and "No config yet" in page
