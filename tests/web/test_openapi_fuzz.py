"""The API against its own OpenAPI document: schemathesis generates requests from
``/api/openapi.json`` (valid and invalid, every phase: examples, coverage, fuzzing,
stateful) and sends them to a real daphne with a member's session.  Every answer must be
documented (status, content type, body schema) and none may be a 5xx."""
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from django.test import Client
from django.utils import timezone
from django.utils.crypto import get_random_string

from opdweb.jobs.models import JobLogEntry
from opdweb.traces.sink import TraceSink
from tests.web.conftest import ROOT
from tests.web.factories import JobFactory

pytestmark = [pytest.mark.slow, pytest.mark.fuzz]

# Examples per operation and phase; bounded so `make test` stays minutes, not hours.
MAX_EXAMPLES = int(os.environ.get("OPENAPI_FUZZ_EXAMPLES", "25"))
SEED = 20261130

CONFIG = """
[auth.openapi.session]
api_key = "{session}"

# 413 (a body or config over the limit) is a refusal too, and documented.
[checks.negative_data_rejection]
expected-statuses = ["400", "401", "403", "404", "405", "406", "409", "413", "415", "422", "428", "429"]

[dictionaries.jobs]
values = [{job_id}]

[parameters]
"path.job_id" = {{ dictionary = "jobs", probability = 0.7 }}

# POST /api/jobs: the document gives each kind's config schema, but some refusals are
# not expressible in JSON Schema (a checkpoint must exist under a configured root; a
# rollout's fields must agree with each other), so a schema-valid config may still get a
# 400 there, with a message naming the field.
[[operations]]
include-path = "/api/jobs"
include-method = "POST"
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "403", "404", "409", "429"]
"""


def a_job_with_everything(user, team):
    """A failed job with a traceback, log lines and a trace, so the id endpoints answer
    from their core and not only with 404."""
    job = JobFactory(team=team, created_by=user, state="failed", error="RuntimeError: boom",
                     traceback='Traceback (most recent call last):\n  File "x.py", line 1\nRuntimeError: boom')
    JobLogEntry.objects.create(job=job, created_at=timezone.now(), level="INFO", message="started")
    sink = TraceSink(job.pk, publish=False)
    for step in range(50):
        sink.add(step, {"loss": 1.0 / (step + 1), "kl": step * 0.01})
    sink.flush()
    return job


def failures_of(output: str) -> str:
    """The report's failures and summary, long lines (generated bodies) cut."""
    report = output[output.find("FAILURES"):] if "FAILURES" in output else output[-4000:]
    return "\n".join(line[:400] for line in report.splitlines())[:12000]


def test_it_answers_every_generated_request_as_documented(asgi_server, member, tmp_path):
    user, team = member
    job = a_job_with_everything(user, team)
    browser = Client()
    browser.force_login(user)
    config = tmp_path / "schemathesis.toml"
    config.write_text(CONFIG.format(session=browser.cookies["sessionid"].value, job_id=job.pk))
    statuses = tmp_path / "statuses.txt"
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "tests.web.schemathesis_hooks",
           "OPDWEB_FUZZ_CSRF": get_random_string(32), "OPDWEB_FUZZ_STATUSES": str(statuses),
           "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
    command = [str(Path(sys.executable).with_name("schemathesis")), "--config-file", str(config), "run",
               f"http://{asgi_server}/api/openapi.json", "--checks", "all", "--max-examples", str(MAX_EXAMPLES),
               "--seed", str(SEED), "--workers", "1"]
    run = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=900)

    answers = statuses.read_text().splitlines() if statuses.exists() else []
    by_class = Counter(line[0] + "xx" for line in answers)
    server_errors = [line for line in answers if line.startswith("5")]
    generated = re.search(r"(\d+) generated", run.stdout)
    print(f"schemathesis: {generated.group(1) if generated else '?'} cases generated, "
          f"{len(answers)} requests answered; "
          f"by status class {dict(sorted(by_class.items()))}")
    assert server_errors == [], "\n".join(server_errors[:20])
    assert run.returncode == 0, failures_of(run.stdout) + run.stderr[-3000:]
    assert len(answers) >= 300, run.stdout[-3000:]
