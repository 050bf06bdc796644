"""`scalesweep advise` on studies logged to a real MLflow sqlite store the way the runner does."""

from __future__ import annotations

import html
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from mlflow.entities import Metric, Param
from mlflow.tracking import MlflowClient

from scalesweep.dashboards.advice import BEST, advise, render
from scalesweep.dashboards.mlflow_data import load_study
from scalesweep.orchestrator.cli import main

DATASET = 65536
PER_WORKER = 16
REFERENCE_WS = 4


@dataclass(frozen=True)
class T:
    ws: int
    rule: str
    warmup: str
    updates: float | None  # to target; None: never reached
    seed: int = 0
    lr: float = 1e-3
    noise: float = 300.0
    ramp: str = "none"  # the batch_ramp param
    optimizer_rule: str = "none"  # the optimizer_rule param; none: not logged (no such axis)
    #: more params, as the runner logs them (optimizer, lr, warmup_steps, ...)
    extra: tuple[tuple[str, object], ...] = ()

    @property
    def batch(self) -> int:
        return self.ws * PER_WORKER

    @property
    def name(self) -> str:
        return (f"ws{self.ws}-{self.warmup}-{self.rule}-s{self.seed}-lr{self.lr:g}"
                f"{'' if self.ramp == 'none' else '-ramp' + self.ramp}"
                f"{'' if self.optimizer_rule == 'none' else '-' + self.optimizer_rule}")


def _s(batch: float) -> float:
    """linear/scaled follows S = 1000 (1 + 256 / B) exactly: B_crit = 256."""
    return 1000 * (1 + 256 / batch)


# The reference trial (ws 4, merged for every rule and for fixed/scaled warmup), linear/scaled
# with two seeds at B = 256 (mean 2000) and two lrs at B = 512 (best 1500), none/fixed barely
# scaling, linear/fixed diverging at ws 32.
STUDY = [
    T(4, "none", "fixed", _s(64), noise=280.0),
    T(8, "linear", "scaled", _s(128)),
    T(16, "linear", "scaled", 1900.0, seed=0), T(16, "linear", "scaled", 2100.0, seed=1),
    T(32, "linear", "scaled", 1500.0), T(32, "linear", "scaled", 1800.0, lr=2e-3, noise=320.0),
    T(8, "none", "fixed", 4500.0), T(16, "none", "fixed", 4200.0), T(32, "none", "fixed", 4100.0),
    T(8, "linear", "fixed", 3200.0), T(16, "linear", "fixed", 2500.0),
    T(32, "linear", "fixed", None),
    # a batch ramp to 512 reaching the target in fewer updates than any fixed batch: its
    # updates were made at 64, 128 and 512, so it must stay out of the fit (every figure below
    # would change if it counted)
    T(32, "linear", "scaled", 900.0, ramp="4:1,8:1"),
]  # fmt: skip
WENET = [T(4, "none", "fixed", 1280.0), T(16, "none", "fixed", 1000.0),
         T(16, "linear", "scaled", 400.0), T(16, "linear", "fixed", None)]  # fmt: skip
# 6 seeds of each (updates at 16 workers x 4 = epochs against 4 workers'): linear/scaled within
# 1 % of the baseline, linear with warmup 25 about 1 % slower, none/fixed about 30 % slower
WENET_SEEDS = [T(4, "none", "fixed", 1280.0 * (1 + 0.02 * s), seed=s) for s in range(6)] + [
    T(16, rule, warmup, 320.0 * (1 + 0.02 * s) * ratio * (1 + 0.004 * (s - 2.5)), seed=s)
    for rule, warmup, ratio in (("linear", "scaled", 1.0), ("linear", "25", 1.008), ("none", "fixed", 1.3))
    for s in range(6)
]  # fmt: skip


# linear/scaled with and without beta2_halflife: the rule's arm is faster at every batch but the
# reference's, which stands for both (at the reference batch the rule changes nothing)
OPTIMIZER_RULES = [
    T(4, "none", "fixed", _s(64)), *(T(ws, "linear", "scaled", _s(16 * ws)) for ws in (8, 16, 32)),
    *(T(ws, "linear", "scaled", 0.9 * _s(16 * ws), optimizer_rule="beta2_halflife") for ws in (8, 16, 32)),
]  # fmt: skip


def _artifacts(client: MlflowClient) -> str | None:
    """Artifacts beside a sqlite store (not ./mlruns in the directory pytest runs from)."""
    uri = client.tracking_uri
    return Path(uri.removeprefix("sqlite:///")).parent.joinpath("artifacts").as_uri() \
        if uri.startswith("sqlite:///") else None


def _log(client: MlflowClient, experiment: str, trials: list[T], *, noise: bool = True) -> str:
    exp = client.get_experiment_by_name(experiment)  # another parent run in it: a later sweep
    exp_id = exp.experiment_id if exp else client.create_experiment(experiment, _artifacts(client))
    parent = client.create_run(exp_id, run_name="sweep", tags={"scalesweep.role": "parent"})
    pid = parent.info.run_id
    client.log_batch(pid, params=[
        Param("target_metric", "dev_loss"), Param("target_value", "1.5"), Param("target_mode", "min"),
        Param("projection", json.dumps({"seconds_per_epoch": {"4": 400.0, "32": 60.0},
                                        "label": "test cluster"})),
    ])  # fmt: skip
    for t in trials:
        run = client.create_run(exp_id, run_name=t.name, tags={
            "mlflow.parentRunId": pid, "scalesweep.role": "trial", "trial_name": t.name,
            "status": "completed" if t.updates else "diverged"})  # fmt: skip
        upe = DATASET // t.batch
        params = {"world_size": t.ws, "global_batch": t.batch, "scaling_rule": t.rule,
                  "arm": f"ws{t.ws}-{t.warmup}-{t.rule}", "baseline_arm": "ws4-fixed-none",
                  "warmup_rule": t.warmup, "reference_global_batch": REFERENCE_WS * PER_WORKER,
                  "per_worker_batch": PER_WORKER, "accum_grad": 1, "updates_per_epoch": upe,
                  "seed": t.seed, "optimizer.lr": t.lr, "scheduler.type": "warmuplr",
                  "batch_ramp": t.ramp}
        if t.optimizer_rule != "none":
            params["optimizer_rule"] = t.optimizer_rule
        params.update(dict(t.extra))
        metrics = [Metric("best_dev_loss", 1.0, 0, 0)]
        if t.updates is not None:
            metrics += [Metric("updates_to_target", t.updates, 0, 0),
                        Metric("epochs_to_target", t.updates / upe, 0, 0),
                        Metric("samples_to_target", t.updates * t.batch, 0, 0)]
        for step in range(100, 6001, 100):
            # a dev loss falling linearly through the target 1.5 at exactly t.updates, so the
            # crossing located on the history equals the logged summary (as the driver logs it)
            loss = 2.0 - 0.5 * step / t.updates if t.updates else 2.0
            metrics += [Metric("epoch", step / upe, 0, step), Metric("dev_loss", loss, 0, step)]
            if noise:  # early values far off: only the late half counts
                metrics.append(Metric("noise_scale", t.noise if step >= 3100 else 10.0, 0, step))
        for i in range(0, len(metrics), 900):
            client.log_batch(run.info.run_id, metrics=metrics[i:i + 900])
        client.log_batch(run.info.run_id, params=[Param(k, str(v)) for k, v in params.items()])
        client.set_terminated(run.info.run_id, "FINISHED" if t.updates else "FAILED")
    client.set_terminated(pid)
    return pid


@pytest.fixture(scope="module")
def uri(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    _log(client, "scaling", STUDY)
    _log(client, "wenet", WENET, noise=False)
    _log(client, "wenet-seeds", WENET_SEEDS, noise=False)
    _log(client, "optimizer-rules", OPTIMIZER_RULES)
    yield uri


# --- invalid arguments first ----------------------------------------------------------------


def test_invalid_arguments(uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ValueError, match="world_size must be at least 1"):
        advise(load_study(uri, experiment="scaling"), 0)
    assert main(["advise", "--experiment", "scaling", "--tracking-uri", uri, "--world-size", "0"]) == 2
    assert "--world-size = 0: must be at least 1" in capsys.readouterr().err
    assert main(["advise", "--tracking-uri", uri]) == 2  # --experiment or --run-id is required
    assert main(["advise", "--experiment", "nope", "--tracking-uri", uri]) == 2  # bad input
    assert "no MLflow experiment named 'nope'" in capsys.readouterr().err
    # a parent run id the store does not hold: the same exit-2 problem for advise and predict
    for command in (["advise"], ["predict", "--world-size", "8"]):
        assert main([*command, "--run-id", "0" * 32, "--tracking-uri", uri]) == 2
        assert f"--run-id = '{'0' * 32}': no such MLflow run at {uri}" in capsys.readouterr().err


# --- behaviour ------------------------------------------------------------------------------


def test_fits_noise_scale_and_measured_recommendation(uri: str) -> None:
    advice = advise(load_study(uri, experiment="scaling"))  # default: the largest world size
    arms = {a.arm.name: a for a in advice.arms}
    assert list(arms) == ["linear/fixed", "linear/scaled", "none/fixed", BEST]
    # the reference trial counts for every arm; the median of the seeds, the better lr is taken
    assert arms["linear/scaled"].arm.updates == {64.0: 5000.0, 128.0: 3000.0, 256.0: 2000.0,
                                                  512.0: 1500.0}
    assert arms["linear/fixed"].arm.updates == {64.0: 5000.0, 128.0: 3200.0, 256.0: 2500.0,
                                                 512.0: None}
    for name in ("linear/scaled", BEST):
        fit = arms[name].fit
        assert fit is not None and arms[name].problems == []
        assert (fit.s_min, fit.b_crit, fit.r2) == pytest.approx((1000.0, 256.0, 1.0))
    # median of the late half of every non-diverged trial's noise_scale
    assert advice.noise_scale == 300.0 and advice.noise_trials == 11
    rec = advice.recommendation
    assert (advice.world_size, rec.batch, rec.arm, rec.updates, rec.measured) == (
        32, 512.0, "linear/scaled", 1500.0, True)
    text = render(advice)
    assert "recommendation for world size 32 (global batch 512 = 32 x 16): lr rule linear, " \
           "warmup rule scaled" in text
    assert "measured: 1500 updates, ≈ 11.7 epochs to target" in text
    assert "projected ≈ 0.195 h (from test cluster)" in text  # 11.72 epochs x 60 s
    assert "B_crit (best per batch) = 256 = 0.85 x B_simple" in text
    assert "gradient noise scale B_simple: 300 samples" in text


def test_prediction_and_refusal_beyond_the_measured_range(uri: str,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    advice = advise(load_study(uri, experiment="scaling"), world_size=64)
    rec = advice.recommendation
    assert (rec.arm, rec.measured) == ("linear/scaled", False)
    assert rec.updates == pytest.approx(_s(1024))
    assert rec.reasons == ["linear/fixed: never reached the target at batch 512"]
    arms = {a.arm.name: a for a in advice.arms}
    assert arms["linear/fixed"].problems == ["never reached the target at batch 512"]
    # none/fixed barely scales: B_crit ~17, below the range (flagged) but predictable
    assert any("B_crit = 16.86 lies far outside" in p for p in arms["none/fixed"].problems)
    assert main(["advise", "--experiment", "scaling", "--tracking-uri", uri,
                 "--world-size", "256"]) == 0
    out = capsys.readouterr().out
    assert "no recommendation for world size 256 (global batch 4096 = 256 x 16): the data " \
           "cannot support one." in out
    assert "target batch 4096 is more than 2x outside the measured range 64..512" in out


def test_two_world_sizes_support_no_fit(uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The WeNet shape (4 vs 16): measured at 16, nothing beyond."""
    advice = advise(load_study(uri, experiment="wenet"))
    rec = advice.recommendation
    assert (rec.arm, rec.updates, rec.measured) == ("linear/scaled", 400.0, True)
    arms = {a.arm.name: a for a in advice.arms}
    assert any("only 2 batch sizes" in p for p in arms[BEST].problems)
    assert advice.noise_scale is None
    assert main(["advise", "--experiment", "wenet", "--tracking-uri", uri, "--world-size", "8"]) == 0
    out = capsys.readouterr().out
    assert "no recommendation for world size 8" in out
    assert "gradient noise scale: not measured" in out
    assert "B_crit (best per batch) cannot be compared" not in out  # nothing to compare with
    # one seed an arm: the measured pick is named with its decision, and said to be unresolved
    text = render(advice)
    assert "  its arm ws16-scaled-linear: not resolved against the baseline, epochs ratio 1.25 n/a\n" \
           "  the pick is not resolved against the baseline: the data do not show it as fast; more " \
           "seeds would tell (adaptive replicates)\n" \
           "  the pick is not resolved against ws16-fixed-none, ws16-fixed-linear: it has no " \
           "interval (one seed), so the data do not tell which converges faster" in text


def test_report_shows_the_advice(uri: str, tmp_path: Path) -> None:
    from scalesweep.dashboards.report import build_report

    paths = build_report(uri, experiment="scaling", out_dir=tmp_path)
    text = render(advise(load_study(uri, experiment="scaling")))
    assert paths.advice.read_text(encoding="utf-8") == text + "\n"
    page = paths.html.read_text(encoding="utf-8")
    assert "<h2>Scaling advice</h2>" in page
    assert html.escape(text) in page
    assert "lr rule linear, warmup rule scaled" in page and "B_simple: 300 samples" in page


def test_measured_arms_rank_by_decision_then_the_intervals_upper_end(uri: str) -> None:
    advice = advise(load_study(uri, experiment="wenet-seeds"), world_size=16)
    assert [(a.arm, a.answer) for a in advice.decided] == [
        ("ws16-scaled-linear", "equivalent"), ("ws16-25-linear", "equivalent"),
        ("ws16-fixed-none", "slower")]
    text = render(advice)
    assert "arms measured at world size 16 against their baseline, best first" in text
    assert "  3. ws16-fixed-none: slower, epochs ratio 1.3 [1.29, 1.31]" in text
    # the first two are both equivalent and their intervals overlap: said, not hidden
    assert "ws16-scaled-linear is not resolved against ws16-25-linear: their intervals overlap" in text
    assert "is not resolved against the baseline" not in text
    # the recommendation's own arm, with its decision and what it is not resolved against
    assert "  its arm ws16-scaled-linear: equivalent against the baseline, epochs ratio 1 " \
           "[0.994, 1.01]\n  the pick is not resolved against ws16-25-linear: their intervals " \
           "overlap" in text


def test_an_optimizer_rule_is_an_arm_of_its_own_and_the_recommendation_names_it(uri: str) -> None:
    advice = advise(load_study(uri, experiment="optimizer-rules"), world_size=32)
    arms = {a.arm.name: a.arm.updates for a in advice.arms}
    # the reference trial (B = 64) counts for both; the rule's trials are not the plain arm's
    assert arms["linear/scaled"] == pytest.approx({64.0: _s(64), 128.0: _s(128), 256.0: _s(256),
                                                   512.0: _s(512)})
    assert arms["linear/scaled/beta2_halflife"] == pytest.approx(
        {64.0: _s(64), **{16.0 * ws: 0.9 * _s(16 * ws) for ws in (8, 16, 32)}})
    rec = advice.recommendation
    assert (rec.arm, rec.updates, rec.measured) == ("linear/scaled/beta2_halflife",
                                                    pytest.approx(0.9 * _s(512)), True)
    assert ("lr rule linear, warmup rule scaled, optimizer rule beta2_halflife"
            in render(advice))
