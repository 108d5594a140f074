"""Artifacts, MLflow's way: the official client (``mlflow-skinny``, pinned) against a real
daphne logs, lists, reads and downloads a run's files through the proxied artifact API
(``mlflow-artifacts:`` URIs); they land in the product's artifact store, and nothing is
written into the client's working directory (the client once overwrote
``./configs/rollout.yaml`` there).  Other teams, read-only tokens, paths that climb out and
files over the limit are refused in MLflow's error shape."""
from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from opdweb.tokens.actions import do_create_token
from tests.web.factories import MembershipFactory, TeamFactory

ROOT_DIR = Path(__file__).resolve().parents[2]
LIMIT = 200_000
ORIGINAL = b"weights: fp8_e4m3\n# the trainer's own file: must never change\n"


@pytest.fixture
def server(start_asgi_server, tmp_path):
    root = tmp_path / "artifact-store"
    return start_asgi_server(OPDWEB_ARTIFACT_ROOT=str(root), OPDWEB_ARTIFACT_MAX_BYTES=str(LIMIT)), root


@pytest.fixture
def client(member, server, tmp_path, monkeypatch):
    """The ``mlflow`` module with a read-write token, run from a working directory that holds
    a trainer's ``configs/rollout.yaml``."""
    address, _ = server
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    monkeypatch.setenv("DO_NOT_TRACK", "true")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    user, team = member
    secret = do_create_token(user=user, team=team, name="trainer", can_write=True)[1]
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://{address}/mlflow")
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", secret)
    workdir = tmp_path / "trainer"
    (workdir / "configs").mkdir(parents=True)
    (workdir / "configs" / "rollout.yaml").write_bytes(ORIGINAL)
    monkeypatch.chdir(workdir)
    import mlflow

    yield mlflow
    if mlflow.active_run() is not None:
        mlflow.end_run()


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_the_clients_artifact_calls_land_in_the_store_and_not_in_its_working_directory(client, server, tmp_path):
    mlflow = client
    _, root = server
    before = tree(Path.cwd())
    local = tmp_path / "outputs"
    (local / "sub").mkdir(parents=True)
    (local / "a.txt").write_bytes(b"alpha")
    (local / "sub" / "b.bin").write_bytes(bytes(range(256)))
    top = tmp_path / "top.json"
    top.write_text('{"k": 1}')
    with mlflow.start_run() as run:
        uri = run.info.artifact_uri
        mlflow.log_text("x", "configs/rollout.yaml")
        mlflow.log_dict({"lr": 1e-6, "steps": [1, 2]}, "configs/train.json")
        mlflow.log_dict({"kv_cache": "fp8_e4m3"}, "configs/rollout-admitted.yaml")
        mlflow.log_artifact(str(top))
        mlflow.log_artifact(str(top), artifact_path="deep/er")
        mlflow.log_artifacts(str(local), artifact_path="outputs")
        import numpy as np

        mlflow.log_image(np.zeros((4, 5, 3), dtype=np.uint8), "images/black.png")
        run_id, experiment_id = run.info.run_id, run.info.experiment_id
    assert uri == f"mlflow-artifacts:/{experiment_id}/{run_id}/artifacts"
    assert tree(Path.cwd()) == before  # the trainer's directory is untouched, byte for byte

    assert mlflow.artifacts.load_text(f"{uri}/configs/rollout.yaml") == "x"
    assert mlflow.artifacts.load_dict(f"{uri}/configs/train.json") == {"lr": 1e-6, "steps": [1, 2]}
    assert mlflow.artifacts.load_dict(f"{uri}/configs/rollout-admitted.yaml") == {"kv_cache": "fp8_e4m3"}
    listed = mlflow.MlflowClient().list_artifacts(run_id)
    assert [(f.path, f.is_dir, f.file_size) for f in listed] == [
        ("configs", True, None), ("deep", True, None), ("images", True, None), ("outputs", True, None),
        ("top.json", False, 8)]
    inner = mlflow.MlflowClient().list_artifacts(run_id, "outputs")
    assert [(f.path, f.is_dir, f.file_size) for f in inner] == [("outputs/a.txt", False, 5),
                                                               ("outputs/sub", True, None)]
    fetched = Path(mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path="outputs",
                                                       dst_path=str(tmp_path / "fetched")))
    assert tree(fetched) == {"a.txt": b"alpha", "sub/b.bin": bytes(range(256))}

    stored = tree(root / experiment_id / run_id / "artifacts")
    assert stored["configs/rollout.yaml"] == b"x" and stored["deep/er/top.json"] == b'{"k": 1}'
    assert stored["outputs/sub/b.bin"] == bytes(range(256)) and stored["images/black.png"].startswith(b"\x89PNG")
    assert json.loads(stored["configs/train.json"]) == {"lr": 1e-6, "steps": [1, 2]}
    assert tree(Path.cwd()) == before


def streamed(response) -> bytes:
    from asgiref.sync import async_to_sync

    async def gather() -> bytes:
        return b"".join([chunk async for chunk in response.streaming_content])

    return async_to_sync(gather)()


def raw(server, token: str, method: str, path: str, **kw) -> requests.Response:
    address, _ = server
    return requests.request(method, f"http://{address}/mlflow/api/2.0/mlflow-artifacts/artifacts/{path}",
                            headers={"Authorization": f"Bearer {token}"}, timeout=30, **kw)


def test_refusals_come_in_mlflows_shape_and_keep_nothing(client, server, member, tmp_path):
    mlflow = client
    _, root = server
    with mlflow.start_run() as run:
        run_id, experiment_id = run.info.run_id, run.info.experiment_id
    token = os.environ["MLFLOW_TRACKING_TOKEN"]
    base = f"{experiment_id}/{run_id}/artifacts"
    user, team = member
    read_only = do_create_token(user=user, team=team, name="reader", can_write=False)[1]
    stranger = MembershipFactory(team=TeamFactory())
    theirs = do_create_token(user=stranger.user, team=stranger.team, name="other", can_write=True)[1]

    for path, status, code in [
        (f"{base}/%2e%2e/%2e%2e/x.txt", 400, "INVALID_PARAMETER_VALUE"),
        (f"{base}/%252e%252e/%252e%252e/x.txt", 400, "INVALID_PARAMETER_VALUE"),  # encoded twice
        (f"{base}//etc/x.txt", 400, "INVALID_PARAMETER_VALUE"),
        (f"{base}/{'n' * 300}.txt", 400, "INVALID_PARAMETER_VALUE"),  # longer than a file name may be
        (f"{base}/a%00b.txt", 400, "INVALID_PARAMETER_VALUE"),
        (f"{experiment_id}/{run_id}/loose.txt", 400, "INVALID_PARAMETER_VALUE"),
        (f"{experiment_id}/no-such-run/artifacts/x.txt", 404, "RESOURCE_DOES_NOT_EXIST"),
        (f"{int(experiment_id) + 1}/{run_id}/artifacts/x.txt", 404, "RESOURCE_DOES_NOT_EXIST"),
    ]:
        r = raw(server, token, "PUT", path, data=b"x")
        assert (r.status_code, r.json()["error_code"]) == (status, code), (path, r.text)
    address, _ = server  # a literal "..", which an HTTP library would fold away before sending
    conn = http.client.HTTPConnection(address, timeout=30)
    conn.request("PUT", f"/mlflow/api/2.0/mlflow-artifacts/artifacts/{base}/../../../escape.txt", body=b"x",
                 headers={"Authorization": f"Bearer {token}"})
    answer = conn.getresponse()
    assert (answer.status, json.loads(answer.read())["error_code"]) == (400, "INVALID_PARAMETER_VALUE")
    conn.close()
    r = raw(server, read_only, "PUT", f"{base}/x.txt", data=b"x")
    assert r.status_code == 403 and r.json()["error_code"] == "PERMISSION_DENIED"
    r = raw(server, theirs, "PUT", f"{base}/x.txt", data=b"x")
    assert r.status_code in (403, 404) and "error_code" in r.json()
    r = raw(server, token, "PUT", f"{base}/big.bin", data=os.urandom(LIMIT + 1))
    assert r.status_code == 413 and r.json()["error_code"] == "INVALID_PARAMETER_VALUE"
    assert raw(server, token, "PUT", f"{base}/ok.bin", data=os.urandom(LIMIT)).status_code == 200

    assert raw(server, token, "PUT", f"{base}/ok.bin/inside.txt", data=b"x").status_code == 400  # a file there
    r = requests.post(f"http://{server[0]}/mlflow/api/2.0/mlflow-artifacts/mpu/create/{base}/big.bin",
                      headers={"Authorization": f"Bearer {token}"}, json={"path": "big.bin", "num_parts": 2},
                      timeout=30)
    assert r.status_code == 501 and r.json()["message"].startswith("Multipart upload is not supported")

    assert tree(root) and set(tree(root)) == {f"{base}/ok.bin"}  # only the one that was allowed
    r = raw(server, theirs, "GET", f"{base}/ok.bin")
    assert r.status_code in (403, 404)
    r = raw(server, read_only, "GET", f"{base}/ok.bin")
    assert r.status_code == 200 and len(r.content) == LIMIT
    assert r.headers["Content-Disposition"].startswith("attachment") and r.headers["X-Content-Type-Options"] == \
        "nosniff"
    assert raw(server, token, "DELETE", f"{base}/ok.bin").status_code == 200
    assert tree(root) == {}


def test_the_run_page_lists_its_files_and_only_its_team_downloads_them(client, server, member, outsider, settings):
    from django.test import Client

    from opdweb.runs.models import MlflowRun

    mlflow = client
    settings.OPDWEB_ARTIFACT_ROOT = str(server[1])  # the page reads the store the server wrote to
    with mlflow.start_run() as run:
        mlflow.log_text("<script>alert(1)</script>", "notes/page.html")
        run_id = run.info.run_id
    job = MlflowRun.objects.get(run_id=run_id).job
    user, _ = member
    ours, theirs = Client(), Client()
    ours.force_login(user)
    theirs.force_login(outsider)
    page = ours.get(f"/jobs/{job.pk}/").content.decode()
    assert f'href="/runs/{job.pk}/artifacts/notes/page.html"' in page and "<td>25</td>" in page
    got = ours.get(f"/runs/{job.pk}/artifacts/notes/page.html")
    assert got.status_code == 200 and streamed(got) == b"<script>alert(1)</script>"
    assert got.is_async  # read off the event loop a chunk at a time, never gathered whole in the server
    assert got["Content-Type"] == "application/octet-stream" and got["Content-Disposition"].startswith("attachment")
    assert theirs.get(f"/runs/{job.pk}/artifacts/notes/page.html").status_code == 404
    assert ours.get(f"/runs/{job.pk}/artifacts/notes/none.txt").status_code == 404
    assert ours.get(f"/runs/{job.pk}/artifacts/notes/%2e%2e/%2e%2e/x").status_code in (400, 404)


MLFLOW_SERVER_PYTHON = ROOT_DIR / "var" / "mlflow-server" / "bin" / "python"


def transcript(tracking_uri: str, token: str, workdir: Path) -> list[dict]:
    """The script's calls against ``tracking_uri``, run as a trainer would, from ``workdir``."""
    env = {**os.environ, "MLFLOW_TRACKING_URI": tracking_uri, "MLFLOW_TRACKING_TOKEN": token,
           "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true", "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0"}
    done = subprocess.run([sys.executable, str(Path(__file__).with_name("mlflow_artifact_script.py"))], env=env,
                          cwd=workdir, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


@pytest.mark.slow
@pytest.mark.needs.with_args(lambda: None if MLFLOW_SERVER_PYTHON.is_file() else
                             "MLflow's own server, in var/mlflow-server (make test installs it)")
def test_the_same_script_gets_the_same_answers_from_mlflows_own_server(server, member, tmp_path):
    """``mlflow server --serve-artifacts`` and the product answer the script's calls alike,
    call by call, and neither writes into the trainer's directory."""
    from opdweb.embedded_servers import free_port
    from tests.web.conftest import wait_for

    address, _ = server
    user, team = member
    token = do_create_token(user=user, team=team, name="trainer", can_write=True)[1]
    port = free_port()
    theirs = tmp_path / "mlflow-server"
    theirs.mkdir()
    with open(theirs / "server.log", "wb") as log:
        mlflow_server = subprocess.Popen(
            [str(MLFLOW_SERVER_PYTHON), "-m", "mlflow", "server", "--backend-store-uri",
             f"sqlite:///{theirs / 'mlflow.db'}", "--serve-artifacts", "--artifacts-destination",
             str(theirs / "artifacts"), "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
            env={**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True)
    try:
        wait_for(lambda: _healthy(port), 180, "MLflow's server to start")
        results = {}
        for name, uri in (("mlflow", f"http://127.0.0.1:{port}"), ("opdweb", f"http://{address}/mlflow")):
            workdir = tmp_path / f"trainer-{name}"
            (workdir / "configs").mkdir(parents=True)
            (workdir / "configs" / "rollout.yaml").write_bytes(ORIGINAL)
            results[name] = transcript(uri, token, workdir)
    finally:
        os.killpg(mlflow_server.pid, signal.SIGTERM)
        mlflow_server.wait(timeout=30)
    assert len(results["opdweb"]) == len(results["mlflow"]) == 20
    for ours, theirs_ in zip(results["opdweb"], results["mlflow"], strict=True):
        assert ours == theirs_
    assert results["opdweb"][-1] == {"call": "working directory unchanged", "returned": True}


def _healthy(port: int) -> bool:
    try:
        return requests.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200
    except requests.RequestException:
        return False


def test_a_client_that_asks_for_multipart_upload_falls_back_to_one_put(client, server, monkeypatch, tmp_path):
    """``MLFLOW_ENABLE_PROXY_MULTIPART_UPLOAD``: the product answers the multipart request
    501, as MLflow's server does for a store without it, and the client sends one PUT."""
    monkeypatch.setenv("MLFLOW_ENABLE_PROXY_MULTIPART_UPLOAD", "true")
    monkeypatch.setenv("MLFLOW_MULTIPART_UPLOAD_MINIMUM_FILE_SIZE", "1")
    mlflow = client
    payload = os.urandom(50_000)
    (tmp_path / "weights.bin").write_bytes(payload)
    with mlflow.start_run() as run:
        mlflow.log_artifact(str(tmp_path / "weights.bin"), "ckpt")
    assert (server[1] / run.info.experiment_id / run.info.run_id / "artifacts" / "ckpt" / "weights.bin").read_bytes() \
        == payload
