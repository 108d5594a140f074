from django.apps import AppConfig


class ConfigsConfig(AppConfig):
    name = "opdweb.configs"
    verbose_name = "rollout configs, approvals and exports"

    def ready(self) -> None:
        # The new-job form can be filled for an admission check of a config against a budget.
        from opdweb.configs import prefill  # noqa: F401
