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


class WatchRule(models.Model):
    """How a linked run is watched (:mod:`.watch`): the team's default (``job`` null) or one
    run's own (``job`` set, taking precedence).  A threshold left empty is not watched."""

    team = models.ForeignKey("teams.Team", on_delete=models.CASCADE, related_name="watch_rules")
    job = models.OneToOneField("jobs.Job", on_delete=models.CASCADE, null=True, blank=True, related_name="watch_rule")
    consecutive_steps = models.PositiveIntegerField(
        default=3, help_text="logged steps in a row with the multiple above the budget before it alerts")
    growth_per_1k_steps = models.FloatField(
        null=True, blank=True, help_text="alert when the multiple grows faster than this many x BF16 per 1,000 steps")
    ess_floor = models.FloatField(null=True, blank=True, help_text="alert when the ESS falls below this")
    silence_seconds = models.PositiveIntegerField(
        null=True, blank=True, default=900, help_text="alert when a running run logs nothing for this long")
    updates_per_step = models.PositiveIntegerField(
        default=1, help_text="optimizer updates per logged step (train batch / mini-batch x epochs): budgets over "
                             "training are calibrated at optimizer steps, so the watch reads the budget at "
                             "logged step x this")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["team"], condition=models.Q(job__isnull=True),
                                               name="one_default_watch_rule_per_team")]

    def __str__(self) -> str:
        return f"watch rule of job #{self.job_id}" if self.job_id else f"default watch rule of team {self.team_id}"


class AlertKind(models.TextChoices):
    BUDGET = "budget", "above the budget"
    GROWTH = "growth", "growing too fast"
    ESS = "ess", "ESS below the floor"
    SILENCE = "silence", "gone silent"


class Alert(models.Model):
    """One crossing of one rule by one run: raised once, when the rule starts to hold, and
    not again until it has recovered (``recovered_at``)."""

    job = models.ForeignKey("jobs.Job", on_delete=models.CASCADE, related_name="run_alerts")
    kind = models.CharField(max_length=10, choices=AlertKind.choices)
    step = models.BigIntegerField(null=True, help_text="the step it crossed at (none for silence)")
    value = models.FloatField(null=True)
    threshold = models.FloatField(null=True)
    message = models.CharField(max_length=500)
    created_at = models.DateTimeField(auto_now_add=True)
    recovered_at = models.DateTimeField(null=True, blank=True)
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    acknowledged_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
                                        related_name="+")

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["job", "kind"])]

    def __str__(self) -> str:
        return f"alert {self.kind} of job #{self.job_id} at step {self.step}"


class RunWatchState(models.Model):
    """The watch's incremental state of one run, updated as its points arrive (under the
    job's row lock, as the batch is): the last step seen per series, the run of steps above
    the budget, the recent multiples for the growth rate, the rules now holding."""

    job = models.OneToOneField("jobs.Job", on_delete=models.CASCADE, related_name="watch_state")
    last_multiple_step = models.BigIntegerField(null=True)
    last_ess_step = models.BigIntegerField(null=True)
    above_since_step = models.BigIntegerField(null=True)
    above_count = models.PositiveIntegerField(default=0)
    recent = models.JSONField(default=list, help_text="[step, multiple] of the last points, for the growth rate")
    last_multiple = models.FloatField(null=True)
    last_point_at = models.DateTimeField(null=True)
    #: rule kind -> the Alert id now open (holding, not yet recovered)
    holding = models.JSONField(default=dict)


class WandbRun(models.Model):
    """The W&B face of an MLflow-shaped run (a trainer logging with the ``wandb`` client,
    :mod:`.wandb_graphql`): its W&B id in its project (the run's experiment), its display
    name, group, tags and notes, its config and summary as W&B keeps them, and how many
    lines of each file-stream file it has sent (a resumed run carries on from there)."""

    run = models.OneToOneField(MlflowRun, on_delete=models.CASCADE, related_name="wandb")
    experiment = models.ForeignKey(MlflowExperiment, on_delete=models.PROTECT, related_name="wandb_runs")
    name = models.CharField(max_length=128, help_text="the run's W&B id, unique in its project")
    group = models.CharField(max_length=128, blank=True)
    job_type = models.CharField(max_length=64, blank=True)
    tags = models.JSONField(default=list, blank=True)
    notes = models.TextField(blank=True)
    #: W&B's config: {key: {"value": ..., "desc": ...}}, "_wandb" included.
    config = models.JSONField(default=dict, blank=True)
    summary = models.JSONField(default=dict, blank=True)
    history_lines = models.PositiveIntegerField(default=0)
    events_lines = models.PositiveIntegerField(default=0)
    output_lines = models.PositiveIntegerField(default=0)
    #: The last history / system-metrics line received, as sent (a resume reads ``_step`` and ``_runtime`` there).
    history_tail = models.TextField(blank=True)
    events_tail = models.TextField(blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["experiment", "name"], name="one_wandb_run_per_project_id")]

    def __str__(self) -> str:
        return self.name


class TrainerAlert(models.Model):
    """An alert the run raised itself (``wandb.alert``), kept beside the product's own."""

    job = models.ForeignKey("jobs.Job", on_delete=models.CASCADE, related_name="trainer_alerts")
    title = models.CharField(max_length=500)
    text = models.TextField()
    severity = models.CharField(max_length=10)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.severity} {self.title}"
