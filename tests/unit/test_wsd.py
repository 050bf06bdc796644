"""The warmup-stable-decay schedule (``wsd``): values, validation, scaling rules, the CLI.

There is no original class to match, so ``wsd_lambda`` below restates the schedule the way a
torch ``LambdaLR`` would hold it (the form of Hugging Face's ``get_wsd_schedule``: phases by
warmup, stable and decay lengths, ``factor * (1 - m) + m``), and ``RefLambdaLR`` steps it as
torch does: construction evaluates the lambda at step 0, each ``step()`` adds one. Update k
therefore runs at step k - 1; matching at every k proves that mapping, not just the formula.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from scalesweep.errors import ScalesweepError
from scalesweep.science import scaling
from scalesweep.science import schedules as S
from tests.support.helpers import built_schedule, cli, schedule_spec

REL = 1e-12
SHAPES = ("linear", "cosine", "1-sqrt")


# --- the reference ------------------------------------------------------------------------------


def wsd_lambda(step: int, *, warmup: int, decay: int, total: int, warmup_min_ratio: float,
               min_lr_ratio: float, decay_type: str) -> float:
    """The lr as a fraction of base after ``step`` scheduler steps (MiniCPM's WSD; 1-sqrt from
    Hägele et al. 2024: 1 - sqrt((s - decay start) / decay steps))."""
    stable = total - warmup - decay
    if step < warmup:
        return (step / warmup) * (1 - warmup_min_ratio) + warmup_min_ratio
    if step < warmup + stable:
        return 1.0
    if step < warmup + stable + decay:
        progress = (step - warmup - stable) / decay
        factor = {"linear": 1 - progress,
                  "cosine": 0.5 * (1 + math.cos(math.pi * progress)),
                  "1-sqrt": 1 - progress**0.5}[decay_type]
        return factor * (1 - min_lr_ratio) + min_lr_ratio
    return min_lr_ratio


class RefLambdaLR:
    """torch.optim.lr_scheduler.LambdaLR's stepping, for one param group."""

    def __init__(self, base: float, **params: Any) -> None:
        self.base, self.params, self.last_epoch = base, params, 0
        self.lr = base * wsd_lambda(0, **params)

    def step(self) -> None:
        self.last_epoch += 1
        self.lr = self.base * wsd_lambda(self.last_epoch, **self.params)


def spec(w: int, d: int, t: int, shape: str = "1-sqrt", m: float = 0.0,
         r0: float = 0.0) -> dict[str, Any]:
    return {"type": "wsd", "warmup_steps": w, "decay_steps": d, "total_steps": t,
            "decay_type": shape, "min_lr_ratio": m, "warmup_min_ratio": r0}


def reference_rows(base: float, w: int, d: int, t: int, shape: str, m: float, r0: float,
                   n: int) -> list[float]:
    ref = RefLambdaLR(base, warmup=w, decay=d, total=t, warmup_min_ratio=r0, min_lr_ratio=m,
                      decay_type=shape)
    out = []
    for _ in range(n):
        out.append(ref.lr)
        ref.step()
    return out


# --- values -------------------------------------------------------------------------------------


CASES = [(w, d, t, shape, m, r0)
         for w, d, t in ((10, 20, 100), (0, 5, 5), (0, 1, 1), (3, 7, 10), (1, 1, 3), (7, 13, 37))
         for shape in SHAPES for m in (0.0, 0.1) for r0 in (0.0, 0.25)]


@pytest.mark.parametrize(("w", "d", "t", "shape", "m", "r0"), CASES)
def test_matches_the_lambdalr_reference_at_every_update(w: int, d: int, t: int, shape: str,
                                                         m: float, r0: float) -> None:
    base, n = 0.004, t + 20
    rows = S.table(built_schedule(spec(w, d, t, shape, m, r0), base), n)
    assert [k for k, _, _ in rows] == list(range(1, n + 1))
    assert [lr for _, lr, _ in rows] == pytest.approx(
        reference_rows(base, w, d, t, shape, m, r0, n), rel=REL, abs=0)
    assert all(mom is None for _, _, mom in rows)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("m", [0.0, 0.1])
def test_every_phase_boundary_by_hand(shape: str, m: float) -> None:
    """W = 10, D = 20, T = 100, so the decay starts after S = 80 updates."""
    base, w, d, t, r0 = 2.0, 10, 20, 100, 0.25
    s = built_schedule(spec(w, d, t, shape, m, r0), base)

    def shape_at(p: float) -> float:  # written apart from the schedule's own
        return {"linear": 1 - p, "cosine": (1 + math.cos(math.pi * p)) / 2,
                "1-sqrt": 1 - math.sqrt(p)}[shape]

    def decayed(p: float) -> float:
        return base * m + (base - base * m) * shape_at(p)

    assert s.lr(1) == base * r0  # update 1: step 0 of the warmup, the start ratio exactly
    assert s.lr(2) == pytest.approx(base * (r0 + (1 - r0) / w), rel=REL)
    # the warmup's last update (step W-1) is still one warmup step short of base
    assert s.lr(w) == pytest.approx(base * (r0 + (1 - r0) * (w - 1) / w), rel=REL)
    assert s.lr(w + 1) == base  # the first update at base: exactly
    assert s.lr(50) == base
    assert s.lr(t - d) == base  # the last stable update
    assert s.lr(t - d + 1) == base  # the decay's first update: progress 0, exactly base
    assert s.lr(t - d + 2) == pytest.approx(decayed(1 / d), rel=REL)
    assert s.lr(t - d + 2) < base
    assert s.lr(t - d + 11) == pytest.approx(decayed(0.5), rel=REL)
    # the run's last update (step T-1): one decay step above the minimum
    assert s.lr(t) == pytest.approx(decayed((d - 1) / d), rel=REL)
    assert s.lr(t) > base * m
    # from update T+1 on: min_lr_ratio x base, exactly (0 when m = 0)
    for k in (t + 1, t + 2, 10 * t):
        assert s.lr(k) == base * m
    assert s.momentum(1) is None and s.momentum(t + 1) is None


def test_one_sqrt_is_haegele_et_al() -> None:
    """lr = base (1 - sqrt((k - decay start) / decay steps)) with k counted in steps from 0."""
    s = built_schedule(spec(0, 100, 400, "1-sqrt"), 1.0)
    for step in (300, 301, 325, 364, 399):
        assert s.lr(step + 1) == pytest.approx(1 - math.sqrt((step - 300) / 100), rel=REL)
    assert s.lr(326) == pytest.approx(0.5, rel=REL)  # a quarter of the decay: half the lr


def test_edges() -> None:
    nowarm = built_schedule(spec(0, 2, 4, "linear"), 1.0)
    assert [nowarm.lr(k) for k in range(1, 7)] == [1.0, 1.0, 1.0, 0.5, 0.0, 0.0]
    nostable = built_schedule(spec(2, 2, 4, "linear", m=0.5), 1.0)  # decay right after the warmup
    assert [nostable.lr(k) for k in range(1, 7)] == [0.0, 0.5, 1.0, 0.75, 0.5, 0.5]
    alldecay = built_schedule(spec(0, 4, 4, "linear"), 1.0)
    assert [alldecay.lr(k) for k in range(1, 6)] == [1.0, 0.75, 0.5, 0.25, 0.0]
    flat = built_schedule(spec(0, 4, 8, "cosine", m=1.0), 0.3)  # min ratio 1: no decay at all
    assert {flat.lr(k) for k in range(1, 20)} == {0.3}
    assert built_schedule(spec(1, 1, 3), 0.0).lr(2) == 0.0  # base 0 stays 0


def test_defaults_decay_to_zero_along_1_sqrt_from_zero() -> None:
    minimal = {"type": "wsd", "warmup_steps": 4, "decay_steps": 4, "total_steps": 12}
    assert S.validate(minimal) == []
    got = S.table(built_schedule(minimal, 1.0), 14)
    assert got == S.table(built_schedule(spec(4, 4, 12, "1-sqrt", 0.0, 0.0), 1.0), 14)
    assert got[0][1] == 0.0 and got[-1][1] == 0.0


@pytest.mark.parametrize(("w", "d", "t"), [(10, 20, 100), (0, 5, 5), (3, 7, 10), (9, 1, 10)])
@pytest.mark.parametrize("shape", SHAPES)
def test_peak_lr_is_base_and_the_max_of_the_table(w: int, d: int, t: int, shape: str) -> None:
    sp = spec(w, d, t, shape, 0.1, 0.5)
    assert S.peak_lr(schedule_spec(sp), 0.7) == 0.7
    assert S.peak_lr(schedule_spec(sp), 0.7) == max(
        lr for _, lr, _ in S.table(built_schedule(sp, 0.7), t + 5))


def test_declared_like_the_other_schedules() -> None:
    kind = S.SCHEDULE_TYPES["wsd"]
    assert S.canonical_name("wsd") == "wsd"
    assert kind.warmup_param == "warmup_steps"
    # every count in updates, so "scaled" rescales all of them (as ds_warmup_cosine's total)
    assert set(kind.step_params) == {"warmup_steps", "decay_steps", "total_steps"}
    assert kind.lr_params == () and kind.uses_optimizer_lr and not kind.drives_momentum
    assert kind.reads_optimizer_lr({})
    assert S.warmup_steps(schedule_spec(spec(7, 3, 20))) == 7
    assert S.warmup_steps(schedule_spec({"type": "wsd", "warmup_steps": 0, "decay_steps": 1,
                                 "total_steps": 1})) == 0


# --- validation ---------------------------------------------------------------------------------


GOOD = {"type": "wsd", "warmup_steps": 10, "decay_steps": 20, "total_steps": 100}


@pytest.mark.parametrize(
    ("change", "field", "rule"),
    [
        ({"warmup_steps": None}, "warmup_steps", "is required by wsd"),
        ({"decay_steps": None}, "decay_steps", "is required by wsd"),
        ({"total_steps": None}, "total_steps", "is required by wsd"),
        ({"warmup_steps": -1}, "warmup_steps", "must be >= 0"),
        ({"decay_steps": 0}, "decay_steps", "must be >= 1"),
        ({"total_steps": 0}, "total_steps", "must be >= 1"),
        ({"total_steps": 100.0}, "total_steps", "must be an integer (a count of optimizer updates)"),
        ({"warmup_steps": True}, "warmup_steps", "must be an integer"),
        ({"decay_steps": "20"}, "decay_steps", "must be an integer"),
        ({"min_lr_ratio": 1.5}, "min_lr_ratio", "must be <= 1"),
        ({"min_lr_ratio": -0.1}, "min_lr_ratio", "must be >= 0"),
        ({"min_lr_ratio": None}, "min_lr_ratio", "must not be null"),
        ({"min_lr_ratio": float("nan")}, "min_lr_ratio", "must be a finite number"),
        ({"warmup_min_ratio": 2}, "warmup_min_ratio", "must be <= 1"),
        ({"decay_type": "exp"}, "decay_type", "must be one of 'linear', 'cosine', '1-sqrt'"),
        ({"decay_type": "sqrt"}, "decay_type", "must be one of"),  # Hugging Face's older name
        ({"decay_fraction": 0.2}, "decay_fraction", "unknown parameter of wsd; known: "
                                                    "warmup_steps, decay_steps, total_steps"),
        # the phases may not overlap: warmup + decay <= total
        ({"decay_steps": 101}, "decay_steps", "must be <= total_steps (100)"),
        ({"warmup_steps": 81}, "warmup_steps", "must be <= total_steps - decay_steps (80)"),
        ({"warmup_steps": 0, "decay_steps": 20, "total_steps": 19}, "decay_steps",
         "must be <= total_steps (19)"),
    ],
)
def test_bad_params_name_the_field_the_value_and_the_rule(change: dict[str, Any], field: str,
                                                          rule: str) -> None:
    bad = {**GOOD, **change}
    problems = S.validate(bad)
    assert [p.field for p in problems] == [field], problems
    assert problems[0].value is bad[field]
    assert problems[0].rule.startswith(rule), problems[0].rule
    with pytest.raises(ValueError, match=rf"invalid schedule: {field} = {bad[field]!r}: "):
        built_schedule(bad, 0.1)


def test_every_problem_at_once_and_the_limits_themselves_are_fine() -> None:
    bad = {"type": "wsd", "warmup_steps": -1, "decay_type": "exp", "min_lr_ratio": 2}
    assert sorted(p.field for p in S.validate(bad)) == [
        "decay_steps", "decay_type", "min_lr_ratio", "total_steps", "warmup_steps"]
    for ok in (spec(80, 20, 100), spec(0, 100, 100), spec(0, 1, 1, m=1.0, r0=1.0),
               spec(99, 1, 100, m=0.0, r0=0.0)):
        assert S.validate(ok) == [], ok


# --- lr and warmup rules ------------------------------------------------------------------------


def _apply(sp: dict[str, Any], rule: Any, gb: int, ref: int = 32, factor: float = 1.0,
           run_updates: int | None = None) -> tuple[dict[str, Any], float, list[str]]:
    return scaling.apply(schedule_spec(sp), 0.1, lr_factor=factor, warmup_rule=rule, global_batch=gb,
                         reference_global_batch=ref, run_updates=run_updates)


def test_scaled_rule_rescales_all_three_counts() -> None:
    out, lr, notes = _apply(spec(38, 77, 384, "linear", 0.1), "scaled", 64, factor=2.0)
    assert lr == pytest.approx(0.2, rel=REL)  # relative schedule: the optimizer lr scales
    # 38 x 1/2 = 19; 384 -> 192; the decay starts at 307 x 1/2 = 153.5 -> 154, so 38 remain
    # (38.5 rounded on its own would be 39)
    assert (out["warmup_steps"], out["decay_steps"], out["total_steps"]) == (19, 38, 192)
    assert (out["min_lr_ratio"], out["decay_type"], out["warmup_min_ratio"]) == (0.1, "linear", 0.0)
    assert notes == [
        "optimizer.lr 0.1 -> 0.2 (x 2)",
        "scheduler.warmup_steps 38 -> 19 (scaled x 32/64)",
        "scheduler.total_steps 384 -> 192 (scaled x 32/64)",
        "scheduler.decay_steps 77 -> 38 (scaled x 32/64: total_steps minus the scaled decay "
        "start 307 -> 154)",
    ]
    out, _, _ = _apply(spec(38, 77, 384), "scaled", 16)  # half the reference batch: x 2
    assert (out["warmup_steps"], out["decay_steps"], out["total_steps"]) == (76, 154, 768)


def _rounded(n: int, gb: int) -> int:
    return max(min(n, 1), math.floor(n * 32 / gb + 0.5))


def test_scaled_rule_never_overlaps_warmup_and_decay() -> None:
    """Rounding each count on its own would give 13 + 38 > 50 here. The phases stay apart for
    every valid schedule unless the warmup alone rounds to the whole (scaled) run, which leaves
    no update for a decay; then the plan refuses it. The decay is never more than one update
    off its own rounding."""
    out, _, _ = _apply(spec(25, 75, 100), "scaled", 64)
    assert (out["warmup_steps"], out["decay_steps"], out["total_steps"]) == (13, 37, 50)
    refused = 0
    for t in (1, 2, 3, 5, 17, 100):
        for d in range(1, t + 1):
            for w in range(t - d + 1):
                for gb in (16, 48, 64, 96, 128, 512):
                    if _rounded(w, gb) >= 1 and _rounded(w, gb) == _rounded(t, gb):
                        refused += 1
                        with pytest.raises(ValueError, match="warmup_rule='scaled' makes the "
                                           "schedule invalid: warmup_steps = "):
                            _apply(spec(w, d, t), "scaled", gb)
                        continue
                    out, _, _ = _apply(spec(w, d, t), "scaled", gb)
                    assert S.validate(out) == [], (w, d, t, gb, out)
                    assert out["warmup_steps"] == _rounded(w, gb)
                    assert out["total_steps"] == _rounded(t, gb)
                    assert abs(out["decay_steps"] - _rounded(d, gb)) <= 1
    assert refused > 0
    # a realistic one is refused only where the decay is shorter than one scaled update
    with pytest.raises(ValueError, match=r"warmup_steps = 250: must be <= total_steps - "
                                         r"decay_steps \(249\)"):
        _apply(spec(999, 1, 1000), "scaled", 128)


def test_fixed_and_explicit_rules() -> None:
    out, _, notes = _apply(spec(38, 77, 384), "fixed", 128)
    assert out == {**spec(38, 77, 384), "type": "wsd"} and notes == []
    out, _, notes = _apply(spec(38, 77, 384), 100, 128)  # an explicit warmup sets only it
    assert (out["warmup_steps"], out["decay_steps"], out["total_steps"]) == (100, 77, 384)
    assert notes == ["scheduler.warmup_steps 38 -> 100 (explicit)"]
    with pytest.raises(ValueError, match=r"warmup_rule=308 makes the schedule invalid: "
                                         r"warmup_steps = 308: must be <= total_steps - "
                                         r"decay_steps \(307\)"):
        _apply(spec(38, 77, 384), 308, 128)


SWEEP = """\
name: wsd_rules
workload: {name: mlp_regression}
reference: {world_size: 2}
target: {metric: dev_loss, relative_to_baseline: 0.10}
baseline: {world_size: 2, warmup_rule: fixed, scaling_rule: none}
backend: simulate
optimizer: {type: sgd, lr: 0.05, momentum: 0.9}
# total_steps = the run at the reference: 2048 samples / (2 x 16) = 64 updates/epoch x 6
scheduler: {type: wsd, warmup_steps: 38, decay_steps: 77, total_steps: 384, min_lr_ratio: 0.1}
training: {per_worker_batch: 16, epochs: 6}
axes:
  world_size: [2, 4, 8]
  warmup_rule: [fixed, scaled, 5]
  scaling_rule: [none, linear, sqrt]
  seed: [0]
"""


def test_plan_applies_the_lr_and_warmup_rules(cwd: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    (cwd / "wsd.yaml").write_text(SWEEP)
    rows = json.loads(cli(["plan", "wsd.yaml", "--json"], capsys))
    assert {r["scheduler"] for r in rows} == {"wsd"}
    base = 0.05
    seen = set()
    for r in rows:
        ws, rule, warm = r["world_size"], r["scaling_rule"], r["warmup_rule"]
        k = ws / 2
        seen.add((ws, warm, rule))
        # the peak of wsd is the (scaled) optimizer lr itself
        want = {"none": 1.0, "linear": k, "sqrt": math.sqrt(k)}[rule] * base
        assert r["peak_lr"] == pytest.approx(want, rel=REL)
        assert r["lr"] == pytest.approx(want, rel=REL)
        scheduler_notes = sorted(n for n in r["notes"] if n.startswith("scheduler."))
        if warm == "fixed" or (warm == "scaled" and ws == 2):
            assert r["warmup_steps"] == 38 and scheduler_notes == []
        elif warm == "scaled":
            total, start = {4: (192, 154), 8: (96, 77)}[ws]  # decay start 307 x 2/ws
            warmup = {4: 19, 8: 10}[ws]  # 38 x 2/4 = 19; 38 x 2/8 = 9.5 -> 10
            assert r["warmup_steps"] == warmup
            assert r["total_updates"] == total  # the decay ends with the run, as at ws 2
            how = f"scaled x 32/{32 * ws // 2}"
            assert scheduler_notes == [
                f"scheduler.decay_steps 77 -> {total - start} ({how}: total_steps minus the "
                f"scaled decay start 307 -> {start})",
                f"scheduler.total_steps 384 -> {total} ({how})",
                f"scheduler.warmup_steps 38 -> {warmup} ({how})",
            ]
        else:
            assert warm == 5 and r["warmup_steps"] == 5
            assert scheduler_notes == ["scheduler.warmup_steps 38 -> 5 (explicit)"]
    assert {(ws, w, s) for ws in (4, 8) for w in ("fixed", "scaled", 5)
            for s in ("none", "linear", "sqrt")} <= seen


def test_plan_refuses_an_explicit_warmup_into_the_decay(
        cwd: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from scalesweep.orchestrator.cli import main

    (cwd / "wsd.yaml").write_text(SWEEP.replace("[fixed, scaled, 5]", "[fixed, 400]"))
    capsys.readouterr()
    assert main(["plan", "wsd.yaml"]) == 2
    err = capsys.readouterr().err
    assert "axes.warmup_rule = 400" in err
    assert "warmup_steps = 400: must be <= total_steps - decay_steps (307)" in err


# --- `scalesweep lr` ----------------------------------------------------------------------------


def test_lr_preview_prints_it_without_a_momentum_column(
        cwd: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # adam has betas, so a schedule that set momentum would get the column: wsd sets none
    (cwd / "own.yaml").write_text(
        "optimizer: {type: adam, lr: 0.001}\n"
        "scheduler: {type: wsd, warmup_steps: 4, decay_steps: 8, total_steps: 20,"
        " min_lr_ratio: 0.1, decay_type: cosine}\n")
    out = cli(["lr", "own.yaml", "--updates", "24"], capsys)
    header, *lines = out.strip().split("\n")
    assert header == "update,lr"
    rows = [line.split(",") for line in lines]
    assert [int(k) for k, _ in rows] == list(range(1, 25))
    want = reference_rows(0.001, 4, 8, 20, "cosine", 0.1, 0.0, 24)
    assert [float(v) for _, v in rows] == pytest.approx(want, rel=REL, abs=0)
    assert float(rows[4][1]) == 0.001 and float(rows[23][1]) == pytest.approx(0.0001, rel=REL)


def test_lr_preview_reports_bad_params_and_exits_2(
        cwd: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from scalesweep.orchestrator.cli import main

    (cwd / "bad.yaml").write_text(
        "optimizer: {type: adam, lr: 0.001}\n"
        "scheduler: {type: wsd, warmup_steps: 15, decay_steps: 8, total_steps: 20,"
        " decay_type: exp}\n")
    capsys.readouterr()
    assert main(["lr", "bad.yaml", "--updates", "5"]) == 2
    err = capsys.readouterr().err
    assert "scheduler.decay_type = 'exp': must be one of 'linear', 'cosine', '1-sqrt'" in err
    (cwd / "bad.yaml").write_text(
        "optimizer: {type: adam, lr: 0.001}\n"
        "scheduler: {type: wsd, warmup_steps: 15, decay_steps: 8, total_steps: 20}\n")
    assert main(["lr", "bad.yaml", "--updates", "5"]) == 2
    err = capsys.readouterr().err
    assert "scheduler.warmup_steps = 15: must be <= total_steps - decay_steps (12)" in err
    (cwd / "bad.yaml").write_text("scheduler: {type: wsd, warmup_steps: 1, decay_steps: 1,"
                                  " total_steps: 2}\n")
    assert main(["lr", "bad.yaml", "--updates", "5"]) == 2  # relative: needs the optimizer lr
    assert "wsd scales the optimizer's lr" in capsys.readouterr().err


# --- a total given as auto: the trial's own length ----------------------------------------------

# decay 40: warmup + decay fit the shortest run (ws 8: 96 updates) under fixed too
AUTO_SWEEP = SWEEP.replace("total_steps: 384", "total_steps: auto").replace(
    "decay_steps: 77", "decay_steps: 40").replace("[fixed, scaled, 5]", "[fixed, scaled]")


def test_auto_total_is_every_trials_own_updates_and_the_decay_keeps_its_samples(
        cwd: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (cwd / "wsd.yaml").write_text(AUTO_SWEEP)
    rows = json.loads(cli(["plan", "wsd.yaml", "--json"], capsys))
    assert len(rows) == 2 * 2 * 3 + 1  # at the reference every rule is the same one trial
    for r in rows:
        ws, warm = r["world_size"], r["warmup_rule"]
        sched = r["trial"]["scheduler"] if "trial" in r else None
        total = 384 * 2 // ws  # 6 epochs of 2048 / (16 ws) updates
        assert r["total_updates"] == total
        if sched is not None:
            assert sched["total_steps"] == total
        decay = 40 if warm == "fixed" or ws == 2 else 40 * 2 // ws
        notes = [n for n in r["notes"] if n.startswith("scheduler.")]
        assert f"scheduler.total_steps auto -> {total} (this trial's updates)" \
            in notes, notes
        if decay != 40:
            assert f"scheduler.decay_steps 40 -> {decay} (scaled x 32/{16 * ws})" in notes


def test_auto_total_plans_the_same_lr_as_the_count_it_stands_for() -> None:
    for gb, rule in ((32, "fixed"), (64, "fixed"), (128, "scaled"), (64, 5)):
        auto, _, _ = _apply({"type": "wsd", "warmup_steps": 8, "decay_steps": 20,
                             "total_steps": "auto"}, rule, gb, run_updates=100)
        given, _, _ = _apply({"type": "wsd", "warmup_steps": 8, "decay_steps": 20,
                              "total_steps": 100}, rule if rule != "scaled" else "fixed", gb)
        if rule == "scaled":  # warmup and decay scaled x 1/4 each, the end the run's own
            assert (auto["warmup_steps"], auto["decay_steps"], auto["total_steps"]) == (2, 5, 100)
        else:
            assert auto == given
    for kind in ("ds_warmup_decay", "ds_warmup_cosine"):
        out, _, notes = scaling.apply(schedule_spec({"type": kind, "warmup_num_steps": 10,
                                             "total_num_steps": "auto"}), 0.1, lr_factor=1.0,
                                      warmup_rule="scaled", global_batch=64,
                                      reference_global_batch=32, run_updates=57)
        assert (out["warmup_num_steps"], out["total_num_steps"]) == (5, 57)
        assert "scheduler.total_num_steps auto -> 57 (this trial's updates)" in notes
        assert built_schedule(out, 0.1).lr(57) == pytest.approx(
            built_schedule({**out, "total_num_steps": 57}, 0.1).lr(57), rel=0, abs=0)


def test_auto_is_refused_where_it_cannot_be_filled_or_leaves_no_room() -> None:
    assert S.validate({"type": "wsd", "warmup_steps": 8, "decay_steps": 20,
                       "total_steps": "auto"}) == []
    bad = S.validate({"type": "wsd", "warmup_steps": 8, "decay_steps": 20, "total_steps": "most"})
    assert [(p.field, p.rule) for p in bad] == [("total_steps", "must be an integer (a count of "
                                                 "optimizer updates) or auto (the run's own "
                                                 "number of updates)")]
    assert [p.field for p in S.validate({"type": "wsd", "warmup_steps": "auto", "decay_steps": 2,
                                         "total_steps": 9})] == ["warmup_steps"]
    with pytest.raises(ValueError, match=r"total_steps = 'auto' is the run's length.*fill_auto"):
        built_schedule({"type": "wsd", "warmup_steps": 8, "decay_steps": 20, "total_steps": "auto"}, 0.1)
    with pytest.raises(scaling.AutoTotalError, match="auto needs the run's length"):
        _apply({"type": "wsd", "warmup_steps": 8, "decay_steps": 20, "total_steps": "auto"},
               "fixed", 32)
    with pytest.raises(scaling.AutoTotalError, match=r"total_steps: auto is this trial's 25 "
                       r"updates, which leaves the schedule invalid: warmup_steps = 8: must be "
                       r"<= total_steps - decay_steps \(5\)"):
        _apply({"type": "wsd", "warmup_steps": 8, "decay_steps": 20, "total_steps": "auto"},
               "fixed", 32, run_updates=25)
    # one of ours (a caller catches ScalesweepError) and still a ValueError (the planner's)
    assert issubclass(scaling.AutoTotalError, ScalesweepError)
    assert issubclass(scaling.AutoTotalError, ValueError)


def test_plan_names_the_total_when_auto_leaves_no_room(
        cwd: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from scalesweep.orchestrator.cli import main

    (cwd / "wsd.yaml").write_text(AUTO_SWEEP.replace("decay_steps: 40", "decay_steps: 150"))
    capsys.readouterr()
    assert main(["plan", "wsd.yaml"]) == 2  # ws 8, fixed: 96 updates, 38 + 150 of them
    err = capsys.readouterr().err
    assert "scheduler.total_steps = 'auto': auto is this trial's 96 updates, which leaves the " \
           "schedule invalid" in err and "world_size=8" in err


def test_lr_preview_fills_auto_with_the_updates_asked_for(
        cwd: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (cwd / "own.yaml").write_text(
        "optimizer: {type: adam, lr: 0.001}\n"
        "scheduler: {type: wsd, warmup_steps: 4, decay_steps: 8, total_steps: auto,"
        " min_lr_ratio: 0.1, decay_type: cosine}\n")
    out = cli(["lr", "own.yaml", "--updates", "20"], capsys)
    values = [float(line.split(",")[1]) for line in out.strip().split("\n")[1:]]
    assert values == pytest.approx(reference_rows(0.001, 4, 8, 20, "cosine", 0.1, 0.0, 20),
                                   rel=REL, abs=0)
