"""Deployments sharing one Redis server stay apart on the live channel: Redis pub/sub
ignores the database number, so every channel name carries the deployment's prefix,
made by default from its database."""
import asyncio

import pytest
from channels_redis.pubsub import RedisPubSubChannelLayer
from django.conf import settings

from opdweb.deployment import channel_prefix
from opdweb.jobs.live import job_group

ONE_SERVER = settings.REDIS_URL.rsplit("/", 1)[0]


def deployment(database: dict, redis_db: int) -> RedisPubSubChannelLayer:
    """A channel layer configured as the settings configure a deployment on ``database``."""
    return RedisPubSubChannelLayer(hosts=[f"{ONE_SERVER}/{redis_db}"], prefix=channel_prefix(database))


def test_the_default_prefix_differs_per_database_and_is_the_layers():
    a = channel_prefix({"HOST": "db.example", "PORT": 5432, "NAME": "opdweb"})
    assert a == channel_prefix({"HOST": "db.example", "PORT": 5432, "NAME": "opdweb"})
    assert a != channel_prefix({"HOST": "db.example", "PORT": 5432, "NAME": "opdweb_staging"})
    assert a != channel_prefix({"HOST": "db2.example", "PORT": 5432, "NAME": "opdweb"})
    assert a != channel_prefix({"HOST": "db.example", "PORT": 5433, "NAME": "opdweb"})
    assert a.startswith("opdweb.opdweb.")
    assert settings.CHANNEL_LAYERS["default"]["CONFIG"]["prefix"] == settings.CHANNEL_PREFIX


async def test_two_deployments_on_one_redis_do_not_hear_each_others_jobs():
    ours = deployment({"HOST": "db.example", "PORT": 5432, "NAME": "team_a"}, redis_db=1)
    theirs = deployment({"HOST": "db.example", "PORT": 5432, "NAME": "team_b"}, redis_db=2)
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


@pytest.mark.parametrize("name", ["h35", "a name/with spaces"])
def test_a_prefix_is_a_valid_channel_name_start(name):
    prefix = channel_prefix({"HOST": "/run/postgresql", "PORT": "", "NAME": name})
    assert all(c.isalnum() or c in "._-" for c in prefix) and len(prefix) < 80
