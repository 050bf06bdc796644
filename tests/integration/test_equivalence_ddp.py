"""Acceptance: real Ray Train DDP workers (CPU, gloo) make the same updates as simulate.

For the same trial, ddp with P = V = 2, P = V = 4 and the hybrid P = 2 / V = 4 (with and
without gradient accumulation) report the same train and dev losses at every evaluation over
20 updates (crossing epoch boundaries: 256 samples make 16, 8 or 4 updates an epoch at a global
batch of 16, 32 or 64) as ``simulate`` (P = 1), for Adam (OneCycle driving its
beta1) and SGD with momentum and gradient clipping; and a few updates of mini_asr with dropout
agree too (the masks come from the per-micro-batch reseeding, not from the process).

float64: equal to 1e-9 relative. float32: summation order is the only difference. simulate
adds the V*A micro-batch gradients of an update one after another into ``.grad``; ddp adds
V/P*A of them per process, then gloo sums the P partial sums and DDP divides by P. Each way
the float32 sum of n terms is within n*u*sum|g_i| of the exact sum (u = 2^-24 ~ 6e-8), so the
two gradients differ by at most ~2*(V*A + P)*u ~ 1e-6 relative for these n <= 12 terms of like
sign and size. That perturbation enters every update and is carried by a stable, smooth
optimisation roughly additively: after 20 updates at most ~20 * 1e-6 = 2e-5 relative in the
parameters and so in the losses (measured over 60 updates: at most 3e-8). Hence FLOAT32_RTOL =
1e-4, while anything systematic -- a wrong weighting (factor P), a sample seen twice, a
micro-batch all-reduced twice -- moves the losses by percents.

The gradient noise scale (every case has V > 1) must agree too: simulate reads each virtual
rank's gradient as the increment of the accumulated ``.grad``, ddp reads the last virtual rank
of each process inside DDP's comm hook, before the all-reduce; the two sums of squares differ
by summation order only. tr Σ is a difference of two squared norms, which amplifies rounding
by |G_small|²/(|G_small|² − |G_big|²) = 1 + B_small/B_simple (~1.5 here), so the losses'
tolerances hold for it too (measured with plain torch.distributed: 3e-16 in float64, 7e-9 in
float32 after 20 updates).

Fused virtual ranks (scalesweep.trainables.fusion): mlp_regression and mini_asr without dropout are
fusable, so simulate and each process of a hybrid run their micro-batches of an update in a few
passes (mini_asr: grouped by utterance length, at most 6 samples a pass here, so several per
process); every fusable case is also checked against simulate with ``fuse: off`` (one pass per
micro-batch), at V = 4 (P = 2) and V = 16 (P = 4, a hybrid of 4 virtual ranks per process).

Start-up dominates (each Ray Train run spends ~10-40 s starting workers on 2 cores), so the
workers of P train every case in turn, in the one Ray Train run of P workers that this session's
DDP tests share (tests/support/ddp_groups.py). The real Tune path (``trial_driver.trainable``
inside ``tune.Tuner``, ddp and simulate side by side, against simulate outside Ray) is
tests/integration/test_fault_restart.py's, whose ddp worker is killed and restarted on the way.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import ray

from scalesweep.trainables import fusion, loop, workloads
from scalesweep.trainables.config import TrialConfig
from scalesweep.trainables.world import DistributedWorld, LocalWorld
from tests.support import ddp_groups

pytestmark = pytest.mark.slow

FLOAT64_RTOL = 1e-9
FLOAT32_RTOL = 1e-4
UPDATES, EVAL_EVERY = 20, 5
MLP = {"train_size": 256, "dev_size": 64}
ADAM_ONECYCLE = (
    {"type": "adam", "lr": 1e-3},
    {"type": "onecycle", "cycle_min_lr": 1e-4, "cycle_max_lr": 5e-3, "cycle_first_step_size": 8},
)
SGD_WARMUP = ({"type": "sgd", "lr": 0.05, "momentum": 0.9}, {"type": "warmuplr", "warmup_steps": 8})


def _trial(world: int, physical: int, accum: int, recipe: tuple[dict, dict], dtype: str) -> TrialConfig:
    optimizer, scheduler = recipe
    return TrialConfig(
        name=f"eq-v{world}-p{physical}-a{accum}-{optimizer['type']}-{dtype}",
        workload="mlp_regression",
        workload_options=MLP,
        world_size=world,
        physical_workers=physical,
        backend="ddp",
        per_worker_batch=8,
        accum_grad=accum,
        optimizer=optimizer,
        scheduler=scheduler,
        grad_clip=1.0 if optimizer["type"] == "sgd" else None,
        total_updates=UPDATES,
        eval_every=EVAL_EVERY,
        dtype=dtype,  # type: ignore[arg-type]
    )


def _cases(physical: int) -> list[TrialConfig]:
    shapes = [(2, 1), (4, 1), (4, 2)] if physical == 2 else [(4, 1)]
    cases = [
        _trial(world, physical, accum, recipe, dtype)
        for world, accum in shapes
        for recipe in (ADAM_ONECYCLE, SGD_WARMUP)
        for dtype in ("float64", "float32")
    ]
    if physical == 2:
        cases.append(_dropout_trial(physical))
        cases.append(_fused_asr_trial(4, physical, 2, 6))  # V = 4: 16 samples per process
    else:
        cases.append(_fused_asr_trial(16, physical, 1, 6))  # hybrid: 4 virtual ranks per process
    return cases


def _fused_asr_trial(world: int, physical: int, accum: int, budget: int) -> TrialConfig:
    """mini_asr without dropout is fusable: each process runs its samples in passes of at
    most ``budget``, grouped by length, except at the noise scale's updates (every 4th)."""
    asr = {"train_size": 256, "dev_size": 16, "d_model": 32, "num_blocks": 1, "max_frames": 64}
    return _trial(world, physical, accum, ADAM_ONECYCLE, "float64").model_copy(
        update={"name": f"eq-asr-fused-v{world}", "workload": "mini_asr", "workload_options": asr,
                "per_worker_batch": 4, "total_updates": 8, "eval_every": 2,
                "fuse_max_samples": budget}
    )  # fmt: skip


def _dropout_trial(physical: int) -> TrialConfig:
    """mini_asr with dropout: the masks must match across backends, which only the per
    (update, virtual rank, micro-batch) reseeding guarantees. Few updates: it is slow."""
    asr = {"train_size": 256, "dev_size": 16, "d_model": 32, "num_blocks": 1, "dropout": 0.2}
    return _trial(4, physical, 2, ADAM_ONECYCLE, "float64").model_copy(
        update={"name": "eq-asr-dropout", "workload": "mini_asr", "workload_options": asr,
                "per_worker_batch": 4, "total_updates": 3, "eval_every": 1}
    )  # fmt: skip


def _simulate(trial: TrialConfig) -> list[dict[str, Any]]:
    reports: list[dict[str, Any]] = []
    loop.train(trial, LocalWorld(), on_report=lambda m, _: reports.append(m))
    return reports


def _many_trials_per_worker(config: dict[str, Any]) -> None:
    """Train every case in turn in the same worker group; each rank writes what it reported."""
    import ray.train
    import ray.train.torch

    rank = ray.train.get_context().get_world_rank()
    world = DistributedWorld(ray.train.torch.get_device())
    out: dict[str, list[dict[str, Any]]] = {}
    for dumped in config["trials"]:
        trial = TrialConfig.model_validate(dumped)
        reports: list[dict[str, Any]] = []
        loop.train(trial, world, on_report=lambda m, _, r=reports: r.append(m))  # type: ignore[misc]
        out[trial.name] = reports
    Path(config["out"], f"rank{rank}.json").write_text(json.dumps(out))


def _losses(metrics: dict[str, Any]) -> list[str]:
    return [k for k in metrics if k == "train_loss" or k.startswith("dev_")]


def _noise_deviation(ddp: list[dict[str, Any]], sim: list[dict[str, Any]]) -> float:
    return max(abs(d["noise_scale"] - s["noise_scale"]) / abs(s["noise_scale"])
               for d, s in zip(ddp, sim, strict=True) if s["noise_scale"] == s["noise_scale"])  # fmt: skip


def _assert_same(ddp: list[dict[str, Any]], sim: list[dict[str, Any]], trial: TrialConfig) -> None:
    _assert_same_losses(ddp, sim, trial)
    rtol = FLOAT64_RTOL if trial.dtype == "float64" else FLOAT32_RTOL
    for d, s in zip(ddp, sim, strict=True):
        # NaN on both sides before a fused trial's first measurement (update 4)
        assert d["noise_scale"] == pytest.approx(s["noise_scale"], rel=rtol, nan_ok=True), d["update"]


def _assert_same_losses(ddp: list[dict[str, Any]], sim: list[dict[str, Any]], trial: TrialConfig) -> None:
    rtol = FLOAT64_RTOL if trial.dtype == "float64" else FLOAT32_RTOL
    assert (
        [m["update"] for m in ddp]
        == [m["update"] for m in sim]
        == list(range(trial.eval_every, trial.total_updates + 1, trial.eval_every))
    )
    for d, s in zip(ddp, sim, strict=True):
        for key in _losses(s):
            assert d[key] == pytest.approx(s[key], rel=rtol), (key, d["update"])
        for key in ("samples_seen", "epoch", "lr", "status"):
            assert d[key] == s[key]


def _untimed(metrics: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in metrics.items() if k != "wall_s"}


def _largest_deviation(ddp: list[dict[str, Any]], sim: list[dict[str, Any]]) -> float:
    return max(
        abs(d[k] - s[k]) / max(abs(s[k]), 1e-300) for d, s in zip(ddp, sim, strict=True) for k in _losses(s)
    )


for _physical in (2, 4):
    ddp_groups.register(_physical, f"equivalence-p{_physical}", _many_trials_per_worker,
                        {"trials": [c.model_dump(mode="json") for c in _cases(_physical)]})


@pytest.mark.parametrize("physical", [2, 4])
def test_ddp_equals_simulate(ray_cluster: None, request: pytest.FixtureRequest, physical: int) -> None:
    cases = _cases(physical)
    out = ddp_groups.outputs(request, physical, f"equivalence-p{physical}")
    by_rank = [json.loads((out / f"rank{r}.json").read_text()) for r in range(physical)]
    # every rank reported the same (but its own wall time)
    untimed = [{k: [_untimed(m) for m in v] for k, v in r.items()} for r in by_rank]
    assert all(other == untimed[0] for other in untimed[1:])
    for case in cases:
        ddp, sim = by_rank[0][case.name], _simulate(case)
        _assert_same(ddp, sim, case)
        print(f"{case.name}: max relative deviation {_largest_deviation(ddp, sim):.1e}, "
              f"noise scale {_noise_deviation(ddp, sim):.1e} (last {sim[-1]['noise_scale']:.3g})")
        if fusion.fusable(workloads.make(case.workload, case.workload_options)):
            # fused (here and in ddp's processes) == one pass per micro-batch; the noise
            # scale is measured at every update there, so only the losses compare
            unfused = _simulate(case.model_copy(update={"fuse": "off"}))
            _assert_same_losses(ddp, unfused, case)
            print(f"{case.name}: max relative deviation from unfused simulate "
                  f"{_largest_deviation(ddp, unfused):.1e}")


def test_ddp_trial_shares_its_workload_and_falls_back_when_unpicklable(ray_cluster: None) -> None:
    """A ddp trial makes its workload once, prepared, for its workers to fetch; one that cannot
    be pickled is left to each worker to make (None), not an error."""
    import torch

    from scalesweep.trainables import workloads
    from scalesweep.trainables.trial_driver import shared_workload

    options = {"train_size": 64, "dev_size": 16, "d_model": 32, "num_blocks": 1}
    trial = _trial(4, 4, 1, ADAM_ONECYCLE, "float32").model_copy(
        update={"workload": "mini_asr", "workload_options": options})
    ref = shared_workload(trial)
    assert ref is not None
    shared = ray.get(ref)
    assert shared._data is not None  # generated before it was shipped, not once per worker
    fresh = workloads.make("mini_asr", options)
    for got, want in zip(shared.train_batch([3, 1, 4]), fresh.train_batch([3, 1, 4]), strict=True):
        assert torch.equal(got, want)
    unpicklable = trial.model_copy(update={"workload": "tests.support.faulty_workload:make_unpicklable",
                                           "workload_options": {}})
    assert shared_workload(unpicklable) is None
