"""The rollouts app keeps the Django label ``configs`` it was created under: its table
(``configs_rolloutconfigrecord``), its migration history and the content types of an
existing install stay as they are, so ``migrate`` has nothing to rename.  Only the Python
package is named for the domain."""
from django.apps import AppConfig


class RolloutsConfig(AppConfig):
    name = "opdweb.rollouts"
    label = "configs"
    verbose_name = "rollout configs"

    def ready(self) -> None:
        # The new-job form can be filled for an admission check of a config against a budget.
        from opdweb.rollouts import prefill  # noqa: F401
