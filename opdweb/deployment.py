"""What sets one deployment apart from another sharing its servers.

Redis pub/sub channels ignore the database number of ``REDIS_URL``: two deployments on
one Redis server would hear each other's live messages for the same job id.  So every
channel-layer name carries a prefix naming the deployment.  By default it is made from
what every process of one deployment shares and two deployments on one Redis server
cannot: the Redis database number (two deployments on one number would share their job
queues too) and the PostgreSQL database's name.  Not the database's host: a worker on a
GPU host may reach the same server by another name than the web host does, and would
then publish where no page listens.

No Django here: the settings call it.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from urllib.parse import urlsplit


def channel_prefix(database: Mapping, redis_url: str) -> str:
    """``opdweb.<database name>.redis<number>``, e.g. ``opdweb.opdweb.redis0``."""
    name = re.sub(r"[^A-Za-z0-9_-]", "_", str(database.get("NAME") or ""))[:60]
    number = (urlsplit(redis_url).path.strip("/") or "0").split("/")[0]
    return f"opdweb.{name}.redis{number if number.isdigit() else '0'}"
