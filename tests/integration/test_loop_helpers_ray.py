"""A loop written with scalesweep.loop_helpers on real Ray Train workers (issue #22 item 2):
V = 4 virtual ranks played by P = 1, 2 and 4 Ray Train V2 workers (gloo, float64) make the
built-in loop's updates: the same summed loss at every update on every rank, and final
parameters within 1e-9 of the built-in loop's at P = 1. The workers of P run the loop in the
Ray Train run of P workers that this session's DDP tests share (tests/support/ddp_groups.py);
the restarted worker group has a run of its own (it fails on purpose)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from ray.train.torch import TorchConfig
from ray.train.v2.api.config import RunConfig, ScalingConfig

from scalesweep import loop_helpers
from scalesweep.trainables.lean_trainer import LeanTorchTrainer
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
for _physical in (1, 2, 4):
    ddp_groups.register(_physical, f"loop-helpers-p{_physical}", _ray_worker, {"loop": _loop_config(TRIAL)})


@pytest.mark.parametrize("physical", [1, 2, 4])
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


def _restarted_worker(config: dict[str, Any]) -> None:
    """Reports a state at update 4 and dies; started again by Ray Train, writes what each
    restore helper gives it."""
    import ray.train

    from scalesweep.adapters import hf, lightning

    out = Path(config["out"])
    state = loop_helpers.restore()
    if state is None:
        loop_helpers.report(CONFIG, update=4, dev_loss=0.5, state={"update": 4, "w": torch.ones(2)})
        raise RuntimeError("the worker dies after its checkpoint")
    with hf.last_checkpoint() as directory, lightning.last_checkpoint() as ckpt_path:
        seen = {"update": state["update"], "w": state["w"].tolist(),
                "hf": sorted(p.name for p in Path(str(directory)).iterdir()),
                "lightning": Path(str(ckpt_path)).name,
                "same": Path(str(ckpt_path)).parent == Path(str(directory))}
    out.joinpath(f"restored{ray.train.get_context().get_world_rank()}.json").write_text(
        json.dumps(seen))
    loop_helpers.report(CONFIG, update=8, dev_loss=0.25)


CONFIG = {"updates_per_epoch": 8, "global_batch": 8}


def test_a_restarted_worker_group_gets_the_loops_checkpoint_from_every_restore_helper(
        ray_cluster: None, tmp_path: Path) -> None:
    """loop_helpers.report(state=...) saves on rank 0 only; after Ray Train restarts the group,
    loop_helpers.restore() gives the state back on every rank, and the adapters'
    last_checkpoint() point at the same checkpoint."""
    from ray.train.v2.api.config import FailureConfig

    LeanTorchTrainer(
        _restarted_worker, train_loop_config={"out": str(tmp_path)},
        scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"CPU": 1}),
        torch_config=TorchConfig(backend="gloo"),
        run_config=RunConfig(name="restarted", storage_path=str(tmp_path / "ray"),
                             failure_config=FailureConfig(max_failures=1)),
    ).fit()
    for rank in (0, 1):
        seen = json.loads((tmp_path / f"restored{rank}.json").read_text())
        assert seen == {"update": 4, "w": [1.0, 1.0], "hf": [loop_helpers.STATE_FILE],
                        "lightning": "lightning.ckpt", "same": True}
