"""Celery tasks of the jobs app: one-line calls into the runner and the reaper."""
import os

from celery import shared_task


@shared_task(name="opdweb.run_job", bind=True, acks_late=True, reject_on_worker_lost=True)
def run_job(self, job_id: int, attempt: int):
    from opdweb.jobs.runner import run_job as run

    return run(job_id, attempt, worker=f"{self.request.hostname}:{os.getpid()}")


@shared_task(name="opdweb.reap_stale_jobs")
def reap_stale_jobs():
    from opdweb.jobs.actions import do_reap_stale_jobs, do_resend_lost_messages

    do_resend_lost_messages()
    return do_reap_stale_jobs()
