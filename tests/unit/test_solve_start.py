"""`solve --start-from-recommendation`: the search's first candidate is `recommend`'s lr factor
and warmup at M, read from the study in a real MLflow store (tests/unit/test_recommend_cli.py's
Adam study: reference 4 workers x 16 samples, lr 0.5, warmup 100; N = 16 workers), through the
use case's read (usecases/solve.py ``recommended_start``), the plan `solve` prints before Ray
starts (launch/solve.py ``planned``) and the search's start points."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from mlflow.tracking import MlflowClient

import scalesweep
from scalesweep.orchestrator.launch.solve import planned, state_plan_kwargs
from scalesweep.orchestrator.launch.solve_answer import answer
from scalesweep.orchestrator.launch.solve_search import Spent, start_points
from scalesweep.orchestrator.plan.cluster import local_cluster
from scalesweep.orchestrator.plan.solve_plan import SolvePlan, StartPoint
from scalesweep.orchestrator.spec.errors import InputError
from scalesweep.orchestrator.spec.load import Sweep, load_sweep
from scalesweep.orchestrator.usecases.solve import recommended_start
from scalesweep.science.solve import GRID_STEP
from tests.unit.test_advice import _log
from tests.unit.test_recommend_cli import ADAM_STUDY

STUDY = "rec-study"
#: the recommendation study's own settings, on a workload that plans without training
SWEEP = f"""\
name: {STUDY}
workload: {{name: "tests.support.quadratic_workload:make", options: {{train_size: 65536}}}}
target: {{metric: dev_loss, value: 0.001}}
baseline: {{world_size: 4, warmup_rule: fixed, scaling_rule: none}}
reference: {{world_size: 4}}
optimizer: {{type: adam, lr: 0.5}}
scheduler: {{type: ds_warmuplr, warmup_num_steps: 100, warmup_type: linear}}
training: {{epochs: 4, eval_every_epochs: 0.0625, per_worker_batch: 16}}
replicates: {{min: 2, max: 3}}
resources: {{max_concurrent_trials: 1}}
axes:
  world_size: [4, 8]
"""


@pytest.fixture(scope="module")
def uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"
    _log(MlflowClient(uri), STUDY, ADAM_STUDY)
    return uri


def _sweep(tmp_path: Path, overrides: list[str] | None = None) -> Sweep:
    (tmp_path / "s.yaml").write_text(SWEEP)
    return load_sweep(str(tmp_path / "s.yaml"), overrides or [])


def _plan(tmp_path: Path, start: StartPoint | None, overrides: list[str] | None = None,
          world_size: int = 8, **given: Any) -> tuple[SolvePlan, str]:
    kwargs = {"world_size": world_size, "budget": None, "candidates": 1, "lr": None,
              "warmup": None, "search_seed": 0, "sampler": "tpe", "start": start, **given}
    sp, lines = planned(_sweep(tmp_path, overrides), kwargs, None)
    return sp, "\n".join(lines)


def test_the_search_starts_at_the_recommendation(tmp_path: Path, uri: str) -> None:
    rec = scalesweep.recommend(STUDY, world_size=8, tracking_uri=uri)
    start = recommended_start(uri, STUDY, 8)
    assert (start.lr_factor, start.lr_factor_ci, start.warmup, start.global_batch) == (
        rec.lr_factor, rec.recipe.lr.ci, rec.warmup_steps, 128.0)
    assert start.reference_lr == 0.5 and start.source.startswith(
        f"recommended from study '{STUDY}' (parent run {rec.parent_run_id}) at N = 16 workers")
    sp, text = _plan(tmp_path, start)
    assert sp.first is not None
    factor = float(f"{rec.lr_factor:.3g}")  # as every candidate's factor is kept
    assert (sp.first.lr_factor, sp.first.warmup, sp.first.widened) == (factor, rec.warmup_steps, ())
    # first, then the named rules' points inside the space, as a search without it starts
    assert start_points(sp) == [{"lr_factor": factor, "warmup": rec.warmup_steps},
                                {"lr_factor": 1.0, "warmup": 100},
                                {"lr_factor": math.sqrt(2), "warmup": 50},
                                {"lr_factor": 2.0, "warmup": 50}]
    assert f"\n  starts at the recommendation: lr x{factor:g}, warmup {rec.warmup_steps} updates, " \
           "the search's first candidate (its lr factor interval" in text
    # the space is the one it had without the recommendation: it holds the point
    assert sp.space == _plan(tmp_path, None)[0].space
    # recorded: --json's space.start, and the state a resume plans from
    assert sp.space_json()["start"] == {"lr_factor": factor, "warmup": rec.warmup_steps,
                                        "widened": [], "recommendation": start.as_json()}
    out = answer(sp.sweep, sp, [], None, Spent(budget=10.0), {}, local_cluster())
    assert out["space"]["start"] == sp.space_json()["start"]
    state = {"world_size": 8, "budget": None, "candidates": 1, "lr": None, "warmup": None,
             "search_seed": 0, "sampler": "tpe", "noise_scale": None, "start": start.as_json()}
    kwargs = state_plan_kwargs(state)
    assert kwargs["start"] == start
    assert planned(sp.sweep, kwargs, None)[0].first == sp.first


def test_a_start_without_the_flag_is_the_named_rules(tmp_path: Path) -> None:
    sp, text = _plan(tmp_path, None)
    assert sp.first is None and "starts at the recommendation" not in text
    assert start_points(sp)[0] == {"lr_factor": 1.0, "warmup": 100}
    state = {"world_size": 8, "budget": None, "candidates": 1, "lr": None, "warmup": None,
             "search_seed": 0, "noise_scale": None}
    assert state_plan_kwargs(state)["start"] is None  # a state written before the flag


def _start(factor: float, warmup: int = 50, reference_lr: float | None = 0.5,
           batch: float = 128.0) -> StartPoint:
    return StartPoint(lr_factor=factor, lr_factor_ci=(None, None), reference_lr=reference_lr,
                      warmup=warmup, global_batch=batch, source="by hand")


def test_the_factor_is_over_the_solves_reference_lr(tmp_path: Path) -> None:
    # the study tuned 0.5 at the reference, the sweep 0.25: x1.3 of 0.5 is x2.6 of 0.25
    sp, _ = _plan(tmp_path, _start(1.3), ["optimizer.lr=0.25"])
    assert sp.first is not None and sp.first.lr_factor == 2.6
    sp, _ = _plan(tmp_path, _start(1.3, reference_lr=None), ["optimizer.lr=0.25"])
    assert sp.first is not None and sp.first.lr_factor == 1.3  # not logged: taken as the same lr


def test_a_default_range_is_widened_to_hold_the_recommendation(tmp_path: Path) -> None:
    # default at k = 2: lr 1/sqrt(2)..4, warmup 12.5..200
    sp, text = _plan(tmp_path, _start(0.3, warmup=400))
    assert sp.first is not None and sp.first.widened == ("lr", "warmup")
    assert (sp.space.lr_factor.low, sp.space.lr_factor.high) == (pytest.approx(0.3 / GRID_STEP), 4.0)
    assert (sp.space.warmup.low, sp.space.warmup.high) == (12.5, pytest.approx(400 * GRID_STEP))
    assert "; the lr range widened to one grid step past it; the warmup range widened" in text
    assert start_points(sp)[0] == {"lr_factor": 0.3, "warmup": 400}


@pytest.mark.parametrize(("start", "given", "says"), [
    pytest.param(_start(5.0), {"lr": (1.0, 4.0)}, ("--lr", "1,4", "does not hold the "
                 "recommendation's lr 5 that --start-from-recommendation starts at"), id="outside-lr"),
    pytest.param(_start(1.3, warmup=300), {"warmup": (10.0, 200.0)}, ("--warmup", "10,200",
                 "does not hold the recommendation's warmup 300"), id="outside-warmup"),
    pytest.param(_start(1.3), {"sampler": "grid"}, ("--start-from-recommendation",
                 "does not apply to --sampler grid"), id="grid"),
    pytest.param(_start(1.3, batch=256.0), {}, ("--start-from-recommendation", "global batch 256",
                 "for another global batch than the solve's at M (128)"), id="other-batch"),
])
def test_a_recommendation_the_solve_cannot_start_at_is_refused(
        tmp_path: Path, start: StartPoint, given: dict[str, Any], says: tuple[str, ...]) -> None:
    with pytest.raises(InputError) as e:
        _plan(tmp_path, start, **given)
    assert all(s in str(e.value) for s in says), str(e.value)


def test_a_study_that_cannot_recommend_is_refused_before_anything_starts(uri: str) -> None:
    with pytest.raises(InputError) as e:
        recommended_start(uri, "no-such-study", 8)
    assert "no-such-study" in str(e.value)
