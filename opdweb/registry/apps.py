from django.apps import AppConfig


class RegistryConfig(AppConfig):
    name = "opdweb.registry"
    verbose_name = "Model registry"

    def ready(self) -> None:
        # The job form offers the team's registered models where a config names a checkpoint.
        from opdweb.registry import descriptions, pickers  # noqa: F401 - the describe job's receiver
