"""The low end of `solve`'s lr factor range (issue 52, item 2): from the noise scale the study
measured (read from a real MLflow store) through the optimizer's lr model, else one grid step
below 1x; the user's --lr stands; a resumed solve searches the space it started with. Through
the use case's read of the store (usecases/solve.py ``study_noise``) and the plan `solve`
prints before Ray starts (launch/solve.py ``planned``).

The quadratic study (tests/unit/test_solve.py): 1 worker at the reference, M = 4, one sample
per worker, so k = 4 and the default's sqrt rule is 2. With B_noise at the low end of the noise
scale's band (1x), the factor at M is a (x + 1) / (x + 4), a = 4 (SGD) or sqrt(4) (surge)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from mlflow.tracking import MlflowClient

from scalesweep.orchestrator.launch.solve import planned, state_plan_kwargs
from scalesweep.orchestrator.launch.solve_answer import answer
from scalesweep.orchestrator.launch.solve_search import Spent
from scalesweep.orchestrator.plan.cluster import local_cluster
from scalesweep.orchestrator.plan.solve_plan import SolvePlan, plan_solve
from scalesweep.orchestrator.spec.load import Sweep, load_sweep
from scalesweep.orchestrator.usecases.solve import study_noise
from tests.unit.test_advice import T, _log
from tests.unit.test_solve import QUADRATIC

STEP = math.sqrt(2.0)
ADAM = ["optimizer.type=adam"]


#: the store's studies, each the quadratic study's experiment under another name (--set name=)
NOISE_1, NOISE_300, NO_NOISE, ABSENT = "q-noise-1", "q-noise-300", "q-no-noise", "q-absent"


@pytest.fixture(scope="module")
def uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A store holding studies whose trials' late noise scale is 1, 300, or not measured."""
    uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"
    client = MlflowClient(uri)
    for name, noise in ((NOISE_1, 1.0), (NOISE_300, 300.0), (NO_NOISE, None)):
        trials = [T(4, "none", "fixed", 1000.0 + s, seed=s, noise=noise or 1.0) for s in range(2)]
        _log(client, name, trials, noise=noise is not None)
    return uri


def _sweep(tmp_path: Path, overrides: list[str]) -> Sweep:
    (tmp_path / "q.yaml").write_text(QUADRATIC)
    return load_sweep(str(tmp_path / "q.yaml"), overrides)


def _kwargs(lr: tuple[float, float] | None = None) -> dict[str, Any]:
    return {"world_size": 4, "budget": None, "candidates": 1, "lr": lr, "warmup": None,
            "search_seed": 0, "sampler": "tpe"}


def _planned(tmp_path: Path, uri: str, study: str, overrides: list[str] | None = None,
             lr: tuple[float, float] | None = None) -> tuple[SolvePlan, str, dict[str, Any]]:
    """The plan of the quadratic study named ``study``, the text it prints, its kwargs."""
    kwargs = _kwargs(lr)
    sweep = _sweep(tmp_path, [f"name={study}", *(overrides or [])])
    sp, lines = planned(sweep, kwargs, study_noise(uri, sweep.spec.name))
    return sp, "\n".join(lines), kwargs


@pytest.mark.parametrize(("overrides", "model", "low"), [
    pytest.param(None, "sgd", 4 * 2 / 5 / STEP, id="sgd"),  # 1.6 / sqrt(2)
    pytest.param(ADAM, "surge", 2 * 2 / 5 / STEP, id="adam"),  # 0.8 / sqrt(2)
])
def test_the_low_end_comes_from_the_measured_noise_scale_through_the_optimizers_model(
        tmp_path: Path, uri: str, overrides: list[str] | None, model: str, low: float) -> None:
    sp, text, kwargs = _planned(tmp_path, uri, NOISE_1, overrides)
    assert sp.space.lr_factor.low == pytest.approx(low, rel=1e-12)
    assert sp.space.lr_factor.high == 8.0  # twice the linear rule, unchanged
    assert sp.noise_scale == kwargs["noise_scale"] == 1.0  # what the state keeps for resume
    assert f"\n    low end: lr factor from {low:.3g}: the {model} model puts the best at" in text
    assert "(the measured noise scale 1 × 1..10); one grid step below the lowest" in text
    assert (f"\n  noise scale: 1 samples, the late-training median of the trials of study "
            f"'{NOISE_1}' (parent run ") in text
    assert sp.space_json()["lr_low_reason"] == sp.space.lr_low_reason
    assert sp.space_json()["noise_scale"] == 1.0


@pytest.mark.parametrize(("overrides", "model"), [pytest.param(None, "sgd", id="sgd"),
                                                  pytest.param(ADAM, "surge", id="adam")])
@pytest.mark.parametrize("study", [ABSENT, NO_NOISE])
def test_without_a_noise_scale_the_low_end_is_one_grid_step_below_1x(
        tmp_path: Path, uri: str, overrides: list[str] | None, model: str, study: str) -> None:
    sp, text, kwargs = _planned(tmp_path, uri, study, overrides)
    assert sp.space.lr_factor.low == pytest.approx(1 / STEP, rel=1e-12)
    assert (sp.space.lr_factor.high, sp.noise_scale, kwargs["noise_scale"]) == (8.0, None, None)
    assert "\n    low end: lr factor from 0.707: no noise scale measured" in text
    assert sp.space.lr_low_reason.endswith(f"({model} model)")
    said = (f"\n  noise scale: none measured (no study '{ABSENT}' in {uri})" if study == ABSENT
            else f"\n  noise scale: none measured by the trials of study '{NO_NOISE}' (parent run ")
    assert said in text
    # the named rule "none" (x1) now lies inside the space: the search starts there too
    assert sp.space.rule_points()["none, fixed"][0] == 1.0 >= sp.space.lr_factor.low


def test_a_noise_scale_that_puts_the_best_above_the_sqrt_rule_keeps_the_sqrt_rule(
        tmp_path: Path, uri: str) -> None:
    sp, _, _ = _planned(tmp_path, uri, NOISE_300)  # SGD: 4 * 301 / 304 = 3.96
    assert sp.space.lr_factor.low == 2.0
    assert "the default's own low end lies below that already" in sp.space.lr_low_reason


def test_the_users_range_stands_and_no_noise_scale_places_it(tmp_path: Path, uri: str) -> None:
    sp, text, kwargs = _planned(tmp_path, uri, NOISE_1, ADAM, lr=(3.0, 6.0))
    assert (sp.space.lr_factor.low, sp.space.lr_factor.high) == (3.0, 6.0)
    assert kwargs["noise_scale"] is None and sp.noise_scale is None
    assert "\n    low end: as given (--lr)\n" in text and "noise scale" not in text


def test_a_resumed_solve_searches_the_space_its_state_says(tmp_path: Path) -> None:
    state: dict[str, Any] = {**_kwargs(), "noise_scale": 1.0}
    sweep = _sweep(tmp_path, [])
    now = plan_solve(sweep, local_cluster(), **state_plan_kwargs(state))
    assert now.space.lr_factor.low == pytest.approx(4 * 2 / 5 / STEP, rel=1e-12)
    # a state written before the low end came from the lr models: the sqrt rule, as it searched
    del state["noise_scale"]
    before = plan_solve(sweep, local_cluster(), **state_plan_kwargs(state))
    assert before.space.lr_factor.low == 2.0
    assert before.space.lr_low_reason.startswith("the sqrt rule: this solve started before")


def test_the_answer_carries_the_space_and_its_reason(tmp_path: Path, uri: str) -> None:
    sp, _, _ = _planned(tmp_path, uri, NOISE_1, ADAM)
    out = answer(sp.sweep, sp, [], None, Spent(budget=10.0), {}, local_cluster())
    assert out["space"] == {"lr_factor": [pytest.approx(0.8 / STEP, rel=1e-12), 8.0],
                            "warmup": [1.0, 4.0], "lr_low_reason": sp.space.lr_low_reason,
                            "noise_scale": 1.0, "start": None}
    assert "surge model" in out["space"]["lr_low_reason"]
