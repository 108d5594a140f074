"""Celery tasks of the runs app: the periodic check for linked runs gone silent."""
from celery import shared_task


@shared_task(name="opdweb.check_silent_runs")
def check_silent_runs():
    from opdweb.runs.silence import do_check_silent_runs

    return do_check_silent_runs()
