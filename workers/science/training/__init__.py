"""Training jobs: on-policy distillation (sync and async) and the GRPO baselines, sampling
through the same rollout engines and precision options as the mismatch measurement.

``config`` is torch-free (the web process validates ``train`` and ``time-to-quality``
configs with it); everything else imports torch and is loaded only when a job runs.
"""
