"""A peer that goes silent without closing its socket (a host cut off from the network) is
dropped by both ends within DB_DEAD_PEER_SECONDS (opdweb/dead_peers.py).  The end-to-end
case, a cut host's locks freed for another host, is in tests/cluster/."""
import pytest
from django.conf import settings
from django.db import connection

from opdweb.dead_peers import dead_peer_options


def test_thirty_seconds_is_ten_idle_then_four_probes_five_apart():
    """By hand: probes start at 10 s, the fourth unanswered one is at 30 s."""
    assert dead_peer_options(30) == {
        "options": "-c tcp_keepalives_idle=10 -c tcp_keepalives_interval=5 -c tcp_keepalives_count=4 "
                   "-c tcp_user_timeout=30000",
        "keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5, "keepalives_count": 4,
        "tcp_user_timeout": 30000,
    }


def test_the_urls_own_server_options_are_kept_first():
    assert dead_peer_options(6, "-c search_path=lab").get("options") == (
        "-c search_path=lab -c tcp_keepalives_idle=2 -c tcp_keepalives_interval=1 -c tcp_keepalives_count=4 "
        "-c tcp_user_timeout=6000")


def test_zero_adds_nothing_and_under_five_seconds_is_refused():
    assert dead_peer_options(0, "-c search_path=lab") == {}  # behind a pooler that refuses options
    with pytest.raises(ValueError, match="0 \\(off\\) or at least 5"):
        dead_peer_options(4)


@pytest.mark.django_db
def test_the_products_connection_asks_the_server_to_drop_it_when_silent():
    """The server's own view of the session the product opened: over TCP it holds the
    settings the product sent: the last probe by DB_DEAD_PEER_SECONDS, and the user timeout at it."""
    connection.ensure_connection()
    if connection.connection.info.host.startswith("/"):
        pytest.skip("a Unix socket has no TCP keepalive (the embedded server); CI's server is on TCP")
    with connection.cursor() as cursor:
        cursor.execute("SELECT name, setting::int FROM pg_settings WHERE name LIKE 'tcp_%'")
        server = dict(cursor.fetchall())
    seconds = settings.DB_DEAD_PEER_SECONDS
    assert server["tcp_keepalives_idle"] + server["tcp_keepalives_interval"] * server["tcp_keepalives_count"] \
        <= seconds
    assert 0 < server["tcp_keepalives_idle"] < seconds
    assert server["tcp_user_timeout"] == seconds * 1000
    client = connection.connection.info.get_parameters()
    assert (client["keepalives"], client["tcp_user_timeout"]) == ("1", str(seconds * 1000))
