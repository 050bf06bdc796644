"""The example's own loop (examples.ddp_demo_loop) held once at a gate: the deterministic
stop point of the test that resumes a train_loop sweep.

``config["options"]``: ``gate_dir``, ``gated_world_size`` (the trial to hold) and
``gate_update`` (the report after which rank 0 holds it, on the trial's first start only). While
held, rank 0 has written ``gate_dir/waiting`` and waits for ``gate_dir/release``; the other ranks
wait in their next all-reduce. When the trial starts again with a checkpoint, rank 0 writes the
update it restored to ``gate_dir/restored-<world size>``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import ray.train

from examples import ddp_demo_loop
from scalesweep import loop_helpers

#: a held trial gives up waiting after this long, so a test that died cannot leave it forever
MAX_HOLD_S = 900.0


def train_loop_per_worker(config: dict[str, Any]) -> None:
    options = config["options"]
    gate = Path(options["gate_dir"])
    rank0 = ray.train.get_context().get_world_rank() == 0
    gated = config["world_size"] == options["gated_world_size"]
    state = loop_helpers.restore()
    if state is not None and gated and rank0:
        (gate / f"restored-{config['world_size']}").write_text(str(state["update"]))
    if state is not None or not gated or not rank0:
        ddp_demo_loop.train_loop_per_worker(config)
        return

    report = loop_helpers.report

    def held(*args: Any, **kwargs: Any) -> dict[str, float]:
        metrics = report(*args, **kwargs)
        if metrics["update"] == options["gate_update"]:
            (gate / "waiting").touch()
            deadline = time.monotonic() + MAX_HOLD_S
            while not (gate / "release").exists() and time.monotonic() < deadline:
                time.sleep(0.2)
        return metrics

    loop_helpers.report = held  # the example calls loop_helpers.report at each eval
    try:
        ddp_demo_loop.train_loop_per_worker(config)
    finally:
        loop_helpers.report = report
