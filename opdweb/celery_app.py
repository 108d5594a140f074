"""The Celery app.  Start a worker with ``celery -A opdweb.celery_app worker -Q gpu ...``.

Configuration comes from Django settings (``CELERY_*``); each app's ``tasks.py`` is found
by autodiscovery.  Results are stored on the Job row, not in a result backend.
"""
import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "opdweb.settings")

app = Celery("opdweb")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

