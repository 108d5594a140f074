"""The science of opdweb: rollout engines, precision emulation, mismatch metrics.

Nothing under this package imports Django. Every entry point takes a plain config and
reports through :class:`workers.science.reporting.Reporter`.
"""
