"""The product as a cluster of hosts that share nothing (tests/hosts.py): a services host
(``launcher services``: PostgreSQL, Redis, SeaweedFS), a web host (``launcher run --role
web``), worker hosts (``launcher run --role worker``) and a client host for the people using
it, each with its own ``var/``; only the checkout of the code is common, as an image is."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import requests

from opdweb.cluster_services import read_env
from tests.hosts import Host, Network

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
#: What the host processes may inherit from the test's environment: no server address.
_NOT_INHERITED = ("DATABASE_URL", "REDIS_URL", "S3_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                  "OPDWEB_DATA_DIR", "CHANNEL_PREFIX", "SECRET_KEY", "OPDWEB_ARTIFACT_ROOT", "OPDWEB_CHECKPOINT_URIS")
WEB_PORT = 8000


def wait(predicate, timeout: float, what: str, interval: float = 0.5, logs=()):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            tails = "".join(f"\n--- {p}:\n{Path(p).read_text(errors='replace')[-3000:]}" for p in logs)
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}{tails}")
        time.sleep(interval)


class Cluster:
    def __init__(self, root: Path, **host_env: str):
        self.network = Network(root)
        self.host_env = host_env
        self.services = self.network.add("services")
        self.web = self.network.add("web")
        self.client = self.network.add("client")
        self.workers: dict[str, tuple[Host, subprocess.Popen]] = {}
        self.base_env = {k: v for k, v in os.environ.items() if k not in _NOT_INHERITED}
        self.cluster_env: dict[str, str] = {}

    # -- bringing it up ------------------------------------------------------------------------
    def env_of(self, host: Host, **extra: str) -> dict[str, str]:
        return {**self.base_env, **self.cluster_env, "OPDWEB_DATA_DIR": str(host.dir / "var"),
                "PYTHONUNBUFFERED": "1", **self.host_env, **extra}

    def start(self) -> None:
        svc = self.services
        svc.start("services", [PY, "-m", "opdweb.launcher", "services", "--listen", svc.ip],
                  {**self.base_env, "OPDWEB_DATA_DIR": str(svc.dir / "var")}, cwd=ROOT)
        env_file = svc.dir / "var" / "cluster.env"
        wait(env_file.exists, 120, "the services host", logs=[svc.dir / "services.log"])
        self.cluster_env = read_env(env_file)  # what an operator copies to the other hosts
        web = self.web
        web.start("web", [PY, "-m", "opdweb.launcher", "run", "--role", "web", "--no-demo", "--host", web.ip,
                          "--port", str(WEB_PORT)], self.env_of(web, ALLOWED_HOSTS=web.ip), cwd=ROOT)
        wait(lambda: self.answers("/healthz"), 180, "the web host", logs=[web.dir / "web.log"])

    def add_worker(self, name: str) -> Host:
        host = self.network.add(name)
        proc = host.start("worker", [PY, "-m", "opdweb.launcher", "run", "--role", "worker"], self.env_of(host),
                          cwd=ROOT)
        self.workers[name] = (host, proc)
        wait(lambda: self.sql("SELECT count(*) FROM health_workerpresence WHERE name LIKE %s AND NOT stopped",
                              [f"%@{name}"])[0][0] >= 2, 120, f"{name}'s workers to report in",
             logs=[host.dir / "worker.log"])
        return host

    def close(self) -> None:
        self.network.close()

    # -- talking to it ---------------------------------------------------------------------------
    def url(self, path: str) -> str:
        return f"http://{self.web.ip}:{WEB_PORT}{path}"

    def answers(self, path: str) -> bool:
        try:
            with self.client.entered():
                requests.get(self.url(path), timeout=3)
            return True
        except requests.RequestException:
            return False

    def sql(self, query: str, params=()) -> list[tuple]:
        """A query on the cluster's database, from the web host's network."""
        import psycopg

        with self.web.entered(), psycopg.connect(self.cluster_env["DATABASE_URL"], connect_timeout=5) as conn:
            return conn.execute(query, params).fetchall()

    def manage(self, *args: str) -> str:
        """``manage.py`` on the web host."""
        return self.web.run([PY, str(ROOT / "manage.py"), *args], self.env_of(self.web), cwd=ROOT)

    def shell(self, code: str) -> dict:
        """Python in Django on the web host; what it prints last, as JSON."""
        return json.loads(self.manage("shell", "-c", code).strip().splitlines()[-1])

    def s3(self):
        """A boto3 client of the cluster's store, its sockets on the client host."""
        import boto3
        from botocore.config import Config

        with self.client.entered():
            return boto3.session.Session().client(
                "s3", endpoint_url=self.cluster_env["S3_ENDPOINT_URL"],
                aws_access_key_id=self.cluster_env["AWS_ACCESS_KEY_ID"],
                aws_secret_access_key=self.cluster_env["AWS_SECRET_ACCESS_KEY"],
                region_name=self.cluster_env["AWS_DEFAULT_REGION"], config=Config(s3={"addressing_style": "path"}))

    def upload(self, folder: Path, bucket: str, prefix: str) -> None:
        client = self.s3()
        with self.client.entered():
            for f in sorted(folder.rglob("*")):
                if f.is_file():
                    client.upload_file(str(f), bucket, f"{prefix}/{f.relative_to(folder).as_posix()}")


class Visitor:
    """Someone in a browser on the client host: a session cookie, forms with their CSRF token."""

    def __init__(self, cluster: Cluster, username: str, password: str):
        self.cluster, self.session = cluster, requests.Session()
        r = self.get("/login/")
        r = self.post("/login/", {"username": username, "password": password})
        assert r.status_code == 302, (r.status_code, r.text[-2000:])

    def get(self, path: str, **kw) -> requests.Response:
        with self.cluster.client.entered():
            return self.session.get(self.cluster.url(path), allow_redirects=False, timeout=60, **kw)

    def post(self, path: str, data: dict) -> requests.Response:
        token = self.session.cookies.get("csrftoken") or ""
        with self.cluster.client.entered():
            return self.session.post(self.cluster.url(path), data={**data, "csrfmiddlewaretoken": token},
                                     headers={"X-CSRFToken": token}, allow_redirects=False, timeout=60)


class ApiClient:
    def __init__(self, cluster: Cluster, token: str):
        self.cluster, self.session = cluster, requests.Session()
        self.session.headers["Authorization"] = f"Bearer {token}"

    def request(self, method: str, path: str, **kw) -> requests.Response:
        with self.cluster.client.entered():
            return self.session.request(method, self.cluster.url(path), timeout=60, **kw)

    def job(self, job_id: int) -> dict:
        r = self.request("GET", f"/api/jobs/{job_id}")
        assert r.status_code == 200, r.text
        return r.json()

    def wait_job(self, job_id: int, timeout: float = 600, logs=()) -> dict:
        done = ("succeeded", "failed", "cancelled")
        return wait(lambda: (j := self.job(job_id))["state"] in done and j, timeout, f"job #{job_id}", logs=logs)
