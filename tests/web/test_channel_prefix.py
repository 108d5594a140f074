"""Deployments sharing one Redis server stay apart on the live channel: Redis pub/sub
ignores the database number, so every channel name carries the deployment's prefix,
made by default from its Redis database number and PostgreSQL database name."""
import asyncio

from channels_redis.pubsub import RedisPubSubChannelLayer
from django.conf import settings

from opdweb.deployment import channel_prefix
from opdweb.jobs.live import job_group

ONE_SERVER = settings.REDIS_URL.rsplit("/", 1)[0]


def deployment(database_name: str, redis_db: int) -> RedisPubSubChannelLayer:
    """A channel layer configured as the settings configure a deployment."""
    redis_url = f"{ONE_SERVER}/{redis_db}"
    return RedisPubSubChannelLayer(hosts=[redis_url], prefix=channel_prefix({"NAME": database_name}, redis_url))


def test_the_default_prefix_names_the_redis_database_and_the_postgresql_database():
    assert channel_prefix({"HOST": "db", "NAME": "opdweb"}, "redis://cache:6379/2") == "opdweb.opdweb.redis2"
    assert channel_prefix({"HOST": "db", "NAME": "opdweb"}, "redis://cache:6379") == "opdweb.opdweb.redis0"
    # One deployment's processes agree however they reach the database server.
    assert (channel_prefix({"HOST": "db.internal", "NAME": "opdweb"}, "redis://cache/1")
            == channel_prefix({"HOST": "10.0.0.5", "PORT": 5433, "NAME": "opdweb"}, "redis://10.0.0.6/1"))
    assert channel_prefix({"NAME": "a name/with spaces"}, "redis://x/3") == "opdweb.a_name_with_spaces.redis3"
    assert settings.CHANNEL_LAYERS["default"]["CONFIG"]["prefix"] == settings.CHANNEL_PREFIX


async def test_two_deployments_on_one_redis_do_not_hear_each_others_jobs():
    ours, theirs = deployment("opdweb", redis_db=1), deployment("opdweb", redis_db=2)
    group = job_group(7)  # the same job id in both
    try:
        our_page = await ours.new_channel()
        their_page = await theirs.new_channel()
        await ours.group_add(group, our_page)
        await theirs.group_add(group, their_page)
        await theirs.group_send(group, {"type": "job.points", "from": "theirs"})
        # Redis hands a message to every subscriber of its channel as it is published: once
        # their own page has it, ours would have it queued too if it listened there.
        assert (await asyncio.wait_for(theirs.receive(their_page), 30))["from"] == "theirs"
        await ours.group_send(group, {"type": "job.points", "from": "ours"})
        assert (await asyncio.wait_for(ours.receive(our_page), 30))["from"] == "ours"
    finally:
        await ours.flush()
        await theirs.flush()
