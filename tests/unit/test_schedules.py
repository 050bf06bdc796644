"""scalesweep.science.schedules against independent re-statements of the original scheduler classes.

Each ``Ref*`` class below restates the original's stepping logic (torch's ``_LRScheduler`` for
WeNet, ``last_batch_iteration`` for DeepSpeed) as a stateful object; ``_ref_rows`` reads its lr
after construction and after each ``step()``. Matching ``lr(k)`` at every k proves the mapping
"update k = after construction and k-1 steps", not just the formula.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from scalesweep.science import schedules as S
from tests.support.helpers import built_schedule

ROOT = Path(__file__).resolve().parents[2]
REL = 1e-12


# --- references: the originals' stepping logic, restated ---------------------------------------


class RefWeNet:
    """wenet/utils/scheduler.py WarmupLR on torch's _LRScheduler (whose __init__ steps once)."""

    def __init__(self, base: float, warmup_steps: int) -> None:
        self.base, self.w = base, warmup_steps
        self.last_epoch = -1
        self.step()

    def step(self) -> None:
        self.last_epoch += 1
        step_num = self.last_epoch + 1
        if self.w == 0:
            self.lr = self.base * step_num**-0.5
        else:
            self.lr = self.base * self.w**0.5 * min(step_num**-0.5, step_num * self.w**-1.5)

    momentum = None


class RefDSWarmupLR:
    """DeepSpeed WarmupLR; WarmupDecayLR when total_num_steps is given."""

    def __init__(self, min_lr: float, max_lr: float, warmup_num_steps: int,
                 warmup_type: str = "log", total_num_steps: int | None = None) -> None:
        self.min_lr, self.delta = min_lr, max_lr - min_lr
        self.warmup_num_steps = max(2, warmup_num_steps)
        self.inverse_log_warm_up = 1.0 / math.log(self.warmup_num_steps)
        self.warmup_type, self.total = warmup_type, total_num_steps
        self.last_batch_iteration = -1
        self.lr = self.get_lr()  # the constructor sets the optimizer's lr

    def gamma(self) -> float:
        i = self.last_batch_iteration
        if i < self.warmup_num_steps:
            if self.warmup_type == "log":
                return self.inverse_log_warm_up * math.log(i + 1)
            return i / self.warmup_num_steps
        if self.total is None:
            return 1.0
        return max(0.0, float(self.total - i) / float(max(1.0, self.total - self.warmup_num_steps)))

    def get_lr(self) -> float:
        if self.last_batch_iteration < 0:
            return self.min_lr
        return self.min_lr + self.delta * self.gamma()

    def step(self) -> None:
        self.last_batch_iteration += 1
        self.lr = self.get_lr()

    momentum = None


class RefDSCosine:
    def __init__(self, org_lr: float, total_num_steps: int, warmup_min_ratio: float,
                 warmup_num_steps: int, cos_min_ratio: float, warmup_type: str) -> None:
        self.org_lr, self.total = org_lr, total_num_steps
        self.wmr, self.cmr, self.warmup_type = warmup_min_ratio, cos_min_ratio, warmup_type
        self.warmup_num_steps = max(2, warmup_num_steps)
        self.inverse_log_warm_up = 1.0 / math.log(self.warmup_num_steps)
        self.last_batch_iteration = -1
        self.lr = self.get_lr()

    def get_lr(self) -> float:
        i, w = self.last_batch_iteration, self.warmup_num_steps
        if i < 0:
            return 0.0
        if i < w:
            r = self.inverse_log_warm_up * math.log(i + 1) if self.warmup_type == "log" else i / w
            return self.org_lr * (self.wmr + r * (1.0 - self.wmr))
        progress = min(1.0, (i - w + 1) / max(1, self.total - w))
        r = (1 + math.cos(math.pi * progress)) / 2
        return self.org_lr * max(0.0, self.cmr + (1.0 - self.cmr) * r)

    def step(self) -> None:
        self.last_batch_iteration += 1
        self.lr = self.get_lr()

    momentum = None


class RefOneCycle:
    """DeepSpeed OneCycle driving an Adam-like optimizer (betas), stair counts as in 0.19.4+."""

    def __init__(self, p: dict[str, Any]) -> None:
        first = float(p["cycle_first_step_size"])
        second = p.get("cycle_second_step_size")
        second = first if second is None else float(second)
        self.first, self.second, self.total_size = first, second, first + second
        self.step_ratio = first / self.total_size
        self.first_stairs = p.get("cycle_first_stair_count", 0)
        second_stairs = p.get("cycle_second_stair_count")
        self.second_stairs = self.first_stairs if second_stairs is None else second_stairs
        self.min_lr, self.max_lr = p["cycle_min_lr"], p["cycle_max_lr"]
        self.decay_lr_rate = p.get("decay_lr_rate", 0.0)
        self.decay_step_size = p.get("decay_step_size", 0)
        self.cycle_momentum = p.get("cycle_momentum", True)
        self.min_mom, self.max_mom = p.get("cycle_min_mom", 0.8), p.get("cycle_max_mom", 0.9)
        self.decay_mom_rate = p.get("decay_mom_rate", 0.0)
        self.skip_lr_decay = self.decay_step_size == 0 or self.decay_lr_rate == 0
        self.skip_mom_decay = self.decay_step_size == 0 or self.decay_mom_rate == 0
        self.lr = self.min_lr
        self.betas = (self.min_mom, 0.99) if self.cycle_momentum else None
        self.last_batch_iteration = -1

    @property
    def momentum(self) -> float | None:
        return None if self.betas is None else self.betas[0]

    def scale(self) -> float:
        b = self.last_batch_iteration + 1
        cycle = math.floor(1 + b / self.total_size)
        x = 1.0 + b / self.total_size - cycle
        if x <= self.step_ratio:
            s, stairs = x / self.step_ratio, self.first_stairs
        else:
            s, stairs = (x - 1) / (self.step_ratio - 1), self.second_stairs
        if stairs > 0:
            c = b % self.total_size
            pos = c * stairs / self.first if c <= self.first else (
                (self.total_size - c) * stairs / self.second)
            s = math.floor(pos) / stairs
        return s

    def step(self) -> None:
        self.last_batch_iteration += 1
        i = self.last_batch_iteration
        d = (i - self.total_size + 1) / self.decay_step_size if self.decay_step_size else 0.0
        if i < self.total_size:
            self.lr = self.min_lr + (self.max_lr - self.min_lr) * self.scale()
            mom = self.max_mom - (self.max_mom - self.min_mom) * self.scale()
        else:
            self.lr = self.min_lr if self.skip_lr_decay else self.min_lr / (
                1 + self.decay_lr_rate * d)
            mom = self.max_mom if self.skip_mom_decay else self.max_mom * (
                1 + self.decay_mom_rate * d)
        if self.betas is not None:
            self.betas = (mom, 0.99)


class RefGradual:
    """Goyal et al. 2017: at iteration t (from 0), lr = start + (base - start) * t / W, then base."""

    def __init__(self, base: float, start: float, warmup: int) -> None:
        self.base, self.start, self.warmup, self.t = base, start, warmup, 0
        self.lr = self.get_lr()

    def get_lr(self) -> float:
        if self.t >= self.warmup:
            return self.base
        return self.start + (self.base - self.start) * self.t / self.warmup

    def step(self) -> None:
        self.t += 1
        self.lr = self.get_lr()

    momentum = None


def _ref_rows(ref: Any, n: int) -> tuple[list[float], list[float | None]]:
    lrs, moms = [], []
    for _ in range(n):
        lrs.append(ref.lr)
        moms.append(ref.momentum)
        ref.step()
    return lrs, moms


def _check(spec: dict[str, Any], base: float, ref: Any, n: int) -> None:
    schedule = built_schedule(spec, base)
    want_lr, want_mom = _ref_rows(ref, n)
    rows = S.table(schedule, n)
    assert [k for k, _, _ in rows] == list(range(1, n + 1))
    assert [lr for _, lr, _ in rows] == pytest.approx(want_lr, rel=REL, abs=0)
    got_mom = [m for _, _, m in rows]
    if all(m is None for m in want_mom):
        assert all(m is None for m in got_mom)
    else:
        assert got_mom == pytest.approx(want_mom, rel=REL, abs=0)


# --- invalid arguments --------------------------------------------------------------------------


def test_canonical_name_rejects_unknown_and_lists_known() -> None:
    with pytest.raises(ValueError, match=r"known.*warmuplr.*onecycle.*WarmupCosineLR"):
        S.canonical_name("cosine")
    with pytest.raises(ValueError):
        S.canonical_name("WARMUPLR")  # case matters: warmuplr (WeNet) != WarmupLR (DeepSpeed)


@pytest.mark.parametrize("spec", [{}, {"type": None}, {"type": "nope"}, {"type": 3}, "warmuplr"])
def test_validate_bad_type(spec: Any) -> None:
    problems = S.validate(spec)
    assert len(problems) == 1 and problems[0].field == "type"


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"type": "warmuplr", "warmup_step": 10}, "warmup_step"),
        ({"type": "warmuplr", "warmup_steps": -1}, "warmup_steps"),
        ({"type": "warmuplr", "warmup_steps": 10.0}, "warmup_steps"),
        ({"type": "warmuplr", "warmup_steps": True}, "warmup_steps"),
        ({"type": "warmuplr", "warmup_steps": None}, "warmup_steps"),
        ({"type": "constant", "lr": 0.1}, "lr"),
        ({"type": "WarmupLR", "warmup_num_steps": 0}, "warmup_num_steps"),
        ({"type": "WarmupLR", "warmup_type": "cosine"}, "warmup_type"),
        ({"type": "WarmupLR", "warmup_max_lr": True}, "warmup_max_lr"),
        ({"type": "WarmupLR", "warmup_max_lr": float("nan")}, "warmup_max_lr"),
        ({"type": "WarmupLR", "warmup_min_lr": -1e-3}, "warmup_min_lr"),
        ({"type": "WarmupLR", "warmup_min_lr": 0.2, "warmup_max_lr": 0.1}, "warmup_min_lr"),
        ({"type": "WarmupDecayLR"}, "total_num_steps"),
        ({"type": "WarmupDecayLR", "total_num_steps": 0}, "total_num_steps"),
        ({"type": "WarmupDecayLR", "total_num_steps": 10, "warmup_min_lr": 0.01}, "warmup_min_lr"),
        ({"type": "WarmupCosineLR", "total_num_steps": 10, "cos_min_ratio": 1.5}, "cos_min_ratio"),
        ({"type": "WarmupCosineLR", "total_num_steps": 10, "warmup_min_ratio": -0.1},
         "warmup_min_ratio"),
        ({"type": "OneCycle", "cycle_max_lr": 0.1}, "cycle_min_lr"),
        ({"type": "OneCycle", "cycle_min_lr": 0.2, "cycle_max_lr": 0.1}, "cycle_min_lr"),
        ({"type": "OneCycle", "cycle_min_lr": 0, "cycle_max_lr": 1, "cycle_first_step_size": 0},
         "cycle_first_step_size"),
        ({"type": "OneCycle", "cycle_min_lr": 0, "cycle_max_lr": 1,
          "cycle_second_step_size": -1}, "cycle_second_step_size"),
        ({"type": "OneCycle", "cycle_min_lr": 0, "cycle_max_lr": 1, "cycle_momentum": 1},
         "cycle_momentum"),
        ({"type": "OneCycle", "cycle_min_lr": 0, "cycle_max_lr": 1, "cycle_max_mom": 1.0},
         "cycle_max_mom"),
        ({"type": "OneCycle", "cycle_min_lr": 0, "cycle_max_lr": 1, "cycle_min_mom": 0.95},
         "cycle_min_mom"),
        ({"type": "OneCycle", "cycle_min_lr": 0, "cycle_max_lr": 1, "decay_lr_rate": -1.0},
         "decay_lr_rate"),
        ({"type": "OneCycle", "cycle_min_lr": 0, "cycle_max_lr": 1, "cycle_first_stair_count": 2.0},
         "cycle_first_stair_count"),
        ({"type": "gradual_warmup"}, "warmup_steps"),
        ({"type": "gradual_warmup", "warmup_steps": 5, "start_lr": -1}, "start_lr"),
    ],
)
def test_validate_reports_the_field(spec: dict[str, Any], field: str) -> None:
    problems = S.validate(spec)
    assert [p.field for p in problems] == [field], problems
    assert problems[0].value is spec.get(field)
    with pytest.raises(ValueError, match=field):
        built_schedule(spec, 0.001)


def test_validate_reports_every_problem_at_once() -> None:
    spec = {"type": "OneCycle", "cycle_min_lr": True, "bogus": 1, "decay_step_size": -1,
            "cycle_max_mom": 1.0, "warmup_type": "log"}
    fields = sorted(p.field for p in S.validate(spec))
    assert fields == ["bogus", "cycle_max_lr", "cycle_max_mom", "cycle_min_lr", "decay_step_size",
                      "warmup_type"]


def test_min_above_optimizer_lr_is_caught_when_building() -> None:
    spec = {"type": "WarmupLR", "warmup_min_lr": 0.01}  # max falls back to the optimizer lr
    assert S.validate(spec) == []
    with pytest.raises(ValueError, match="warmup_min_lr"):
        built_schedule(spec, 0.001)


@pytest.mark.parametrize("base", [-0.1, float("inf"), True, "0.1"])
def test_build_rejects_bad_base_lr(base: Any) -> None:
    with pytest.raises(ValueError, match="base_lr"):
        S.build(S.resolve({"type": "constant"}), base)


def test_build_takes_only_a_resolved_spec_and_names_the_judge() -> None:
    with pytest.raises(TypeError, match=r"schedules.build takes a ScheduleSpec, but got "
                                        r"\{'type': 'constant'\}: make it with schedules.resolve"):
        S.build({"type": "constant"}, 0.1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"schedules\.warmup_steps takes a ScheduleSpec"):
        S.warmup_steps({"type": "warmuplr"})  # type: ignore[arg-type]


@pytest.mark.parametrize("update", [0, -1, 0.0, -0.5, float("nan"), float("inf"), "2", True])
def test_update_must_be_a_number_of_at_least_one(update: Any) -> None:
    for spec in ({"type": "constant"}, {"type": "OneCycle", "cycle_min_lr": 0, "cycle_max_lr": 1}):
        schedule = built_schedule(spec, 0.1)
        with pytest.raises(ValueError, match="update"):
            schedule.lr(update)
        with pytest.raises(ValueError, match="update"):
            schedule.momentum(update)


@pytest.mark.parametrize("spec", [
    {"type": "warmuplr", "warmup_steps": 75},
    {"type": "WarmupDecayLR", "warmup_num_steps": 10, "total_num_steps": 90, "warmup_max_lr": 0.1},
    {"type": "OneCycle", "cycle_min_lr": 0.01, "cycle_max_lr": 0.1, "cycle_first_step_size": 8,
     "decay_step_size": 4, "decay_lr_rate": 0.5},
])
def test_an_integral_float_position_is_the_update_itself(spec: dict[str, Any]) -> None:
    # a batch-size ramp's clock gives floats; where one is integral it must be that update
    schedule = built_schedule(spec, 0.1)
    for k in range(1, 40):
        assert schedule.lr(float(k)) == schedule.lr(k)
        assert schedule.momentum(float(k)) == schedule.momentum(k)


def test_warmuplr_on_a_quarter_clock_is_the_four_times_longer_warmup() -> None:
    # WeNet's WarmupLR warms up linearly: base * s / w, s = k. At a clock of 1/4 per update (a
    # ramp stage at 1/4 of the final batch, warmup_rule scaled), WeNet's count is k / 4, and a
    # 75-update warmup is 300 of the stage's updates: lr(k / 4) = base * k / 300 before its end
    base, schedule = 0.004, built_schedule({"type": "warmuplr", "warmup_steps": 75}, 0.004)
    for k in (1, 2, 5, 100, 299):
        assert schedule.lr(k / 4) == pytest.approx(base * k / 300, rel=1e-12)


def test_table_rejects_negative() -> None:
    with pytest.raises(ValueError, match="updates"):
        S.table(built_schedule({"type": "constant"}, 0.1), -1)
    assert S.table(built_schedule({"type": "constant"}, 0.1), 0) == []


# --- behaviour: against the references ------------------------------------------------------------


@pytest.mark.parametrize("w", [0, 1, 2, 3, 10, 37, 100])
def test_wenet_matches_reference(w: int) -> None:
    _check({"type": "warmuplr", "warmup_steps": w}, 0.002, RefWeNet(0.002, w), 4 * w + 200)


def test_wenet_exact_values() -> None:
    s = built_schedule({"type": "warmuplr", "warmup_steps": 25000}, 0.002)
    assert s.lr(25000) == 0.002  # the peak is the optimizer lr, exactly
    assert s.lr(100000) == 0.001  # 4w: sqrt(1/4)
    assert s.lr(1) == 0.002 / 25000
    assert s.lr(12500) == 0.001  # half way up the linear ramp
    assert s.momentum(1) is None
    s0 = built_schedule({"type": "warmuplr", "warmup_steps": 0}, 0.002)
    assert [s0.lr(k) for k in (1, 4, 16)] == [0.002, 0.001, 0.0005]
    assert built_schedule({"type": "warmuplr"}, 1.0).lr(25000) == 1.0  # default warmup 25000


DS_WARMUPS = [(w, t, kind) for w in (1, 2, 3, 10, 50) for t in (1, 10, 60, 200)
              for kind in ("log", "linear")]


@pytest.mark.parametrize(("w", "total", "kind"), DS_WARMUPS)
def test_ds_warmuplr_and_decay_match_reference(w: int, total: int, kind: str) -> None:
    n = max(w, total) + 30
    spec = {"type": "WarmupLR", "warmup_min_lr": 1e-5, "warmup_max_lr": 0.01,
            "warmup_num_steps": w, "warmup_type": kind}
    _check(spec, 0.5, RefDSWarmupLR(1e-5, 0.01, w, kind), n)
    spec = {**spec, "type": "WarmupDecayLR", "total_num_steps": total}
    _check(spec, 0.5, RefDSWarmupLR(1e-5, 0.01, w, kind, total), n)


def test_ds_warmuplr_max_lr_defaults_to_optimizer_lr() -> None:
    _check({"type": "WarmupLR", "warmup_num_steps": 20}, 0.3, RefDSWarmupLR(0.0, 0.3, 20), 60)
    # WarmupDecayLR's own default is 0.001; only an explicit null means the optimizer lr
    decay = {"type": "WarmupDecayLR", "total_num_steps": 50, "warmup_num_steps": 20}
    _check(decay, 0.3, RefDSWarmupLR(0.0, 0.001, 20, "log", 50), 80)
    _check({**decay, "warmup_max_lr": None}, 0.3, RefDSWarmupLR(0.0, 0.3, 20, "log", 50), 80)
    assert S.SCHEDULE_TYPES["ds_warmuplr"].reads_optimizer_lr({})
    assert not S.SCHEDULE_TYPES["ds_warmuplr"].reads_optimizer_lr({"warmup_max_lr": 0.1})
    assert not S.SCHEDULE_TYPES["ds_warmup_decay"].reads_optimizer_lr({})


def test_ds_warmup_phase_boundaries_by_hand() -> None:
    log = built_schedule({"type": "WarmupLR", "warmup_min_lr": 0.1, "warmup_max_lr": 1.1,
                   "warmup_num_steps": 10}, 9.0)
    # updates 1 and 2 both hold min (construction, then log(1) = 0); max at W+1
    assert [log.lr(1), log.lr(2)] == [0.1, 0.1]
    assert log.lr(3) == pytest.approx(0.1 + math.log(2) / math.log(10), rel=REL)
    assert [log.lr(11), log.lr(12), log.lr(1000)] == pytest.approx([1.1] * 3, rel=REL)
    lin = built_schedule({"type": "WarmupLR", "warmup_max_lr": 1.0, "warmup_num_steps": 10,
                   "warmup_type": "linear"}, 9.0)
    assert [lin.lr(k) for k in (1, 2, 3, 11, 12)] == pytest.approx([0, 0, 0.1, 0.9, 1.0], rel=REL)
    one = built_schedule({"type": "WarmupLR", "warmup_max_lr": 1.0, "warmup_num_steps": 1}, 9.0)
    assert [one.lr(k) for k in (1, 2, 3)] == [0.0, 0.0, 1.0]  # max(2, 1) = 2: log(2)/log(2)
    decay = built_schedule({"type": "WarmupDecayLR", "total_num_steps": 30, "warmup_max_lr": 1.0,
                     "warmup_num_steps": 10, "warmup_type": "linear"}, 9.0)
    # lbi = W gives 1 exactly, then linear to 0 at lbi = T (update T + 2), then stays 0
    assert decay.lr(12) == 1.0
    assert decay.lr(22) == pytest.approx(0.5, rel=REL)
    assert [decay.lr(31), decay.lr(32), decay.lr(33), decay.lr(500)] == pytest.approx(
        [0.05, 0.0, 0.0, 0.0], rel=REL, abs=0)


COSINES = [(w, t, kind, wmr, cmr) for w in (1, 3, 10, 40) for t in (1, 10, 41, 150)
           for kind in ("log", "linear") for wmr, cmr in ((0.0, 0.0001), (0.2, 0.0), (0.5, 0.3))]


@pytest.mark.parametrize(("w", "total", "kind", "wmr", "cmr"), COSINES)
def test_ds_cosine_matches_reference(w: int, total: int, kind: str, wmr: float, cmr: float) -> None:
    spec = {"type": "WarmupCosineLR", "total_num_steps": total, "warmup_min_ratio": wmr,
            "warmup_num_steps": w, "cos_min_ratio": cmr, "warmup_type": kind}
    _check(spec, 0.004, RefDSCosine(0.004, total, wmr, w, cmr, kind), max(w, total) + 30)


def test_ds_cosine_boundaries_by_hand() -> None:
    s = built_schedule({"type": "WarmupCosineLR", "total_num_steps": 110, "warmup_min_ratio": 0.5,
                 "warmup_num_steps": 10, "cos_min_ratio": 0.1}, 2.0)
    assert s.lr(1) == 0.0  # construction sets 0, whatever warmup_min_ratio says
    assert s.lr(2) == 1.0  # lbi 0: warmup_min_ratio * base
    assert s.lr(11) == 2.0  # lbi W-1: log(W)/log(W) = 1
    assert s.lr(61) == pytest.approx(2.0 * (0.1 + 0.9 * 0.5), rel=REL)  # half way down
    assert [s.lr(111), s.lr(112), s.lr(10_000)] == pytest.approx([0.2, 0.2, 0.2], rel=REL)


ONECYCLES: list[dict[str, Any]] = [
    {},
    {"cycle_second_step_size": 0},
    {"cycle_second_step_size": 7},
    {"cycle_first_step_size": 1},
    {"decay_step_size": 4, "decay_lr_rate": 0.5},
    {"decay_step_size": 4, "decay_lr_rate": 0.0},
    {"decay_step_size": 0, "decay_lr_rate": 0.5},
    {"decay_step_size": 3, "decay_lr_rate": 2.0, "decay_mom_rate": 0.01},
    {"cycle_momentum": False, "decay_step_size": 2, "decay_lr_rate": 1.0},
    {"cycle_first_stair_count": 5},
    {"cycle_first_stair_count": 3, "cycle_second_stair_count": 4, "cycle_second_step_size": 6},
    {"cycle_first_stair_count": -1, "cycle_second_stair_count": 0},
    {"cycle_first_stair_count": 7, "cycle_second_step_size": 13, "decay_step_size": 5,
     "decay_lr_rate": 0.1},
]


@pytest.mark.parametrize("extra", ONECYCLES)
def test_onecycle_matches_reference(extra: dict[str, Any]) -> None:
    spec = {"type": "OneCycle", "cycle_min_lr": 1e-4, "cycle_max_lr": 1e-3,
            "cycle_first_step_size": 10, "cycle_min_mom": 0.85, "cycle_max_mom": 0.99, **extra}
    params = {k: v for k, v in spec.items() if k != "type"}
    _check(spec, 0.5, RefOneCycle(params), 120)


def test_onecycle_boundaries_by_hand() -> None:
    s = built_schedule({"type": "OneCycle", "cycle_min_lr": 0.1, "cycle_max_lr": 1.1,
                 "cycle_first_step_size": 10, "decay_step_size": 5, "decay_lr_rate": 1.0,
                 "decay_mom_rate": 0.1}, 123.0)
    # construction: lr = cycle_min_lr, betas = (cycle_min_mom, 0.99)
    assert (s.lr(1), s.momentum(1)) == (0.1, 0.8)
    # the cycle itself starts momentum at cycle_max_mom, so update 2 jumps up
    assert s.lr(2) == pytest.approx(0.2, rel=REL)
    assert s.momentum(2) == pytest.approx(0.89, rel=REL)
    assert s.lr(11) == pytest.approx(1.1, rel=REL)  # peak: batch_iteration = first step size
    assert s.momentum(11) == pytest.approx(0.8, rel=REL)
    assert (s.lr(21), s.momentum(21)) == (0.1, 0.9)  # cycle end
    # continuous decay, one decay interval counted already at the first update after the cycle
    assert s.lr(22) == pytest.approx(0.1 / (1 + 1 / 5), rel=REL)
    assert s.lr(26) == pytest.approx(0.05, rel=REL)
    assert s.momentum(26) == pytest.approx(0.9 * 1.1, rel=REL)  # "decay" raises momentum
    late = s.momentum(21 + 5 * 20)
    assert late is not None and late > 1  # unbounded: past 1 for Adam's beta1


def test_onecycle_stairs_hold_lr_flat() -> None:
    s = built_schedule({"type": "OneCycle", "cycle_min_lr": 0.0, "cycle_max_lr": 1.0,
                 "cycle_first_step_size": 10, "cycle_first_stair_count": 5}, 1.0)
    assert [s.lr(k) for k in range(1, 22)] == pytest.approx(
        [0, 0, .2, .2, .4, .4, .6, .6, .8, .8, 1, .8, .8, .6, .6, .4, .4, .2, .2, 0, 0], abs=1e-15)


def test_onecycle_without_momentum() -> None:
    s = built_schedule({"type": "OneCycle", "cycle_min_lr": 0.0, "cycle_max_lr": 1.0,
                 "cycle_momentum": False}, 1.0)
    assert all(m is None for _, _, m in S.table(s, 50))


@pytest.mark.parametrize(("w", "start"), [(0, 0.1), (1, 0.1), (5, 0.0), (30, 0.1), (30, None)])
def test_gradual_warmup_matches_reference(w: int, start: float | None) -> None:
    spec = {"type": "gradual_warmup", "warmup_steps": w, "start_lr": start}
    _check(spec, 0.4, RefGradual(0.4, 0.4 if start is None else start, w), w + 40)


def test_gradual_warmup_by_hand() -> None:
    s = built_schedule({"type": "gradual_warmup", "warmup_steps": 4, "start_lr": 0.1}, 0.5)
    assert [s.lr(k) for k in range(1, 8)] == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.5, 0.5, 0.5],
                                                           rel=REL)


def test_constant() -> None:
    s = built_schedule({"type": "constant"}, 0.25)
    assert S.table(s, 3) == [(1, 0.25, None), (2, 0.25, None), (3, 0.25, None)]


PEAK_SPECS: list[dict[str, Any]] = [
    {"type": "warmuplr", "warmup_steps": 0},
    {"type": "warmuplr", "warmup_steps": 17},
    {"type": "constant"},
    {"type": "gradual_warmup", "warmup_steps": 9, "start_lr": 0.01},
    {"type": "gradual_warmup", "warmup_steps": 9, "start_lr": 5.0},  # ramps down
    *({"type": "WarmupLR", "warmup_min_lr": 0.01, "warmup_num_steps": w, "warmup_type": k}
      for w in (1, 2, 9) for k in ("log", "linear")),
    *({"type": "WarmupDecayLR", "total_num_steps": t, "warmup_max_lr": 0.3, "warmup_num_steps": 9,
       "warmup_type": k} for t in (1, 9, 10, 11, 40) for k in ("log", "linear")),
    *({"type": "WarmupCosineLR", "total_num_steps": t, "warmup_num_steps": 9, "warmup_type": k,
       "cos_min_ratio": c} for t in (1, 9, 10, 11, 40) for k in ("log", "linear")
      for c in (0.0, 1.0)),
    *({"type": "OneCycle", "cycle_min_lr": 0.01, "cycle_max_lr": 0.2, "cycle_first_step_size": f,
       "cycle_second_step_size": s, "cycle_first_stair_count": st}
      for f in (1, 7) for s in (0, 3) for st in (0, 3)),
]


@pytest.mark.parametrize("spec", PEAK_SPECS)
def test_peak_lr_is_the_max_of_the_table(spec: dict[str, Any]) -> None:
    schedule = built_schedule(spec, 0.5)
    assert S.peak_lr(S.resolve(spec), 0.5) == max(lr for _, lr, _ in S.table(schedule, 200))


def test_peak_lr_by_hand() -> None:
    assert S.peak_lr(S.resolve({"type": "warmuplr", "warmup_steps": 25000}), 0.002) == 0.002
    assert S.peak_lr(S.resolve({"type": "OneCycle", "cycle_min_lr": 1e-4, "cycle_max_lr": 1e-3}), 9.0) == (
        pytest.approx(1e-3, rel=REL))
    assert S.peak_lr(S.resolve({"type": "WarmupLR", "warmup_max_lr": 0.01}), 9.0) == 0.01


def test_warmup_steps() -> None:
    assert S.warmup_steps(S.resolve({"type": "warmuplr"})) == 25000
    assert S.warmup_steps(S.resolve({"type": "WarmupLR"})) == 1000
    assert S.warmup_steps(S.resolve({"type": "OneCycle", "cycle_min_lr": 0, "cycle_max_lr": 1})) == 2000
    assert S.warmup_steps(S.resolve({"type": "gradual_warmup", "warmup_steps": 7})) == 7
    assert S.warmup_steps(S.resolve({"type": "constant"})) is None
    with pytest.raises(ValueError, match="type"):
        S.warmup_steps(S.resolve({"type": "nope"}))


def test_types_are_consistent() -> None:
    assert set(S.SCHEDULE_TYPES) == {"warmuplr", "onecycle", "ds_warmuplr", "ds_warmup_decay",
                                     "ds_warmup_cosine", "gradual_warmup", "wsd", "constant"}
    assert S.ALIASES == {"WarmupLR": "ds_warmuplr", "OneCycle": "onecycle",
                         "WarmupDecayLR": "ds_warmup_decay",
                         "WarmupCosineLR": "ds_warmup_cosine"}
    for name, t in S.SCHEDULE_TYPES.items():
        assert t.name == name and S.canonical_name(name) == name
        assert set(t.step_params) | set(t.lr_params) <= set(t.params)
        assert t.warmup_param is None or t.warmup_param in t.step_params
        assert all(t.params[p].kind == "int" for p in t.step_params)
    assert S.SCHEDULE_TYPES["onecycle"].drives_momentum
    assert not S.SCHEDULE_TYPES["ds_warmup_cosine"].lr_params


def test_pure_math_imports_neither_torch_nor_ray() -> None:
    code = ("import sys, scalesweep.science.schedules, scalesweep.science.scaling; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'ray'}))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"
