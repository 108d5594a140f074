"""How long a database connection outlives a peer that went silent without closing it.

A process killed with its host up has its sockets closed by the kernel: PostgreSQL sees
the end at once and rolls back what the process held.  A host cut off from the network
closes nothing.  Its backend then waits on the socket with its transaction open, holding
its row locks until TCP keepalive gives up, two hours by default.  A job taken over by
another worker host would block on those locks (a trace series row its sink had claimed)
for as long.

The answer is both ends' TCP settings, made from one number of seconds:

* the server's, sent as ``-c`` settings in libpq's ``options`` (any role may set them for
  its own session): keepalive probes start after a third of the time, four unanswered
  ones drop the client, and data it does not acknowledge drops it by the end of the time;
* the client's own (libpq's ``keepalives*`` and ``tcp_user_timeout``): a process waiting
  on a server it cannot reach gets an error instead of waiting forever.

A healthy peer's kernel answers the probes, so an idle or slow connection is never
dropped.  On a Unix socket both are ignored.  ``tcp_user_timeout`` needs PostgreSQL 12 or
newer.  A pooler that refuses the ``options`` startup parameter (PgBouncer, unless told to
ignore it) needs 0 here, which adds nothing: the pooler's own keepalive and idle-transaction
timeout then do this job.

No Django here: the settings call it.
"""
from __future__ import annotations

PROBES = 4


def dead_peer_options(seconds: int, options: str = "") -> dict:
    """libpq connection parameters that drop a peer silent for ``seconds``; ``options`` is
    what the URL already passes the server, kept ahead of the settings added.  0: none."""
    if seconds == 0:
        return {}
    if seconds < 5:
        raise ValueError(f"DB_DEAD_PEER_SECONDS must be 0 (off) or at least 5 (a probe a second), not {seconds}")
    idle = seconds // 3
    interval = max(1, (seconds - idle) // PROBES)
    server = (f"-c tcp_keepalives_idle={idle} -c tcp_keepalives_interval={interval} "
              f"-c tcp_keepalives_count={PROBES} -c tcp_user_timeout={seconds * 1000}")
    return {
        "options": f"{options} {server}".strip(),
        "keepalives": 1,
        "keepalives_idle": idle,
        "keepalives_interval": interval,
        "keepalives_count": PROBES,
        "tcp_user_timeout": seconds * 1000,
    }
