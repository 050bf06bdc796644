"""Users' own Ray Train loops for the tests (workload: {train_loop: "tests.support.user_loops:..."}).

``by_seed`` keeps the contract or breaks it one way per seed, so one sweep shows that a loop
which misbehaves fails its own trial by name and leaves the others to finish;
``lr_until_fixed`` breaks it as every trial of the sweep would, which stops the sweep at the
first, until it is fixed for the resume.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import ray.train

from scalesweep import loop_helpers

#: not a function: a train_loop naming it is refused before anything starts
NOT_CALLABLE = 3


def _curve(update: int) -> float:
    return 1.0 / (1.0 + 0.1 * update)


def by_seed(config: dict[str, Any]) -> None:
    """seed 0: keeps the contract; 1: never reports; 2: a report without update; 3: without
    dev_loss; 4: update going backwards; 5: a non-finite dev_loss; 6: reports the config's lr
    at every update, not the planned schedule's (an optimizer without loop_helpers.lr_scheduler)."""
    seed = config["seed"]
    if seed == 1:
        return
    planned = loop_helpers.planned_schedule(config)
    for update in range(config["eval_every"], config["total_updates"] + 1, config["eval_every"]):
        lr = config["lr"] if seed == 6 else planned.lr(update)
        metrics: dict[str, Any] = {"update": update, "dev_loss": _curve(update), "train_loss": 1.0,
                                   "lr": lr}
        if seed == 2 and update > config["eval_every"]:
            del metrics["update"]
        if seed == 3 and update > config["eval_every"]:
            del metrics["dev_loss"]
        if seed == 4 and update > 2 * config["eval_every"]:
            metrics["update"] = config["eval_every"]
        if seed == 5 and update > config["eval_every"]:
            metrics["dev_loss"] = math.nan
        ray.train.report(metrics)


def lr_until_fixed(config: dict[str, Any]) -> None:
    """Keeps the contract but for one thing every trial shares: its reports carry no ``lr``,
    until the file ``config["options"]["fixed"]`` names exists (the same loop, fixed, for the
    resume that finishes the sweep)."""
    fixed = Path(config["options"]["fixed"]).exists()
    planned = loop_helpers.planned_schedule(config)
    for update in range(config["eval_every"], config["total_updates"] + 1, config["eval_every"]):
        metrics: dict[str, Any] = {"update": update, "dev_loss": _curve(update), "train_loss": 1.0}
        if fixed:
            metrics["lr"] = planned.lr(update)
        ray.train.report(metrics)
