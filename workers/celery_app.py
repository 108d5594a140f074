"""The Celery app.  Start a worker with ``celery -A workers.celery_app worker -Q gpu ...``.

Configuration comes from Django settings (``CELERY_*``); results are stored on the Job
row, not in a result backend.
"""
import os

from celery import Celery, signals

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "opdweb.settings")

app = Celery("opdweb", include=["workers.tasks"])
app.config_from_object("django.conf:settings", namespace="CELERY")


@signals.worker_ready.connect
def _start_presence(sender, **kwargs):
    from opdweb.health.presence import start_presence

    start_presence(sender)


@signals.worker_shutting_down.connect
def _stop_presence(**kwargs):
    from opdweb.health.presence import stop_presence

    stop_presence()
