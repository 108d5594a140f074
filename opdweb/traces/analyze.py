"""Trace table statistics kept current whether or not autovacuum runs.

With autovacuum off or slow, the planner would see trace tables as they
were when last analysed; after a sink has written ``ANALYZE_CHECK_ROWS`` rows, and when it
closes, it compares the rows changed since the last ANALYZE (PostgreSQL's count, or what
it wrote itself, whichever is larger) with autovacuum's own threshold (50 rows + 10 % of
the table) and analyses the tables that crossed it, from the publishing thread.
"""
from __future__ import annotations

from typing import Mapping

from django.db import connection

from opdweb.traces.models import POINTS_TABLE, ROLLUP_TABLE, SERIES_TABLE

# After this many rows written, the sink checks whether its tables need ANALYZE.
ANALYZE_CHECK_ROWS = 200_000
ANALYZE_TABLES = (POINTS_TABLE, ROLLUP_TABLE, SERIES_TABLE)


def analyze_if_needed(written: Mapping[str, int] | None = None) -> list[str]:
    """ANALYZE the trace tables that changed by more than autovacuum's own threshold
    (50 rows + 10 % of the table as last analysed) since their last analysis, whether or
    not autovacuum runs; returns the tables analysed.  The change is PostgreSQL's count
    or ``written`` (rows a caller knows it wrote since), whichever is larger: the
    statistics collector reports with a delay.  A table another session is analysing
    already is skipped, not waited for."""
    written = written or {}
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, greatest(c.reltuples, 0), coalesce(s.n_mod_since_analyze, 0) FROM pg_class c "
            "LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid "
            "WHERE c.oid = ANY(ARRAY[%s::regclass, %s::regclass, %s::regclass])",
            list(ANALYZE_TABLES),
        )
        tables = [name for name, tuples, changed in cursor.fetchall()
                  if max(changed, written.get(name, 0)) > 50 + 0.1 * tuples]
        for table in tables:
            cursor.execute(f"ANALYZE (SKIP_LOCKED) {table}")
    return tables
