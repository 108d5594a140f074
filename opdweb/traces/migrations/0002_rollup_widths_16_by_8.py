"""Rollup levels 16, 128, 1,024, ... 4,194,304 steps wide, instead of 32, 256, ... 1,048,576.

A 1 % zoom of a 1M-step series wants buckets of about 10 steps: with a first level of 32
steps it read 10,000 raw points, with one of 16 it reads 625 level-1 rows.  The stored
rollups of every series are rebuilt: level 1 from the points, each level above from the
one below it (min of the minima, max of the maxima, the last of the lasts).  PostgreSQL
orders NaN above every number in min() and max(), as the sink's rollups do, so the rows
rebuilt here are the rows the sink would have written.

The widths are written out here, not imported: a later change of ``ROLLUP_WIDTHS`` must
not change what this migration did.  Going back rebuilds the old widths the same way.
"""
from django.db import migrations

OLD_WIDTHS = (1, 32, 256, 2048, 16384, 131072, 1048576)
NEW_WIDTHS = (1, 16, 128, 1024, 8192, 65536, 524288, 4194304)


def rebuild_statements(widths: tuple[int, ...]) -> list[str]:
    statements = [
        "DELETE FROM traces_tracerollup",
        f"""INSERT INTO traces_tracerollup (series_id, level, bucket, min, max, last_step, last_value)
            SELECT series_id, 1, step / {widths[1]}, min(value), max(value), max(step),
                   (max(ARRAY[step::float8, value]))[2]
            FROM traces_tracepoint GROUP BY series_id, step / {widths[1]}""",
    ]
    for level in range(2, len(widths)):
        ratio = widths[level] // widths[level - 1]
        statements.append(
            f"""INSERT INTO traces_tracerollup (series_id, level, bucket, min, max, last_step, last_value)
                SELECT series_id, {level}, bucket / {ratio}, min(min), max(max), max(last_step),
                       (max(ARRAY[last_step::float8, last_value]))[2]
                FROM traces_tracerollup WHERE level = {level - 1} GROUP BY series_id, bucket / {ratio}""")
    return statements


class Migration(migrations.Migration):

    dependencies = [("traces", "0001_initial")]

    operations = [
        migrations.RunSQL(rebuild_statements(NEW_WIDTHS), reverse_sql=rebuild_statements(OLD_WIDTHS)),
    ]
