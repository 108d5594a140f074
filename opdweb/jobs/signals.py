"""Signals other apps listen to.  ``job_succeeded(job=...)`` is sent inside the transaction
that records the success, so what a receiver stores (a calibration's budget) lands with it
or not at all."""
from django.dispatch import Signal

job_succeeded = Signal()
