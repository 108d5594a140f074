from django.apps import AppConfig


class HealthConfig(AppConfig):
    name = "opdweb.health"

    def ready(self) -> None:
        # Workers announce themselves through Celery's worker signals (they fire only in workers).
        from opdweb.health import presence  # noqa: F401
