"""The native client's commands (``clients/python``, installed with pip) against a real
daphne and a real Celery worker, with a real token: ``opdweb login`` saves what it checked
(mode 0600), ``submit`` a selftest, ``status``, ``wait`` for its end, ``export`` its points,
each equal to the value the selftest's formula gives; and refusals said in one line with
exit status 2, never a traceback."""
from __future__ import annotations

import csv
import io
import json
import stat

import pytest

from opdweb.jobs.models import Job, JobState
from opdweb.tokens.actions import do_create_token, do_revoke_token
from opdweb.tokens.models import ApiToken
from tests.web.native_client import install_client

STEPS = 25


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    return install_client(tmp_path_factory.mktemp("client"))


@pytest.fixture
def secret(member):
    user, team = member
    return do_create_token(user=user, team=team, name="laptop", can_write=True)[1]


def test_it_logs_in_submits_a_selftest_waits_for_it_and_exports_its_points(installed, secret, member, asgi_server,
                                                                            start_worker, tmp_path):
    config_dir = tmp_path / "config"
    env = installed.env(config_dir)
    start_worker()

    login = installed.opdweb("login", f"http://{asgi_server}", stdin=secret + "\n", env=env)
    assert login.returncode == 0, login.stderr
    saved = config_dir / "credentials.json"
    assert stat.S_IMODE(saved.stat().st_mode) == 0o600
    assert json.loads(saved.read_text()) == {"url": f"http://{asgi_server}", "token": secret}

    submit = installed.opdweb("submit", "selftest", "--set", f"steps={STEPS}", "--set", "sleep_s=0.02",
                              "--name", "from the client", env=env)
    assert submit.returncode == 0, submit.stderr
    job_id = int(submit.stdout)
    job = Job.objects.get(pk=job_id)
    assert (job.kind, job.name, job.config["steps"], job.team) == ("selftest", "from the client", STEPS, member[1])

    status = installed.opdweb("status", str(job_id), "--json", env=env)
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["id"] == job_id
    assert json.loads(status.stdout)["state"] in ("queued", "running", "succeeded")

    wait = installed.opdweb("wait", str(job_id), "--timeout", "120", "--interval", "0.2", env=env)
    assert wait.returncode == 0, wait.stdout + wait.stderr
    assert wait.stdout.strip().startswith(f"job #{job_id} selftest succeeded 100%")
    assert Job.objects.get(pk=job_id).state == JobState.SUCCEEDED

    # Every point, and each as the selftest logs it: linear s, square s * s.
    expected = sorted([("selftest/linear", s, float(s)) for s in range(STEPS)]
                      + [("selftest/square", s, float(s * s)) for s in range(STEPS)])
    export = installed.opdweb("export", str(job_id), "--format", "jsonl", env=env)
    assert export.returncode == 0, export.stderr
    lines = [json.loads(line) for line in export.stdout.splitlines()]
    assert sorted((p["key"], p["step"], p["value"]) for p in lines) == expected

    out = tmp_path / "square.csv"
    export = installed.opdweb("export", str(job_id), "--key", "selftest/square", "-o", str(out), env=env)
    assert export.returncode == 0, export.stderr
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    assert [(r["key"], int(r["step"]), float(r["value"])) for r in rows] == [
        ("selftest/square", s, float(s * s)) for s in range(STEPS)]

    # The environment takes the file's place (a cluster job has no home directory to log in from).
    by_env = installed.opdweb("status", str(job_id), env=installed.env(tmp_path / "empty", OPDWEB_URL=f"http://{asgi_server}",
                                                                        OPDWEB_TOKEN=secret))
    assert by_env.returncode == 0 and "succeeded" in by_env.stdout


def test_a_job_that_fails_makes_wait_exit_1(installed, secret, asgi_server, start_worker, tmp_path):
    env = installed.env(tmp_path, OPDWEB_URL=f"http://{asgi_server}", OPDWEB_TOKEN=secret)
    start_worker()
    job_id = installed.opdweb("submit", "selftest", "--config", '{"steps": 5, "fail_at_step": 2}', env=env).stdout
    wait = installed.opdweb("wait", job_id.strip(), "--timeout", "120", "--interval", "0.2", "--quiet", env=env)
    assert wait.returncode == 1, wait.stdout + wait.stderr
    assert "failed" in wait.stdout and "selftest failure requested at step 2" in wait.stdout


def refused(result, *fragments: str) -> None:
    """Exit status 2 and one line on stderr naming the problem; no traceback, nothing on stdout."""
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert result.stderr.startswith("opdweb: ") and result.stderr.count("\n") == 1, result.stderr
    for fragment in fragments:
        assert fragment in result.stderr, result.stderr


def test_without_credentials_every_command_says_how_to_log_in(installed, tmp_path):
    env = installed.env(tmp_path / "nothing")
    for args in (("status", "1"), ("wait", "1"), ("export", "1"), ("submit", "selftest")):
        refused(installed.opdweb(*args, env=env), "no credentials", "opdweb login", "OPDWEB_URL and OPDWEB_TOKEN")
    refused(installed.opdweb("status", "1", env={**env, "OPDWEB_URL": "http://127.0.0.1:9"}), "an API token missing")


def test_a_bad_token_is_refused_with_the_servers_reason_and_not_saved(installed, secret, member, asgi_server,
                                                                     tmp_path):
    config_dir = tmp_path / "config"
    env = installed.env(config_dir)
    url = f"http://{asgi_server}"
    refused(installed.opdweb("login", url, "--token", "opd_" + "x" * 43, env=env), "401", "unknown API token")
    refused(installed.opdweb("login", url, "--token", "hunter2", env=env), "not an opdweb API token")
    assert not (config_dir / "credentials.json").exists()

    do_revoke_token(token=ApiToken.objects.get(), actor=member[0])
    refused(installed.opdweb("status", "1", env={**env, "OPDWEB_URL": url, "OPDWEB_TOKEN": secret}),
            "'laptop' was revoked")
    refused(installed.opdweb("login", url, "--token", secret, env=env), "was revoked")
    # No server there: said as such, after the retries a read gets.
    refused(installed.opdweb("status", "1", env={**env, "OPDWEB_URL": "http://127.0.0.1:9", "OPDWEB_TOKEN": secret}),
            "did not answer GET /api/jobs/1")
    refused(installed.opdweb("submit", "selftest", "--config", "[1]", env={**env, "OPDWEB_URL": url,
                                                                           "OPDWEB_TOKEN": secret}),
            "--config must be a JSON object")
