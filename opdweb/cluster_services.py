"""The services host of a small cluster: the embedded PostgreSQL, Redis and object store of
:mod:`opdweb.embedded_servers`, listening on an address the other hosts reach, each behind a
password made on first start, supervised like every other process of the product.

    python -m opdweb.launcher services --listen 10.0.0.5

writes ``var/cluster.env``: the environment a web host and a worker host need
(``DATABASE_URL``, ``REDIS_URL``, the object store's ``S3_ENDPOINT_URL`` and keys, and
``OPDWEB_ARTIFACT_ROOT``), to copy to them.  A team with its own PostgreSQL, Redis and S3
store gives those instead and needs no services host (docs/deployment.md).

No Django here: the launcher calls this before any settings exist.
"""
from __future__ import annotations

import secrets
import signal
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from opdweb.embedded_servers import _start_and_wait, postgres_child, redis_child, start_embedded_object_store
from opdweb.supervisor import Child, Supervisor

PORTS = {"postgres": 5432, "redis": 6379, "s3": 8333}
EMBEDDED_DB_NAME = "opdweb"


@dataclass
class ClusterServices:
    env: dict[str, str]
    servers: Supervisor = field(default_factory=lambda: Supervisor([]))

    def check(self) -> None:
        self.servers.check()

    def stop(self) -> None:
        self.servers.stop()


def secret(var: Path, name: str) -> str:
    """A password kept under ``var/services/`` (mode 600), made on first use."""
    path = var / "services" / name
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        path.write_text(secrets.token_urlsafe(24))
        path.chmod(0o600)
    return path.read_text().strip()


def _postgres(var: Path, listen: str, password: str) -> tuple[Child, str]:
    """The embedded PostgreSQL listening on ``listen`` too, password required from other hosts."""
    import psycopg

    child, socket_dir = postgres_child(var)
    pgdata = Path(child.cwd)
    hba = pgdata / "pg_hba.conf"
    rule = "host all all all scram-sha-256  # opdweb services host: other hosts, with the password\n"
    if rule not in hba.read_text():
        with hba.open("a") as fh:
            fh.write(rule)
    command = list(child.command)
    command[command.index("-h") + 1] = listen
    child.command = command + ["-p", str(PORTS["postgres"]), "-c", "password_encryption=scram-sha-256"]
    child.stop_signal = signal.SIGINT

    def answers() -> bool:
        try:
            with psycopg.connect(host=str(socket_dir), port=PORTS["postgres"], user="postgres", dbname="postgres",
                                 connect_timeout=2):
                return True
        except psycopg.OperationalError:
            return False

    _start_and_wait(child, answers)
    with psycopg.connect(host=str(socket_dir), port=PORTS["postgres"], user="postgres", dbname="postgres",
                         autocommit=True) as conn:
        conn.execute(f"ALTER USER postgres PASSWORD '{password}'")  # url-safe token: no quote to escape
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [EMBEDDED_DB_NAME]).fetchone() is None:
            conn.execute(f'CREATE DATABASE "{EMBEDDED_DB_NAME}"')
    return child, f"postgres://postgres:{quote(password, safe='')}@{listen}:{PORTS['postgres']}/{EMBEDDED_DB_NAME}"


def _redis(var: Path, listen: str, password: str) -> tuple[Child, str]:
    import redis

    child, _ = redis_child(var)
    command = list(child.command)
    command[command.index("--port") + 1] = str(PORTS["redis"])
    command[command.index("--bind") + 1] = listen
    child.command = command + ["--requirepass", password, "--protected-mode", "no"]
    (Path(child.cwd) / "port").write_text(str(PORTS["redis"]))

    def answers() -> bool:
        try:
            return bool(redis.Redis(host=listen, port=PORTS["redis"], password=password,
                                    socket_connect_timeout=1).ping())
        except redis.RedisError:
            return False

    _start_and_wait(child, answers)
    return child, f"redis://:{quote(password, safe='')}@{listen}:{PORTS['redis']}/0"


def start(var: Path, listen: str, secret_key: str) -> ClusterServices:
    """Start the services on ``listen`` and write ``var/cluster.env`` (with the cluster's
    ``SECRET_KEY``: every host of one installation signs with the same)."""
    var.mkdir(parents=True, exist_ok=True)
    services = ClusterServices({"SECRET_KEY": secret_key})
    try:
        child, services.env["DATABASE_URL"] = _postgres(var, listen, secret(var, "postgres-password"))
        services.servers.children.append(child)
        child, services.env["REDIS_URL"] = _redis(var, listen, secret(var, "redis-password"))
        services.servers.children.append(child)
        store_env, child = start_embedded_object_store(var, listen, PORTS["s3"])
        services.servers.children.append(child)
        services.env.update(store_env)
        # Hosts share no disk: the runs' files go to the store, and configs may name
        # checkpoints in its checkpoints bucket and among the runs' artifacts.
        services.env["OPDWEB_ARTIFACT_ROOT"] = "s3://artifacts/runs"
        services.env["OPDWEB_CHECKPOINT_URIS"] = "s3://checkpoints/,s3://artifacts/runs/"
    except BaseException:
        services.stop()
        raise
    env_file = var / "cluster.env"
    env_file.write_text("".join(f"{k}={v}\n" for k, v in services.env.items()))
    env_file.chmod(0o600)
    return services


def read_env(path: Path) -> dict[str, str]:
    """The ``KEY=value`` lines of a ``cluster.env``."""
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line and line[0] != "#")

