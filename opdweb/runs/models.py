"""An MLflow experiment (a team's name for a group of runs) and the MLflow face of an
external job: its run id, its experiment, the user and times the trainer reported.  The
run's params and tags live in the job's ``config`` (``{"params": {...}, "tags": {...}}``),
its metrics in the job's traces, its state in the job's state."""
from django.conf import settings
from django.db import models


class MlflowExperiment(models.Model):
    team = models.ForeignKey("teams.Team", on_delete=models.CASCADE, related_name="mlflow_experiments")
    name = models.CharField(max_length=500)
    tags = models.JSONField(default=dict, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["team", "name"], name="one_mlflow_experiment_per_team_name")]

    def __str__(self) -> str:
        return f"{self.team_id}:{self.name}"


class MlflowRun(models.Model):
    job = models.OneToOneField("jobs.Job", on_delete=models.CASCADE, related_name="mlflow_run")
    experiment = models.ForeignKey(MlflowExperiment, on_delete=models.PROTECT, related_name="runs")
    run_id = models.CharField(max_length=32, unique=True)  # MLflow's: 32 hex digits
    user_id = models.CharField(max_length=255, blank=True)  # who the trainer says it runs as
    start_time = models.BigIntegerField(help_text="unix ms, as the trainer reported it")
    end_time = models.BigIntegerField(null=True, blank=True)
    token = models.ForeignKey("tokens.ApiToken", on_delete=models.SET_NULL, null=True, related_name="+")

    def __str__(self) -> str:
        return self.run_id


class RunLink(models.Model):
    """What an external run trains under: the approval its tags name (``opdweb.approval`` or
    ``opdweb.config_hash``, with ``opdweb.checkpoint``), the budget that approval was
    granted against, and the unit its exact k3 is a multiple of (:mod:`.linking`)."""

    job = models.OneToOneField("jobs.Job", on_delete=models.CASCADE, related_name="run_link")
    approval = models.ForeignKey("approvals.ApprovalRequest", on_delete=models.PROTECT, related_name="run_links")
    budget = models.ForeignKey("budgets.MismatchBudget", on_delete=models.PROTECT, related_name="+")
    checkpoint = models.CharField(max_length=1000)
    #: The BF16 unit's k3 on the checkpoint; null: none recorded, so no multiple is drawn.
    unit_k3 = models.FloatField(null=True)
    unit_source = models.CharField(max_length=500, help_text="where unit_k3 was read, in words")
    #: The logged key (an exact k3 of :mod:`.metric_map`) the multiple is derived from; blank until one arrives.
    k3_key = models.CharField(max_length=200, blank=True)
    linked_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"job #{self.job_id} under approval #{self.approval_id}"
