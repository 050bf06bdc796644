"""Mixed precision in the loop (scalesweep.trainables.precision): bfloat16 and float16 (GradScaler).

Fast tests run the loop in simulate (P = 1) on a real workload (mlp_regression) that only adds
hooks: one records the dtype its forward ran in, one can multiply the gradient of one update
by inf, as a float16 overflow would (the loss stays finite, so only the scaler reacts). They
check that: bfloat16/float16 really autocast and keep float32 masters; gradients are
unscaled before clipping (SGD with lr 1 moves the parameters by exactly the clip norm);
the noise-scale probe sees unscaled gradients (float16 reports the float32 estimate); a skipped
update leaves the parameters and the noise scale's averages alone, is counted in
``skipped_updates`` and still advances the lr schedule; the scaler's state survives a
checkpoint. float32/float64 are covered, unchanged, by tests/unit/test_loop.py,
tests/unit/test_fusion.py and tests/integration/test_equivalence_ddp.py.

The slow test runs bfloat16 and float16 trials on real Ray Train DDP workers (gloo) against
simulate, in the Ray Train run of 2 workers that this session's DDP tests share
(tests/support/ddp_groups.py); its tolerances are derived in its docstring.
"""

from __future__ import annotations

import itertools
import json
import math
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import torch

from scalesweep.science import schedules
from scalesweep.trainables import checkpointing, loop
from scalesweep.trainables.config import TrialConfig
from scalesweep.trainables.workloads.mlp_regression import MLPRegression
from scalesweep.trainables.world import DistributedWorld, LocalWorld
from tests.support import ddp_groups

MLP = {"train_size": 512, "dev_size": 160}
ADAM: dict[str, Any] = {"type": "adam", "lr": 3e-3}
SGD_CLIP: dict[str, Any] = {"type": "sgd", "lr": 0.05, "momentum": 0.9}
#: float16 against float32 (module doc of test_noise_scale_sees_unscaled_gradients)
NOISE_RTOL = 1e-2


class _Hooked(MLPRegression):
    """mlp_regression plus hooks: the dtypes its forward produced, its model and initial
    parameters, and (``poison_update``) the gradient of that update times inf.

    The update a backward belongs to is counted from the backwards seen so far, so the trial
    must run ``passes_per_update`` passes per update: V/P * accum_grad with ``fuse: off``."""

    def __init__(
        self, options: Mapping[str, Any], poison_update: int | None = None, passes_per_update: int = 1
    ) -> None:
        super().__init__(options)
        self.poison_update, self.passes_per_update = poison_update, passes_per_update
        self.backwards = 0
        self.forward_dtypes: set[torch.dtype] = set()
        self.model: torch.nn.Module | None = None
        self.initial: dict[str, torch.Tensor] = {}

    def build_model(self) -> torch.nn.Module:
        model = super().build_model()
        model.register_forward_hook(lambda module, inputs, out: self.forward_dtypes.add(out.dtype))
        next(model.parameters()).register_hook(self._poison)
        self.model = model
        self.initial = _params(model)
        return model

    def _poison(self, grad: torch.Tensor) -> torch.Tensor:
        update = self.backwards // self.passes_per_update + 1
        self.backwards += 1
        return grad * math.inf if update == self.poison_update else grad


def _params(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _config(**overrides: Any) -> TrialConfig:
    base: dict[str, Any] = {
        "name": "p", "workload": "mlp_regression", "workload_options": MLP,
        "world_size": 4, "physical_workers": 1, "per_worker_batch": 8, "accum_grad": 2,
        "optimizer": ADAM, "scheduler": {"type": "warmuplr", "warmup_steps": 5},
        "total_updates": 40, "eval_every": 10, "dtype": "float16",
    }  # fmt: skip
    return TrialConfig(**{**base, **overrides})


def _train(
    config: TrialConfig,
    workload: _Hooked | None = None,
    *,
    resume_from: Path | None = None,
    keep: Path | None = None,
) -> tuple[list[dict[str, Any]], _Hooked, list[dict[str, torch.Tensor]], dict[int, Path]]:
    """Simulate: reports, the workload, the parameters after each report, and (``keep``: a
    new directory) a copy of each checkpoint, by update."""
    hooked = workload or _Hooked(config.workload_options)
    reports: list[dict[str, Any]] = []
    params: list[dict[str, torch.Tensor]] = []
    saved: dict[int, Path] = {}

    def on_report(metrics: dict[str, Any], checkpoint_dir: str | None) -> None:
        reports.append(metrics)
        assert hooked.model is not None
        params.append(_params(hooked.model))
        if checkpoint_dir is not None and keep is not None:
            saved[metrics["update"]] = Path(shutil.copytree(checkpoint_dir, keep / str(metrics["update"])))

    loop.train(config, LocalWorld(), on_report=on_report, resume_from=resume_from, workload=hooked)
    return reports, hooked, params, saved


def _losses(report: Mapping[str, Any]) -> dict[str, float]:
    return {k: v for k, v in report.items() if k == "train_loss" or k.startswith("dev_")}


def _max_rel(a: Mapping[str, float], b: Mapping[str, float]) -> float:
    return max(abs(a[k] - b[k]) / abs(b[k]) for k in b)


# -- bfloat16 and float16 autocast; float32/float64 untouched --------------------------------


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_mixed_precision_autocasts_and_keeps_float32_masters(dtype: str, tmp_path: Path) -> None:
    reports, workload, _, saved = _train(_config(dtype=dtype, total_updates=10), keep=tmp_path)
    assert workload.forward_dtypes == {getattr(torch, dtype)}  # training and evaluation
    state = torch.load(saved[10] / checkpointing.STATE_FILE, weights_only=True)
    assert {v.dtype for v in state["model"].values()} == {torch.float32}
    assert {v.dtype for s in state["optimizer"]["state"].values() for k, v in s.items()
            if k != "step"} == {torch.float32}  # fmt: skip
    assert ("precision" in state) == (dtype == "float16")
    assert ("skipped_updates" in reports[-1]) == (dtype == "float16")
    # a mixed run is a different computation from float32, not float32 by another name
    reference, ref_workload, _, _ = _train(_config(dtype="float32", total_updates=10))
    assert ref_workload.forward_dtypes == {torch.float32}
    assert _max_rel(_losses(reports[-1]), _losses(reference[-1])) > 1e-6


def test_float32_and_float64_reports_and_checkpoints_keep_their_shape(tmp_path: Path) -> None:
    for dtype in ("float32", "float64"):
        config = _config(dtype=dtype, total_updates=10)
        reports, workload, _, saved = _train(config, keep=tmp_path / dtype)
        assert workload.forward_dtypes == {getattr(torch, dtype)}
        assert "skipped_updates" not in reports[-1]
        state = torch.load(saved[10] / checkpointing.STATE_FILE, weights_only=True)
        assert set(state) == {"format", "model", "optimizer", "progress", "rng"}


# -- float16: unscale before clipping and before the noise-scale probe -----------------------


def test_float16_clips_the_unscaled_gradient() -> None:
    """SGD, lr 1, no momentum, one update, clip norm c below the gradient's norm: the
    parameters move by exactly c. Clipping the scaled gradient (65536x larger) would move
    them by c / 65536; not unscaling at all, by 65536 c."""
    clip = 0.1
    config = _config(optimizer={"type": "sgd", "lr": 1.0}, scheduler={"type": "constant"},
                     total_updates=1, eval_every=1, grad_clip=clip)  # fmt: skip
    moved = {}
    for dtype in ("float32", "float16"):
        reports, workload, params, _ = _train(config.model_copy(update={"dtype": dtype}))
        assert reports[-1].get("skipped_updates", 0) == 0
        step = torch.cat([(params[-1][k] - workload.initial[k]).flatten() for k in workload.initial])
        moved[dtype] = float(step.double().norm())
    # float32 subtraction of parameters ~0.3 in size: ~1e-5 relative on a norm of 0.1
    assert moved["float16"] == pytest.approx(clip, rel=1e-4)
    assert moved["float32"] == pytest.approx(clip, rel=1e-4)
    # and the gradient really was longer than the clip (else this tests nothing)
    _, workload, params, _ = _train(config.model_copy(update={"dtype": "float16", "grad_clip": None}))
    step = torch.cat([(params[-1][k] - workload.initial[k]).flatten() for k in workload.initial])
    assert float(step.double().norm()) > 2 * clip  # measured: 0.46


@pytest.mark.parametrize("fuse", ["auto", "off"])
def test_noise_scale_sees_unscaled_gradients(fuse: str) -> None:
    """float16 reports float32's noise scale (and losses) within NOISE_RTOL.

    Why 1e-2: float16 keeps 11 significant bits (u = 2^-11 ~ 5e-4); the forward's products
    round to it, so each per-virtual-rank gradient carries a few u of relative error, and
    tr Σ (a difference of squared norms) amplifies relative errors by 1 + B_small / B_simple
    (~1.5 here); the two runs' parameters also drift apart by rounding over 40 updates.
    Measured: < 1e-4. A gradient read before unscaling is off by the scale squared (2^32),
    and a mixed-up order of unscale and norm makes tr Σ or |G|² meaningless (often negative),
    so the tolerance separates right from wrong by orders of magnitude. ``auto`` fuses
    mlp_regression's passes and measures every NOISE_EVERY-th update on the unfused path;
    ``off`` measures every update."""
    half, _, _, _ = _train(_config(fuse=fuse, grad_clip=1.0))
    full, _, _, _ = _train(_config(fuse=fuse, grad_clip=1.0, dtype="float32"))
    assert [m["skipped_updates"] for m in half] == [0] * len(half)
    for h, f in zip(half, full, strict=True):
        assert h["noise_scale"] == pytest.approx(f["noise_scale"], rel=NOISE_RTOL), h["update"]
        assert _max_rel(_losses(h), _losses(f)) < NOISE_RTOL
    pairs = zip(half, full, strict=True)
    worst = max(abs(h["noise_scale"] - f["noise_scale"]) / f["noise_scale"] for h, f in pairs)
    print(f"\nfuse={fuse}: float16 vs float32 noise scale: max relative deviation {worst:.1e}")


# -- float16: a skipped update ---------------------------------------------------------------


def test_inf_gradient_skips_the_update_and_counts_it() -> None:
    """At update 3 one micro-batch's gradient is inf: the scaler skips the step (parameters,
    Adam's state and the noise scale's averages unchanged), halves its scale, and every later
    report counts the skip; the update still happened for the data and the lr schedule (the
    schedule's update 4 is lr(4)), as in torch's scaler.step / scheduler.step recipe."""
    config = _config(fuse="off", total_updates=6, eval_every=1)
    workload = _Hooked(MLP, poison_update=3, passes_per_update=config.world_size * config.accum_grad)
    reports, _, params, _ = _train(config, workload)
    assert [m["skipped_updates"] for m in reports] == [0, 0, 1, 1, 1, 1]
    assert [m["status"] for m in reports] == ["running"] * 5 + ["completed"]
    assert all(math.isfinite(m["train_loss"]) and math.isfinite(m["dev_loss"]) for m in reports)
    unchanged = [all(torch.equal(a[k], b[k]) for k in a) for a, b in itertools.pairwise(params)]
    assert unchanged == [False, True, False, False, False]  # update 3 left them as update 2 did
    assert reports[2]["dev_loss"] == reports[1]["dev_loss"]
    assert reports[2]["noise_scale"] == reports[1]["noise_scale"]  # no inf in its averages
    lr = schedules.build(config.scheduler, ADAM["lr"]).lr
    assert [m["lr"] for m in reports] == [pytest.approx(lr(k)) for k in range(1, 7)]


# -- float16: checkpoint and resume ----------------------------------------------------------


def test_resume_restores_the_scaler_and_the_skip_count(tmp_path: Path) -> None:
    """A skip at update 3 halves the scale and resets its growth tracker; resumed from the
    checkpoint at update 4, the trial carries on with that scale and count, and ends with
    the uninterrupted trial's scaler state, parameters and reports."""
    config = _config(fuse="off", total_updates=8, eval_every=2, checkpoint_every=4)
    passes = config.world_size * config.accum_grad
    whole, _, whole_params, saved = _train(config, _Hooked(MLP, 3, passes), keep=tmp_path / "whole")
    resumed, _, resumed_params, resumed_saved = _train(
        config, resume_from=saved[4], keep=tmp_path / "resumed"
    )
    assert [m["update"] for m in resumed] == [6, 8]
    assert [m["skipped_updates"] for m in resumed] == [1, 1]  # not 0: the count came back
    strip = [{k: v for k, v in m.items() if k != "wall_s"} for m in whole[-2:]]
    assert [{k: v for k, v in m.items() if k != "wall_s"} for m in resumed] == strip
    assert all(torch.equal(whole_params[-1][k], resumed_params[-1][k]) for k in whole_params[-1])
    states = [torch.load(d / checkpointing.STATE_FILE, weights_only=True)["precision"]
              for d in (saved[4], saved[8], resumed_saved[8])]  # fmt: skip
    assert states[0]["scaler"]["scale"] == 65536.0 / 2 and states[0]["skipped"] == 1
    assert states[1] == states[2]  # scale, growth tracker, skips: as if never interrupted
    assert states[2]["scaler"]["_growth_tracker"] == 5  # updates 4..8 stepped since the skip


def test_float16_refuses_a_checkpoint_without_scaler_state() -> None:
    from scalesweep.trainables.precision import Precision

    with pytest.raises(ValueError, match="GradScaler"):
        Precision("float16", torch.device("cpu")).load_state_dict({})
    Precision("float32", torch.device("cpu")).load_state_dict({})  # nothing to restore


# -- real DDP workers ------------------------------------------------------------------------

#: bfloat16 keeps 8 significant bits: unit roundoff 2^-8 ~ 3.9e-3 (see the test's docstring)
BF16_RTOL = 2.0**-8
#: float16: 11 significant bits, 2^-11 ~ 4.9e-4
FP16_RTOL = 2.0**-11
UPDATES, EVAL_EVERY = 20, 5


def _ddp_cases() -> list[TrialConfig]:
    cases = []
    for world, accum, optimizer, clip in ((2, 1, ADAM, None), (4, 2, SGD_CLIP, 1.0)):
        for dtype in ("bfloat16", "float16"):
            cases.append(_config(
                name=f"mp-v{world}-a{accum}-{optimizer['type']}-{dtype}", world_size=world,
                physical_workers=2, backend="ddp", accum_grad=accum, optimizer=optimizer,
                grad_clip=clip, total_updates=UPDATES, eval_every=EVAL_EVERY, dtype=dtype,
            ))  # fmt: skip
    # a float16 overflow on one physical rank only: the all-reduce spreads the inf, so every
    # rank (and simulate) skips the same update
    cases.append(_config(name="mp-poisoned", world_size=4, physical_workers=2, backend="ddp",
                         fuse="off", total_updates=8, eval_every=1))  # fmt: skip
    return cases


POISON_UPDATE = 3


def _workload_for(trial: TrialConfig, processes: int, rank: int) -> _Hooked:
    """The poisoned case poisons update 3 on the last process only (simulate: its only one)."""
    passes = trial.world_size // processes * trial.accum_grad
    poisoned = trial.name == "mp-poisoned" and rank == processes - 1
    return _Hooked(trial.workload_options, POISON_UPDATE if poisoned else None, passes)


def _ddp_worker(config: dict[str, Any]) -> None:
    """Every case in turn in the same worker group; each rank writes its reports, rank 0
    also the final parameters (from its last checkpoint)."""
    import ray.train
    import ray.train.torch

    rank = ray.train.get_context().get_world_rank()
    world = DistributedWorld(ray.train.torch.get_device())
    out: dict[str, Any] = {}
    for dumped in config["trials"]:
        trial = TrialConfig.model_validate(dumped)
        reports: list[dict[str, Any]] = []
        final: dict[str, list[float]] = {}

        def on_report(m: dict[str, Any], d: str | None, r: list[Any] = reports,
                      f: dict[str, Any] = final) -> None:  # fmt: skip
            r.append(m)
            if d is not None:
                state = torch.load(Path(d) / checkpointing.STATE_FILE, weights_only=True)
                f.update({k: v.flatten().tolist() for k, v in state["model"].items()})

        workload = _workload_for(trial, world.size, rank)
        loop.train(trial, world, on_report=on_report, workload=workload)
        out[trial.name] = {"reports": reports, "params": final}
    Path(config["out"], f"rank{rank}.json").write_text(json.dumps(out))


ddp_groups.register(2, "precision", _ddp_worker,
                    {"trials": [c.model_dump(mode="json") for c in _ddp_cases()]})


def _simulate(trial: TrialConfig) -> tuple[list[dict[str, Any]], torch.Tensor]:
    sim = trial.model_copy(update={"backend": "simulate", "physical_workers": 1})
    reports, workload, params, _ = _train(sim, _workload_for(sim, 1, 0))
    del workload
    return reports, torch.cat([v.flatten() for v in params[-1].values()]).double()


@pytest.mark.slow
def test_mixed_precision_ddp_equals_simulate(ray_cluster: None, request: pytest.FixtureRequest) -> None:
    """bfloat16 and float16 on P = 2 real DDP workers (gloo), V = 2 and V = 4 with gradient
    accumulation, against simulate: same losses at every eval, same noise scale, same final
    parameters, same skipped updates.

    Tolerance. As in float32 (tests/integration/test_equivalence_ddp.py) the backends differ only in the
    order in which the float32 gradients are summed (~1e-7 relative per update): the
    forward/backward arithmetic, bfloat16 included, is the same computation on the same
    micro-batch. But that tiny difference in the float32 master weights now meets a rounding
    to 8 significant bits at every forward: a weight that sits within 1e-7 of a bfloat16
    rounding boundary rounds one way in one backend and the other way in the other, a jump
    of one bfloat16 ulp in that weight. So the two runs may differ by what bfloat16 rounding
    itself can change, and no more: each is within bfloat16 rounding of the exact float32
    computation, so they are within twice that of each other, u = 2^-8 per rounding;
    averaged over samples and weights the effect on a loss or on the parameters is a small
    multiple of u at most. BF16_RTOL = u = 3.9e-3 on the losses and the noise scale, and
    on the parameters' relative distance (its norm); float16 likewise with u = 2^-11.
    Systematic errors -- a loss scale left in a gradient (2^16), a sample weighted twice,
    a skipped update on one rank but not the other -- move them by percents or more.
    Measured over 60 updates (-s prints them): losses <= 2e-4 and parameters <= 6e-4 apart in bfloat16
    (the same size as bfloat16 against float32, 7e-5..3e-4, as the argument predicts),
    losses <= 2e-5 and parameters <= 9e-5 in float16. And both mixed runs, the DDP one
    included, must differ from a float32 simulate twin by more than float32 reordering can
    explain (3e-8 measured, test_equivalence_ddp.py; asserted > 1e-6), so the comparison
    cannot pass with the dtype ignored on either side.
    """
    cases = _ddp_cases()
    out = ddp_groups.outputs(request, 2, "precision")
    by_rank = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    for case in cases:
        rtol = BF16_RTOL if case.dtype == "bfloat16" else FP16_RTOL
        ddp = by_rank[0][case.name]["reports"]
        sim, sim_params = _simulate(case)
        assert [m["update"] for m in ddp] == [m["update"] for m in sim]
        # both ranks took the same decisions from the same numbers
        assert [m.get("skipped_updates") for m in by_rank[1][case.name]["reports"]] == \
            [m.get("skipped_updates") for m in ddp]  # fmt: skip
        worst = 0.0
        for d, s in zip(ddp, sim, strict=True):
            assert d.get("skipped_updates") == s.get("skipped_updates"), d["update"]
            assert d["lr"] == s["lr"] and d["status"] == s["status"]
            for key, value in _losses(s).items():
                assert d[key] == pytest.approx(value, rel=rtol), (case.name, key, d["update"])
            assert d["noise_scale"] == pytest.approx(s["noise_scale"], rel=rtol, nan_ok=True)
            worst = max(worst, _max_rel(_losses(d), _losses(s)))
        params = by_rank[0][case.name]["params"]
        ddp_params = torch.cat([torch.tensor(params[k], dtype=torch.float64) for k in params])
        distance = float((ddp_params - sim_params).norm() / sim_params.norm())
        assert distance < rtol, case.name
        print(f"{case.name}: losses {worst:.1e}, parameters {distance:.1e} relative "
              f"(tolerance {rtol:.1e}); skipped {ddp[-1].get('skipped_updates')}")
        if case.name == "mp-poisoned":
            assert [m["skipped_updates"] for m in ddp] == [0, 0, 1, 1, 1, 1, 1, 1]
        if case.name != "mp-poisoned":
            twin, _ = _simulate(case.model_copy(update={"dtype": "float32"}))
            apart = [_max_rel(_losses(run[-1]), _losses(twin[-1])) for run in (sim, ddp)]
            print(f"{case.name}: {case.dtype} vs float32 final losses {apart[0]:.1e} "
                  f"(simulate), {apart[1]:.1e} (ddp) relative")  # fmt: skip
            assert min(apart) > 1e-6
