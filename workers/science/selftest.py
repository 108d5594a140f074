"""The built-in ``selftest`` job: emits a known series, proving the job path end to end.

For step ``s`` it logs ``selftest/linear = s`` and ``selftest/square = s*s`` (exactly
representable, so tests can check every stored value), and optionally sleeps between
steps so that live streaming, cancellation and worker loss can be exercised.
"""
from __future__ import annotations

import logging
import time

from pydantic import BaseModel, ConfigDict, Field

from .reporting import Cancelled, Reporter
from .results import SelftestResult

log = logging.getLogger(__name__)


class SelftestConfig(BaseModel):
    """Emits a known series; proves the job path end to end."""

    model_config = ConfigDict(extra="forbid")

    steps: int = Field(100, ge=1, le=1_000_000)
    sleep_s: float = Field(0.0, ge=0.0, le=10.0, description="pause after each step")
    fail_at_step: int | None = Field(None, ge=0, description="raise an error at this step (tests the failure path)")
    log_every: int | None = Field(None, ge=1, description="write the log line 'step N' every this many steps")


def selftest_value(key: str, step: int) -> float:
    """The value the selftest logs for ``key`` at ``step``: the one formula tests compare to."""
    return float(step) if key == "selftest/linear" else float(step * step)


SELFTEST_KEYS = ("selftest/linear", "selftest/square")


def run_selftest(config: SelftestConfig, reporter: Reporter) -> SelftestResult:
    for step in range(config.steps):
        if reporter.should_stop():
            raise Cancelled(f"stopped at step {step}")
        if config.fail_at_step is not None and step == config.fail_at_step:
            raise RuntimeError(f"selftest failure requested at step {step}")
        reporter.log(step, {key: selftest_value(key, step) for key in SELFTEST_KEYS})
        if config.log_every and step % config.log_every == 0:
            log.info("step %d", step)
        reporter.progress((step + 1) / config.steps, f"step {step + 1}/{config.steps}")
        if config.sleep_s:
            time.sleep(config.sleep_s)
    last = {key: selftest_value(key, config.steps - 1) for key in SELFTEST_KEYS}
    return SelftestResult(steps=config.steps, last=last)
