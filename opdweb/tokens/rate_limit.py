"""Writes per token per minute, counted in Redis (one counter per token and minute, gone
with the minute): past ``API_TOKEN_WRITES_PER_MINUTE`` a write is refused with 429 and
``Retry-After`` (the seconds left in the minute).  Reads are not limited: they write nothing."""
from __future__ import annotations

import logging
import time

import redis
from django.conf import settings

from opdweb.refusals import Refused

log = logging.getLogger(__name__)

WINDOW_SECONDS = 60
_client: redis.Redis | None = None


def _redis() -> redis.Redis:
    global _client
    if _client is None:
        _client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)
    return _client


def take_write(token_id: int, now: float | None = None) -> None:
    """Count one write of the token; raise :class:`Refused` (429) past the limit.  With Redis
    unreachable the write goes through (the limit protects the service; it is no reason to
    drop a trainer's points) and the failure is logged."""
    limit = settings.API_TOKEN_WRITES_PER_MINUTE
    now = time.time() if now is None else now
    window = int(now // WINDOW_SECONDS)
    key = f"opdweb:token-writes:{token_id}:{window}"
    try:
        pipe = _redis().pipeline()
        pipe.incr(key)
        pipe.expire(key, WINDOW_SECONDS + 5)
        count = pipe.execute()[0]
    except redis.RedisError:
        log.warning("token write limit not counted: Redis unreachable", exc_info=True)
        return
    if count > limit:
        retry_after = max(1, int((window + 1) * WINDOW_SECONDS - now + 0.999))
        raise Refused(f"this token made more than {limit} writes this minute; retry in {retry_after} s",
                      status=429, headers={"Retry-After": str(retry_after)})
