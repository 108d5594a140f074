"""The mismatch budget: calibrating it from training runs, and admission checks against it."""
