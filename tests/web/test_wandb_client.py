"""The official ``wandb`` client (pinned in requirements-test.txt; it runs its own
``wandb-core``) against a real daphne and Celery worker, each trainer in a process of its
own with only ``WANDB_BASE_URL`` and ``WANDB_API_KEY`` set (tests/web/wandb_trainer.py):

- a prime-rl-style stream (its exact k3, ``mismatch_kl/all/mean``) linked by a config
  value crosses the planted budget at the step it was built to cross it and sends exactly
  one signed webhook; a slime-style stream (``train/train_rollout_logprob_abs_diff``, only a
  proxy) linked by a tag lands once and raises nothing;
- ``resume="must"`` continues an ended run; an offline run then ``wandb sync`` gives the
  same points as logging online; refused tokens show the client's own error and write
  nothing; the server killed and restarted mid-run loses and doubles nothing."""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from opdweb.approvals.models import TeamWebhook, WebhookDelivery
from opdweb.jobs.models import Job, JobState
from opdweb.runs import mlflow_artifacts
from opdweb.runs.metric_map import MULTIPLE_KEY
from opdweb.runs.models import Alert, RunLink, TrainerAlert, WandbRun
from opdweb.tokens.actions import do_create_token, do_revoke_token
from opdweb.traces.models import TracePoint
from tests.web.conftest import ROOT, wait_for
from tests.web.factories import MembershipFactory, TeamFactory
from tests.web.tcp_proxy import TcpProxy
from tests.web.test_run_watch import BUDGET, CROSSING_STEP, UNIT_K3, Watched
from tests.web.test_webhooks import SECRET, allowed_host, receiver  # noqa: F401 (the fixture)

TRAINER = ROOT / "tests" / "web" / "wandb_trainer.py"
WANDB = Path(sys.executable).with_name("wandb")
#: Quick retries and a short transmit interval: a test sees a restart's effect in seconds.
FAST = {"x_file_stream_transmit_interval": 0.2, "x_file_stream_retry_wait_min_seconds": 0.2,
        "x_file_stream_retry_wait_max_seconds": 1.0, "x_graphql_retry_wait_min_seconds": 0.2,
        "x_graphql_retry_wait_max_seconds": 1.0, "x_disable_stats": True, "console": "off"}


def wandb_env(tmp_path: Path, server: str | None, key: str, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update({"WANDB_API_KEY": key, "WANDB_DIR": str(tmp_path / "wandb-dir"), "WANDB_CONFIG_DIR": str(
        tmp_path / "wandb-config"), "WANDB_CACHE_DIR": str(tmp_path / "wandb-cache"), "WANDB_ERROR_REPORTING": "false",
        "WANDB_DISABLE_GIT": "true", "WANDB_DISABLE_CODE": "true", **extra})
    if server is not None:
        env["WANDB_BASE_URL"] = f"http://{server}/wandb"
    (tmp_path / "wandb-dir").mkdir(exist_ok=True)
    return env


def train(tmp_path: Path, server: str | None, key: str, plan: dict, *, check: bool = True, **extra: str
          ) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, str(TRAINER)], input=json.dumps(plan), capture_output=True, text=True,
                          timeout=180, env=wandb_env(tmp_path, server, key, **extra), cwd=tmp_path)
    if check:
        assert done.returncode == 0 and "FINISHED" in done.stdout, done.stderr[-4000:]
    return done


def points_of(job: Job) -> Counter:
    return Counter(TracePoint.objects.filter(series__job=job).values_list("series__key", "step"))


def values_of(job: Job) -> dict:
    return {(k, s): v for k, s, v in TracePoint.objects.filter(series__job=job).values_list(
        "series__key", "step", "value")}


def prime_rl_step(step: int) -> dict:
    """prime-rl's mismatch metrics at ``step``: its exact k3 is 20.5 + step times the unit."""
    return {"mismatch_kl/all/mean": (20.5 + step) * UNIT_K3, "mismatch_kl/all/max": 0.5,
            "loss/mean": 1.0 / step, "progress/total_tokens": 1000 * step}


@pytest.fixture
def world(tmp_path, settings):
    return Watched(tmp_path, settings)


@pytest.mark.django_db(transaction=True)
def test_a_prime_rl_run_logged_with_wandb_crosses_the_budget_at_its_step_and_sends_one_signed_webhook(
        world, start_asgi_server, start_worker, receiver, tmp_path):  # noqa: F811
    hook = receiver()
    TeamWebhook.objects.create(team=world.team, url=hook.url, secret=SECRET)
    worker = start_worker(queues="cpu", WEBHOOK_ALLOWED_HOSTS=allowed_host(hook.url))
    server = start_asgi_server(OPDWEB_MODEL_ROOTS=str(tmp_path / "models"))
    _, key = do_create_token(user=world.member, team=world.team, name="prime-rl", can_write=True)
    steps = [[step, prime_rl_step(step)] for step in range(1, 41)]
    plan = {"init": {"project": "opd-smollm2", "name": "prime-rl fp8", "group": "sweep-1", "tags": ["fp8", "kv"],
                     "config": {"opdweb": {"approval": world.approval.pk, "checkpoint": world.checkpoint},
                                "lr": 1e-6, "model": {"name": "smollm2"}}, "settings": FAST},
            "steps": steps, "summary": {"best_reward": 0.75},
            "alert": {"title": "reward plateau", "text": "no gain in 100 steps", "level": "WARN"},
            "config_update": {"seed": 7}}
    done = train(tmp_path, server, key, plan)
    run_id = done.stdout.split()[0]

    wb = WandbRun.objects.select_related("run__job", "experiment").get(name=run_id)
    job = wb.run.job
    assert (job.team, job.kind, job.state, job.name) == (world.team, "external", JobState.SUCCEEDED, "prime-rl fp8")
    assert (wb.experiment.name, wb.group, wb.tags) == ("opd-smollm2", "sweep-1", ["fp8", "kv"])
    assert wb.config["lr"]["value"] == 1e-6 and wb.config["model"]["value"] == {"name": "smollm2"}
    assert wb.config["seed"]["value"] == 7  # config.update after init
    assert wb.summary["best_reward"] == 0.75 and wb.summary["_step"] == 40
    link = RunLink.objects.get(job=job)
    assert (link.approval_id, link.k3_key) == (world.approval.pk, "mismatch_kl/all/mean")

    logged = {(key, step) for step, metrics in steps for key in metrics}
    counted = points_of(job)
    assert set(counted) == logged | {(MULTIPLE_KEY, step) for step, _ in steps}
    assert set(counted.values()) == {1}  # every point once
    values = values_of(job)
    assert values[("progress/total_tokens", 17)] == 17000 and values[("loss/mean", 4)] == 0.25
    assert values[(MULTIPLE_KEY, 1)] == pytest.approx(21.5) and values[(MULTIPLE_KEY, 40)] == pytest.approx(60.5)

    deliveries = WebhookDelivery.objects.filter(team=world.team, event="run.alert")
    wait_for(lambda: deliveries.exists() and not deliveries.filter(state="pending").exists(), 120,
             "the alert delivered", interval=0.2, process=worker)
    assert list(deliveries.values_list("state", flat=True)) == ["delivered"] and len(hook.received) == 1
    got = hook.received[0]
    assert got["headers"]["X-Opdweb-Signature"] == "sha256=" + hmac.new(
        SECRET.encode(), got["body"], hashlib.sha256).hexdigest()
    payload = json.loads(got["body"])
    assert (payload["rule"], payload["step"], payload["job"], payload["threshold"]) == (
        "budget", CROSSING_STEP, job.pk, BUDGET)
    assert Alert.objects.get(job=job).step == CROSSING_STEP
    world.approval.refresh_from_db()
    assert (world.approval.breached_at_step, world.approval.breached_by_id) == (CROSSING_STEP, job.pk)

    own = TrainerAlert.objects.get(job=job)
    assert (own.title, own.text, own.severity) == ("reward plateau", "no gain in 100 steps", "WARN")
    files = {f.key for f in mlflow_artifacts.files_of(wb.run)}
    assert {"wandb/config.yaml", "wandb/wandb-summary.json", "wandb/wandb-metadata.json"} <= files
    page = world.client(world.member).get(f"/jobs/{job.pk}/").content.decode()
    for shown in ("sweep-1", "fp8", "best_reward", "reward plateau", "no gain in 100 steps",
                  'data-alert-kind="budget"'):
        assert shown in page, shown


@pytest.mark.django_db(transaction=True)
def test_a_slime_run_linked_by_a_tag_lands_once_and_its_proxy_raises_nothing(world, start_asgi_server, tmp_path):
    server = start_asgi_server(OPDWEB_MODEL_ROOTS=str(tmp_path / "models"))
    _, key = do_create_token(user=world.member, team=world.team, name="slime", can_write=True)
    steps = [[step, {"train/train_rollout_logprob_abs_diff": 0.5 + step / 10, "train/loss": 2.0 - step / 100,
                     "rollout/response_len/mean": 512}] for step in range(0, 40)]
    plan = {"init": {"project": "slime-opd", "settings": {**FAST, "console": "auto"}}, "steps": steps,
            "print": "rollout 39 done"}
    # slime's own wandb.init takes no tags from its flags: WANDB_TAGS, as the approval page says
    done = train(tmp_path, server, key, plan, WANDB_TAGS=f"opdweb.approval={world.approval.pk},fp8")
    wb = WandbRun.objects.get(name=done.stdout.split()[0])
    job = wb.run.job
    assert wb.tags == [f"opdweb.approval={world.approval.pk}", "fp8"]
    assert RunLink.objects.get(job=job).approval_id == world.approval.pk
    counted = points_of(job)
    assert set(counted) == {(key, step) for step, metrics in steps for key in metrics}  # no multiple: a proxy
    assert set(counted.values()) == {1}
    assert not Alert.objects.filter(job=job).exists()
    assert any("rollout 39 done" in e.message for e in job.log_entries.all())  # console output in the job log


@pytest.mark.django_db(transaction=True)
def test_a_run_whose_wandb_config_is_the_approved_yaml_export_is_linked_by_its_provenance(
        world, start_asgi_server, tmp_path):
    import yaml

    exported = world.client(world.member).post(f"/approvals/{world.approval.pk}/export/yaml/")
    assert exported.status_code == 200
    config = yaml.safe_load(exported.content)  # what a trainer loading the file logs as its config
    assert config["opdweb"]["approval_id"] == world.approval.pk and config["opdweb"]["config_hash"]
    server = start_asgi_server(OPDWEB_MODEL_ROOTS=str(tmp_path / "models"))
    _, key = do_create_token(user=world.member, team=world.team, name="trainer", can_write=True)
    done = train(tmp_path, server, key, {"init": {"project": "p", "config": config, "settings": FAST},
                                         "steps": [[1, prime_rl_step(1)]]})
    job = WandbRun.objects.get(name=done.stdout.split()[0]).run.job
    assert RunLink.objects.get(job=job).approval_id == world.approval.pk
    assert values_of(job)[(MULTIPLE_KEY, 1)] == pytest.approx(21.5)


def test_link_tags_are_read_from_tags_flat_config_values_and_an_exports_provenance():
    from opdweb.runs.wandb_actions import link_tags

    assert link_tags(["fp8", "opdweb.approval=12", "opdweb.checkpoint:/m/s"], {}) == {
        "opdweb.approval": "12", "opdweb.checkpoint": "/m/s"}
    assert link_tags([], {"opdweb.config_hash": {"value": "abcdef012345"}, "lr": {"value": 1}}) == {
        "opdweb.config_hash": "abcdef012345"}
    assert link_tags([], {"opdweb": {"value": {"approval_id": 7, "config_hash": "ab" * 32, "checkpoint": "/m"}}}) == {
        "opdweb.approval": "7", "opdweb.config_hash": "ab" * 32, "opdweb.checkpoint": "/m"}
    assert link_tags(["opdweb.approval=3"], {"opdweb": {"value": {"approval": 4}}}) == {"opdweb.approval": "3"}
    assert link_tags(["opdweb.approvals=3", "x=opdweb.approval=1"], {"opdweb": {"value": "12"}}) == {}


@pytest.mark.django_db(transaction=True)
def test_resume_must_continues_an_ended_run_and_offline_then_sync_gives_the_same_points(
        member, start_asgi_server, tmp_path):
    user, team = member
    server = start_asgi_server()
    _, key = do_create_token(user=user, team=team, name="trainer", can_write=True)
    # Steps counted by the client; "kl" sent with commit=False joins the next committed step.
    first = [row for step in range(5) for row in ([None, {"kl": 0.001 * step}, False],
                                                   [None, {"reward": step / 10, "note": "text"}])]
    run_id = train(tmp_path, server, key, {"init": {"project": "p", "id": "resumed1", "settings": FAST},
                                           "define_metric": [["reward", {"summary": "max"}]],
                                           "steps": first}).stdout.split()[0]
    assert run_id == "resumed1"
    wb = WandbRun.objects.get(name=run_id)
    job = wb.run.job
    assert job.state == JobState.SUCCEEDED
    assert sorted(points_of(job)) == [(k, s) for k in ("kl", "reward") for s in range(5)]  # "note" is no series
    assert values_of(job)[("kl", 3)] == pytest.approx(0.003)
    assert wb.summary["reward"] == {"max": 0.4}  # define_metric's summary, as the client computed it
    more = [[None, {"reward": 1 + step / 10}] for step in range(3)]
    train(tmp_path, server, key, {"init": {"project": "p", "id": "resumed1", "resume": "must", "settings": FAST},
                                  "steps": more}, check=True)
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED and WandbRun.objects.filter(name="resumed1").count() == 1
    assert sorted(s for k, s in points_of(job) if k == "reward") == list(range(8))  # the client went on at step 5
    assert values_of(job)[("reward", 6)] == pytest.approx(1.1)
    train(tmp_path, server, key, {"init": {"project": "p", "id": "resumed1", "resume": "allow", "settings": FAST},
                                  "steps": [[None, {"reward": 2.0}]]})
    assert values_of(job)[("reward", 8)] == 2.0
    assert set(points_of(job).values()) == {1}
    missing = train(tmp_path, server, key, {"init": {"project": "p", "id": "nosuchrun", "resume": "must",
                                                     "settings": FAST}}, check=False)
    assert missing.returncode != 0 and "resume" in missing.stderr and "nosuchrun" in missing.stderr

    plan = {"init": {"project": "p", "id": "online1", "settings": FAST},
            "steps": [[step, {"loss": 1 / (step + 1), "mismatch_kl/all/mean": 0.002 * step}] for step in range(20)]}
    train(tmp_path, server, key, plan)
    offline_dir = tmp_path / "offline"
    offline_dir.mkdir()
    train(offline_dir, None, key, {**plan, "init": {**plan["init"], "id": "offline1"}}, WANDB_MODE="offline")
    run_dirs = list((offline_dir / "wandb-dir" / "wandb").glob("offline-run-*"))
    assert len(run_dirs) == 1
    synced = subprocess.run([str(WANDB), "sync", str(run_dirs[0])], capture_output=True, text=True, timeout=120,
                            env=wandb_env(offline_dir, server, key))
    assert synced.returncode == 0, synced.stderr[-3000:]
    online = values_of(WandbRun.objects.get(name="online1").run.job)
    offline = values_of(WandbRun.objects.get(name="offline1").run.job)
    assert online == offline and len(online) == 40


@pytest.mark.django_db(transaction=True)
def test_refused_tokens_show_the_clients_own_error_and_write_nothing(member, start_asgi_server, tmp_path):
    user, team = member
    other = TeamFactory()
    MembershipFactory(team=other, user=user)
    server = start_asgi_server()
    _, read_only = do_create_token(user=user, team=team, name="reader", can_write=False)
    revoked_token, revoked = do_create_token(user=user, team=team, name="old", can_write=True)
    do_revoke_token(token=revoked_token, actor=user)
    _, of_other = do_create_token(user=user, team=other, name="other team", can_write=True)
    plan = {"init": {"project": "p", "settings": FAST}, "steps": [[0, {"loss": 1.0}]]}
    cases = [(read_only, {}, "read-only"), (revoked, {}, "revoked"),
             (of_other, {"WANDB_ENTITY": team.slug}, f"writes to team {other.slug}")]
    for key, extra, why in cases:
        done = train(tmp_path, server, key, plan, check=False, **extra)
        assert done.returncode != 0 and "FINISHED" not in done.stdout, done.stdout
        assert why in done.stderr, (why, done.stderr[-3000:])
    assert not WandbRun.objects.exists() and not Job.objects.filter(kind="external").exists()


@pytest.mark.django_db(transaction=True)
def test_the_server_killed_and_restarted_mid_run_loses_and_doubles_nothing(member, start_asgi_server, tmp_path):
    user, team = member
    first = start_asgi_server()
    proxy = TcpProxy(first)
    _, key = do_create_token(user=user, team=team, name="trainer", can_write=True)
    pause = tmp_path / "go-on"
    steps = [[step, {"loss": 1 / (step + 1), "reward": step / 100}] for step in range(60)]
    plan = {"init": {"project": "p", "settings": FAST}, "steps": steps, "pause_after": 29, "pause_file": str(pause)}
    trainer = subprocess.Popen([sys.executable, str(TRAINER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=wandb_env(tmp_path, proxy.address, key),
                               cwd=tmp_path)
    trainer.stdin.write(json.dumps(plan))
    trainer.stdin.close()
    trainer.stdin = None  # communicate() below reads only
    try:
        run_id = trainer.stdout.readline().strip()
        wb = lambda: WandbRun.objects.get(name=run_id)  # noqa: E731
        # Step 29's row stays open in the client until a later step is logged: 0-28 are sent.
        wait_for(lambda: WandbRun.objects.filter(name=run_id, history_lines=29).exists(), 60, "steps 0-28 received")
        proxy.swallow_next(1)  # the next file-stream answer is lost: the client sends those lines again
        daphne = [p for p in _children() if first.split(":")[1] in p[1]]
        assert len(daphne) == 1, daphne
        pause.touch()
        wait_for(lambda: proxy.swallowed == 1, 60, "an answer swallowed")
        os.kill(daphne[0][0], signal.SIGKILL)  # and the server dies, mid-run
        proxy.target = start_asgi_server()
        out, err = trainer.communicate(timeout=180)
        assert trainer.returncode == 0 and "FINISHED" in out, err[-4000:]
    finally:
        if trainer.poll() is None:
            trainer.kill()
        proxy.close()
    job = wb().run.job
    assert job.state == JobState.SUCCEEDED and wb().history_lines == 60
    counted = points_of(job)
    assert set(counted) == {(k, s) for s, metrics in steps for k in metrics} and set(counted.values()) == {1}


def _children() -> list[tuple[int, str]]:
    """(pid, command line) of the processes of this machine that run daphne (web_server)."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                line = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if "opdweb.web_server" in line:
                found.append((int(proc.name), line))
    return found


def test_every_minted_token_is_a_key_the_wandb_client_accepts():
    from wandb.sdk.lib.wbauth.validation import check_api_key

    from opdweb.tokens.minting import new_secret

    secrets = [new_secret() for _ in range(2000)]
    assert [check_api_key(s) for s in secrets] == [None] * len(secrets)
    assert len(set(secrets)) == len(secrets)
