"""A trainer logging with the official ``wandb`` client, as slime, prime-rl, AReaL, OpenRLHF
or the Tinker cookbook do: nothing but ``WANDB_BASE_URL`` / ``WANDB_API_KEY`` (or
``WANDB_MODE=offline``) set.  Its plan comes as JSON on stdin:

``init`` (``wandb.init``'s keywords, ``settings`` as a dict of ``wandb.Settings``),
``define_metric`` (``[[name, {keywords}], ...]``), ``steps`` (``[[step, {key: value}],
...]``, logged with ``wandb.log(..., step=step)``; ``null`` for no step; a third item
``false`` logs with ``commit=False``), ``pause_after`` (step after which it waits for the file named by
``pause_file`` to appear), ``config_update``, ``summary``, ``alert`` (``wandb.alert``'s
keywords) and ``exit_code``.  It prints the run's id, then ``FINISHED``."""
from __future__ import annotations

import json
import os
import sys
import time

import wandb


def main() -> int:
    plan = json.loads(sys.stdin.read())
    init = dict(plan.get("init", {}))
    if "settings" in init:
        init["settings"] = wandb.Settings(**init["settings"])
    run = wandb.init(**init)
    print(run.id, flush=True)
    if plan.get("config_update"):
        run.config.update(plan["config_update"])
    for name, keywords in plan.get("define_metric", []):
        run.define_metric(name, **keywords)
    for step, metrics, *commit in plan.get("steps", []):
        metrics = {k: (float(v) if isinstance(v, str) and v in ("nan", "inf", "-inf") else v)
                   for k, v in metrics.items()}
        run.log(metrics, step=step, commit=commit[0] if commit else None)
        if step is not None and step == plan.get("pause_after"):
            while not os.path.exists(plan["pause_file"]):
                time.sleep(0.05)
    for key, value in plan.get("summary", {}).items():
        run.summary[key] = value
    if plan.get("alert"):
        run.alert(**plan["alert"])
    if plan.get("print"):
        print(plan["print"], flush=True)
    run.finish(exit_code=plan.get("exit_code", 0))
    print("FINISHED", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
