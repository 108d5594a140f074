"""What sets one deployment apart from another sharing its servers.

Redis pub/sub channels ignore the database number of ``REDIS_URL``: two deployments on
one Redis server would hear each other's live messages for the same job id.  So every
channel-layer name carries a prefix naming the deployment.  By default it is made from
the deployment's database (host, port and name): one database, one deployment.

No Django here: the settings call it.
"""
from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping


def channel_prefix(database: Mapping) -> str:
    """``opdweb.<database name>.<digest of host:port/name>``: readable in ``PUBSUB
    CHANNELS``, and distinct for two databases of one name on two hosts."""
    where = f"{database.get('HOST') or ''}:{database.get('PORT') or ''}/{database.get('NAME') or ''}"
    name = re.sub(r"[^A-Za-z0-9_-]", "_", str(database.get("NAME") or ""))[:40]
    return f"opdweb.{name}.{hashlib.sha256(where.encode()).hexdigest()[:12]}"
