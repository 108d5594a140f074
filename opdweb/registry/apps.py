from django.apps import AppConfig


class RegistryConfig(AppConfig):
    name = "opdweb.registry"
    verbose_name = "Model registry"
