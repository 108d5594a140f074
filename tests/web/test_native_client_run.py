"""The native client's ``Run`` against a real daphne: points logged from a trainer's thread
reach the trace store each exactly once through a connection that drops, answers that are
lost after the server wrote the batch, a network cut and a server killed and replaced;
a process that exits without ``finish`` has flushed every point; and the backoff waits as
it says between retries of 429 and 5xx answers (a small HTTP server of the test's, for the
timing only)."""
from __future__ import annotations

import http.server
import json
import math
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from opdweb_client import ApiError, Backoff, Credentials, OpdwebError, Run
from opdweb_client.transport import Transport

from opdweb.jobs.models import JobLogEntry, JobState
from opdweb.runs.models import MlflowRun
from opdweb.tokens.actions import do_create_token, do_revoke_token
from opdweb.tokens.models import ApiToken
from opdweb.traces.models import TracePoint
from tests.web.conftest import Process, wait_for
from tests.web.native_client import install_client
from tests.web.tcp_proxy import TcpProxy

STEPS = 1000


def loss(step: int) -> float:
    return 1.0 / (step + 1)


def k3(step: int) -> float:
    return 0.001 * step


def diverging(step: int) -> float:
    return math.nan if step == 5 else math.inf if step == 6 else -math.inf if step == 7 else float(step)


def logged(step: int) -> dict[str, float]:
    return {"train/loss": loss(step), "rollout/k3": k3(step), "diverging": diverging(step)}


def stored(job_id: int) -> list[tuple[str, int, float]]:
    return sorted(TracePoint.objects.filter(series__job_id=job_id).values_list("series__key", "step", "value"))


def same(a: list[tuple[str, int, float]], b: list[tuple[str, int, float]]) -> bool:
    return len(a) == len(b) and all(x[:2] == y[:2] and (x[2] == y[2] or (math.isnan(x[2]) and math.isnan(y[2])))
                                    for x, y in zip(a, b, strict=True))


@pytest.fixture
def secret(member):
    user, team = member
    return do_create_token(user=user, team=team, name="trainer", can_write=True)[1]


@pytest.mark.faults  # kills the server mid-run
def test_points_logged_through_dropped_connections_and_a_server_restart_are_stored_each_once(
        secret, start_asgi_server):
    first = start_asgi_server()
    proxy = TcpProxy(first)
    resume, go_on = threading.Event(), threading.Event()
    run = Run("through faults", params={"lr": "1e-6"}, tags={"approved_config": "cfg-1"},
              credentials=Credentials(url=f"http://{proxy.address}", token=secret), flush_interval=0.1,
              batch_size=100, backoff=Backoff(base=0.05, cap=0.5, attempts=None), timeout=5)

    def trainer():
        for step in range(STEPS):
            if step == 300:
                resume.wait(120)  # answers are lost while steps 300-699 are sent
            if step == 700:
                go_on.wait(120)  # steps 700 on go to the server started in place of the first
            run.log(step, logged(step))
            time.sleep(0.002)

    thread = threading.Thread(target=trainer)
    thread.start()
    try:
        wait_for(lambda: run.sent == 3 * 300, 60, "the first 300 steps")
        # Answers lost after the server wrote the batch: the client sends those batches again.
        proxy.swallow_next(2)
        resume.set()
        wait_for(lambda: proxy.swallowed == 2, 30, "two answers swallowed")
        # The network gone for a second: every connection dropped, new ones refused.
        proxy.cut()
        time.sleep(1.0)
        proxy.restore()
        # The server killed mid-run and another started in its place.
        server = next(p for p in reversed(Process.started) if p.name.startswith("daphne"))
        server.kill()
        proxy.target = start_asgi_server()
        go_on.set()
        thread.join(120)
        run.finish()
        job_id = run.job_id  # read through the API, as a trainer would to link its page
    finally:
        resume.set()
        go_on.set()
        proxy.close()

    job = MlflowRun.objects.get(run_id=run.id).job
    assert job_id == job.pk
    expected = sorted((key, step, value) for step in range(STEPS) for key, value in logged(step).items())
    assert same(stored(job.pk), expected)
    assert run.sent == len(expected) == 3 * STEPS
    # The resent batches were the same points: no conflicting value was reported.
    assert not JobLogEntry.objects.filter(job=job, message__contains="not stored").exists()
    assert (job.state, job.name, job.config["params"], job.config["tags"]["approved_config"]) == (
        JobState.SUCCEEDED, "through faults", {"lr": "1e-6"}, "cfg-1")


def test_a_token_revoked_mid_run_stops_it_with_the_reason_and_nothing_more_is_written(secret, member, asgi_server):
    run = Run(credentials=Credentials(url=f"http://{asgi_server}", token=secret), flush_interval=0.05)
    run.log(0, {"train/loss": 1.0})
    assert run.flush(30)
    do_revoke_token(token=ApiToken.objects.get(), actor=member[0])
    run.log(1, {"train/loss": 0.5})
    with pytest.raises(OpdwebError, match=r"stopped sending; \d+ points unsent: 401 .*'trainer' was revoked"):
        wait_for(lambda: run.log(2, {"train/loss": 0.25}), 30, "the refusal")
    with pytest.raises(OpdwebError, match="was revoked"):
        run.finish()
    job = MlflowRun.objects.get(run_id=run.id).job
    assert stored(job.pk) == [("train/loss", 0, 1.0)]
    with pytest.raises(ValueError, match="step must be an integer"):
        run.log(1.5, {"x": 1.0})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="1 to 200 characters"):
        run.log(1, {"k" * 201: 1.0})


SCRIPT = """
import sys
from opdweb_client import Run

run = Run("exits", flush_interval=600)  # nothing is sent before the exit
for step in range({steps}):
    run.log(step, {{"train/loss": 1.0 / (step + 1)}})
print(run.id, flush=True)
{end}
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    return install_client(tmp_path_factory.mktemp("client"))


@pytest.mark.parametrize("end, state", [("", JobState.SUCCEEDED), ("raise SystemExit(0)", JobState.SUCCEEDED),
                                        ("raise RuntimeError('diverged')", JobState.FAILED)])
def test_a_process_that_exits_without_finish_has_flushed_every_point(secret, asgi_server, installed, tmp_path,
                                                                     end, state):
    env = installed.env(tmp_path, OPDWEB_URL=f"http://{asgi_server}", OPDWEB_TOKEN=secret)
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(SCRIPT.format(steps=500, end=end))], env=env,
                         capture_output=True, text=True, timeout=120, cwd=installed.target)
    assert out.returncode == (1 if "Runtime" in end else 0), out.stderr
    job = MlflowRun.objects.get(run_id=out.stdout.split()[0]).job
    assert stored(job.pk) == [("train/loss", s, 1.0 / (s + 1)) for s in range(500)]
    job.refresh_from_db()
    assert job.state == state


class Scripted(http.server.BaseHTTPRequestHandler):
    """Answers each POST with the next of ``answers`` (status, headers), noting when it came."""

    answers: list[tuple[int, dict]] = []
    arrivals: list[float] = []

    def do_POST(self):  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        Scripted.arrivals.append(time.monotonic())
        status, headers = Scripted.answers.pop(0)
        body = json.dumps({} if status == 200 else {"error_code": "X", "message": f"scripted {status}"}).encode()
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def scripted_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Scripted)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    Scripted.arrivals = []
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


def test_it_backs_off_exponentially_on_5xx_and_waits_out_a_429s_retry_after(scripted_server):
    Scripted.answers = [(503, {}), (502, {}), (500, {}), (429, {"Retry-After": "1"}), (200, {})]
    backoff = Backoff(base=0.2, cap=10, attempts=None)
    assert Transport(scripted_server, "opd_x").call("POST", "/x", body={}, backoff=backoff) == {}
    gaps = [b - a for a, b in zip(Scripted.arrivals[:-1], Scripted.arrivals[1:], strict=True)]
    assert len(gaps) == 4
    # Retry n waits between half and all of base * 2**n: 0.1-0.2 s, 0.2-0.4 s, 0.4-0.8 s; then the server's 1 s.
    for n, gap in enumerate(gaps[:3]):
        assert 0.2 * 2**n / 2 <= gap <= 0.2 * 2**n + 0.15, (n, gaps)
    assert 1.0 <= gaps[3] <= 1.3, gaps


def test_a_refusal_no_retry_can_mend_is_raised_at_once_and_attempts_are_bounded(scripted_server):
    Scripted.answers = [(400, {})]
    with pytest.raises(ApiError, match="400 Bad Request: scripted 400"):
        Transport(scripted_server, "opd_x").call("POST", "/x", body={}, backoff=Backoff(base=0.01))
    assert len(Scripted.arrivals) == 1
    Scripted.answers = [(503, {})] * 3
    with pytest.raises(ApiError, match="503"):
        Transport(scripted_server, "opd_x").call("POST", "/x", body={}, backoff=Backoff(base=0.01, attempts=3))
    assert len(Scripted.arrivals) == 4
