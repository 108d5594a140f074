"""opdweb workers: the Celery app (``workers.celery_app``) and the science (``workers.science``).

Importing this package imports nothing heavy: the science never imports Django, and the
Celery app is only loaded by ``celery -A workers.celery_app``.
"""
