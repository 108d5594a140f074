"""The broker can fail: a submit while it is down is refused with a 503 and leaves no row;
a queued job whose message the broker lost is sent again, once, and then runs."""
import json
import subprocess
import sys
from datetime import timedelta

import pytest
import redis
from django.conf import settings
from django.utils import timezone

from opdweb.embedded_servers import free_port
from opdweb.jobs.actions import do_resend_lost_messages, do_submit_job
from opdweb.jobs.broker import waiting_attempts
from opdweb.jobs.models import Job, JobState
from tests.web.conftest import ROOT, wait_for

pytestmark = pytest.mark.faults

SUBMIT = """
import json, os, django
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "opdweb.settings"); django.setup()
from django.contrib.auth import get_user_model
from django.test import Client
client = Client()
client.force_login(get_user_model().objects.get(pk=int(os.environ["USER_ID"])))
r = client.post("/api/jobs", data=json.dumps({"kind": "selftest", "config": {"steps": 3}}), content_type="application/json")
print(json.dumps({"status": r.status_code, "body": r.json()}))
"""  # noqa: E501


def test_a_submit_while_the_broker_is_down_is_a_503_and_writes_nothing(member, service_env):
    user, _ = member
    env = {**service_env, "REDIS_URL": f"redis://127.0.0.1:{free_port()}/0", "USER_ID": str(user.pk),
           "ALLOWED_HOSTS": "testserver"}
    out = subprocess.run([sys.executable, "-c", SUBMIT], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    answer = json.loads(out.stdout.strip().splitlines()[-1])
    assert answer["status"] == 503
    assert answer["body"]["detail"] == "the job queue is unreachable, so nothing was submitted; try again in a moment"
    assert Job.objects.count() == 0


def test_a_lost_message_is_sent_again_once_and_the_job_runs(member, start_worker, service_env):
    user, team = member
    job = do_submit_job(team=team, user=user, kind_name="selftest", config={"steps": 3})
    later = timezone.now() + timedelta(seconds=settings.JOB_RESEND_SECONDS + 1)
    assert (job.pk, 1) in waiting_attempts(["cpu"])
    assert do_resend_lost_messages(later) == []  # waiting: nothing to send

    redis.Redis.from_url(settings.REDIS_URL).delete("cpu")  # what a restart without persistence does
    assert (job.pk, 1) not in waiting_attempts(["cpu"])
    assert do_resend_lost_messages(timezone.now()) == []  # too young to call lost
    assert do_resend_lost_messages(later) == [job.pk]
    assert do_resend_lost_messages(later) == []  # sent once: it is waiting again

    worker = start_worker()
    wait_for(lambda: Job.objects.get(pk=job.pk).state == JobState.SUCCEEDED, 60, "the job", process=worker)
