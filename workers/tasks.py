"""Celery tasks: thin calls into the job runner, which lives with the Job model."""
import os

from workers.celery_app import app


@app.task(name="opdweb.run_job", bind=True, acks_late=True, reject_on_worker_lost=True)
def run_job(self, job_id: int, attempt: int):
    from opdweb.jobs.runner import run_job as run

    return run(job_id, attempt, worker=f"{self.request.hostname}:{os.getpid()}")


@app.task(name="opdweb.reap_stale_jobs")
def reap_stale_jobs():
    from opdweb.jobs.actions import do_reap_stale_jobs

    return do_reap_stale_jobs()
