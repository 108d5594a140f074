from django.apps import AppConfig


class ConfigsConfig(AppConfig):
    name = "opdweb.configs"
    verbose_name = "rollout configs, approvals and exports"
