from django.apps import AppConfig


class ApprovalsConfig(AppConfig):
    name = "opdweb.approvals"
    verbose_name = "approvals and webhooks"
