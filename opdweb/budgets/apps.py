from django.apps import AppConfig


class BudgetsConfig(AppConfig):
    name = "opdweb.budgets"

    def ready(self) -> None:
        # A calibration that succeeds becomes a stored budget; an admission config names one by id.
        from opdweb.budgets import receivers  # noqa: F401
