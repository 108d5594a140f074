"""The approvals app: approval requests, the team's webhook and its deliveries.  Its models
came from the configs app (now :mod:`opdweb.rollouts`) with their rows: see
``migrations/0001_initial.py``."""
from django.apps import AppConfig


class ApprovalsConfig(AppConfig):
    name = "opdweb.approvals"
    verbose_name = "approvals and webhooks"
