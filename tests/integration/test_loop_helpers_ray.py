"""A loop written with scalesweep.loop_helpers on real Ray Train workers (issue #22 item 2):
V = 4 virtual ranks played by P = 2 and 4 Ray Train V2 workers (gloo, float64) make the
built-in loop's updates: the same summed loss at every update on every rank, and final
parameters within 1e-9 of the built-in loop's at P = 1. The workers of P run the loop in the
Ray Train run of P workers that this session's DDP tests share (tests/support/ddp_groups.py).

Elsewhere: the helper loop in one process (P = 1) and in a gloo group without Ray,
tests/unit/test_loop_helpers.py, which also reads what ray.train.get_checkpoint() hands a loop
with restore() and the adapters' last_checkpoint(); every rank of a restarted Ray Train group
going on from rank 0's checkpoint, tests/integration/test_adapters_e2e.py (an in-run restart,
through the adapters' last_checkpoint()) and test_user_loop_e2e.py (restore() after a resume)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.support import ddp_groups
from tests.unit.test_loop_helpers import WARMUPLR, _builtin_float64, _helper_loop, _loop_config, _trial

pytestmark = pytest.mark.slow
SGD = {"type": "sgd", "lr": 0.05, "momentum": 0.9}


def _ray_worker(config: dict[str, Any]) -> None:
    import ray.train

    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float64)
    losses, model = _helper_loop(config["loop"])  # P and the rank from Ray Train's process group
    rank = ray.train.get_context().get_world_rank()
    Path(config["out"], f"rank{rank}.json").write_text(json.dumps(losses))
    if rank == 0:
        torch.save(model.state_dict(), Path(config["out"], "helper.pt"))


TRIAL = _trial(4, WARMUPLR, updates=8, accum=2, optimizer=SGD)
for _physical in (2, 4):
    ddp_groups.register(_physical, f"loop-helpers-p{_physical}", _ray_worker, {"loop": _loop_config(TRIAL)})


@pytest.mark.parametrize("physical", [2, 4])
def test_a_helper_loop_on_ray_train_workers_makes_the_builtin_loops_updates(
        ray_cluster: None, request: pytest.FixtureRequest, tmp_path: Path, physical: int) -> None:
    reports = _builtin_float64(TRIAL, final=tmp_path / "builtin.pt")
    out = ddp_groups.outputs(request, physical, f"loop-helpers-p{physical}")
    by_rank = [json.loads((out / f"rank{r}.json").read_text()) for r in range(physical)]
    assert all(losses == by_rank[0] for losses in by_rank)  # all-reduced: one sum per update
    assert [x / TRIAL.global_batch for x in by_rank[0]] == pytest.approx(
        [m["train_loss"] for m in reports], rel=1e-9)
    helper = torch.load(out / "helper.pt", weights_only=True)
    builtin = torch.load(tmp_path / "builtin.pt", weights_only=True)
    assert helper.keys() == builtin.keys()
    for name, value in helper.items():
        torch.testing.assert_close(value, builtin[name], rtol=1e-9, atol=1e-12)
