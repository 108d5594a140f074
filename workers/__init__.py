"""The science of opdweb (``workers.science``), with no Django anywhere below it.

Rollout engines, precision emulation, mismatch metrics, sensitivity, drift, and the one
registry of job kinds.  It runs from ``python -m workers ...``, from tests, and inside
the Celery workers, which ``opdweb`` starts and feeds; nothing here imports ``opdweb``.
"""
