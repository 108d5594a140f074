"""Workers announce themselves: a thread in each worker upserts its WorkerPresence row,
started and stopped by Celery's worker signals (connected when the app is ready)."""
from __future__ import annotations

import logging
import os
import socket
import threading

from celery import signals
from django.db import connection
from django.utils import timezone

log = logging.getLogger(__name__)
BEAT_SECONDS = 5.0
_stop = threading.Event()
_name: str | None = None


def describe_device() -> str:
    """What this worker computes on.  The launcher pins one device per GPU worker."""
    device = os.environ.get("OPDWEB_WORKER_DEVICE", "cpu")
    if device.startswith("cuda"):
        try:
            import torch

            return f"{device} ({torch.cuda.get_device_name(0)})"
        except Exception:  # noqa: BLE001 - a name is a nicety
            return device
    return device


def _beat(name: str, queues: list[str], device: str, started) -> None:
    from opdweb.health.models import WorkerPresence

    WorkerPresence.objects.update_or_create(
        name=name,
        defaults={
            "hostname": socket.gethostname(),
            "pid": os.getpid(),
            "queues": queues,
            "device": device,
            "started_at": started,
            "last_seen": timezone.now(),
            "stopped": False,
        },
    )


@signals.worker_ready.connect
def start_presence(sender, **kwargs) -> None:
    consumer = sender
    global _name
    name = _name = consumer.hostname
    queues = sorted(q.name for q in consumer.task_consumer.queues) if consumer.task_consumer else []
    device = describe_device()
    started = timezone.now()

    def loop():
        try:
            while True:
                try:
                    _beat(name, queues, device, started)
                except Exception:  # noqa: BLE001
                    log.warning("worker presence beat failed", exc_info=True)
                if _stop.wait(BEAT_SECONDS):
                    break
        finally:
            connection.close()

    threading.Thread(target=loop, daemon=True, name="presence").start()


@signals.worker_shutting_down.connect
def stop_presence(**kwargs) -> None:
    """On a clean shutdown the status page shows the worker as stopped, not silent."""
    from opdweb.health.models import WorkerPresence

    _stop.set()
    if _name is not None:
        try:
            WorkerPresence.objects.filter(name=_name).update(stopped=True, last_seen=timezone.now())
        except Exception:  # noqa: BLE001 - shutting down regardless
            log.warning("could not mark worker %s stopped", _name, exc_info=True)
        finally:
            connection.close()
