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
