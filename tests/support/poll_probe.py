"""An own loop that keeps the report contract and writes, from rank 0, the Ray Train controller's
poll interval as the worker sees it (tests/integration/test_report_poll_e2e.py).

Ray Train V2's controller reads ``RAY_TRAIN_HEALTH_CHECK_INTERVAL_S`` from its own environment
when it starts, and hands its workers the value of that environment
(``get_env_vars_to_propagate`` in the worker group it starts): what a worker finds is what its
controller polls at. ``config["options"]["out"]``: the file it writes (the variable's value, or
``unset``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import ray.train

from scalesweep import loop_helpers


def train_loop_per_worker(config: dict[str, Any]) -> None:
    if ray.train.get_context().get_world_rank() == 0:
        Path(config["options"]["out"]).write_text(
            os.environ.get("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "unset"))
    planned = loop_helpers.planned_schedule(config)
    for update in range(config["eval_every"], config["total_updates"] + 1, config["eval_every"]):
        loop_helpers.report(config, update=update, dev_loss=1.0 / (1.0 + update), train_loss=1.0,
                            lr=planned.lr(update))
