"""Trace storage: one series per (job, key), its points, and a min/max/last pyramid.

Points are keyed by ``(series, step)`` so a replay after a crash cannot duplicate.
``TraceRollup`` holds, for each level ``L >= 1``, buckets of ``ROLLUP_WIDTHS[L]`` steps
with their min, max and last value; a downsampled read picks the coarsest level that still
gives at least half the buckets asked (:func:`opdweb.traces.queries.choose_level`), so it
reads at most 4 rollup rows or 16 raw points per bucket, whatever the length of the
series.  Level 1 starts at 32 steps because it is the level every point writes:
it costs 1/32 of a row per point at ingest, while a raw read of under 32 rows per bucket
stays cheap.  Every rollup field merges idempotently (least, greatest, latest step), so
replayed writes leave it unchanged.
"""
from django.db import models

#: The largest step a trace may have: every step is exact as a double (a browser's numbers;
#: the reads compare steps as float8 to find each bucket's last value).
MAX_STEP = 2**53 - 1

# Bucket width in steps per level; level 0 is the raw points.
ROLLUP_WIDTHS = (1, 32, 256, 2048, 16384, 131072, 1048576)


class TraceSeries(models.Model):
    job = models.ForeignKey("jobs.Job", on_delete=models.CASCADE, related_name="series")
    key = models.CharField(max_length=200)
    first_step = models.BigIntegerField()
    last_step = models.BigIntegerField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["job", "key"], name="one_series_per_job_key")]
        verbose_name_plural = "trace series"

    def __str__(self) -> str:
        return f"{self.job_id}:{self.key}"


class TracePoint(models.Model):
    pk = models.CompositePrimaryKey("series", "step")
    series = models.ForeignKey(TraceSeries, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False,
                               related_name="+")
    step = models.BigIntegerField()
    wall_time = models.FloatField(help_text="unix seconds")
    value = models.FloatField()


class TraceRollup(models.Model):
    pk = models.CompositePrimaryKey("series", "level", "bucket")
    series = models.ForeignKey(TraceSeries, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False,
                               related_name="+")
    level = models.SmallIntegerField()
    bucket = models.BigIntegerField(help_text="step // ROLLUP_WIDTHS[level]")
    min = models.FloatField()
    max = models.FloatField()
    last_step = models.BigIntegerField()
    last_value = models.FloatField()


def delete_points_of_series(sender, instance, **kwargs):
    """Points and rollups carry no foreign-key constraint (it would slow every COPY), so
    a deleted series takes them along explicitly."""
    TracePoint.objects.filter(series_id=instance.pk).delete()
    TraceRollup.objects.filter(series_id=instance.pk).delete()


models.signals.pre_delete.connect(delete_points_of_series, sender=TraceSeries)


# The tables the sink writes by COPY and SQL of its own.
POINTS_TABLE = TracePoint._meta.db_table
ROLLUP_TABLE = TraceRollup._meta.db_table
SERIES_TABLE = TraceSeries._meta.db_table
