"""Trace storage: one series per (job, key), its points, and a min/max/last pyramid.

Points are keyed by ``(series, step)`` so a replay after a crash cannot duplicate.
``TraceRollup`` holds, for each level ``L >= 1``, buckets of ``ROLLUP_WIDTHS[L]`` steps
with their min, max and last value; a downsampled read picks the coarsest level that still
gives at least half the buckets asked (:func:`opdweb.traces.queries.choose_level`), so it
reads fewer than 4 rollup rows or 8 raw points per bucket, whatever the length of the
series.  Level 1 is 16 steps wide, every level above 8 times the one below: every point
writes 1/16 + 1/128 + ... < 1/14 of a rollup row at ingest (no slower than a first level
of 32 steps, measured interleaved), and a 1 % zoom of a 1M-step series reads 625 level-1
rows instead of 10,000 raw points.  Every rollup field merges idempotently (least,
greatest, latest step), so replayed writes leave it unchanged.
"""
from django.db import models

#: The largest step a trace may have: every step is exact as a double (a browser's numbers;
#: the reads compare steps as float8 to find each bucket's last value).
MAX_STEP = 2**53 - 1

# Bucket width in steps per level; level 0 is the raw points.  Changing them needs a
# migration that rebuilds the stored rollups (as traces/0002 does).
ROLLUP_WIDTHS = (1, 16, 128, 1024, 8192, 65536, 524288, 4194304)


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
