"""A user's own Ray Train loop as the workload (``workload: {train_loop: ...}``), without Ray:
what the sweep file must say (exit 2 naming field, value and rule, before anything starts),
what the plan makes of it, the config the loop receives, and the checks every report passes
on its way to MLflow (scalesweep.trainables.user_loop.ReportChecker)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from scalesweep.orchestrator.cli import main
from scalesweep.orchestrator.plan.loop_config import loop_config
from scalesweep.orchestrator.plan.rows import PLAN_FIELDS, make_plan
from scalesweep.orchestrator.spec.load import load_sweep
from scalesweep.science import schedules
from scalesweep.trainables.config import loop_schedule
from scalesweep.trainables.user_loop import (
    LoopReportError,
    ReportChecker,
    TrainLoopError,
    resolve_train_loop,
)
from tests.support.helpers import SWEEPS

OWN_LOOP = SWEEPS / "own_loop.yaml"
LOOP = "examples.ddp_demo_loop:train_loop_per_worker"


def _sweep(tmp_path: Path, **changes: Any) -> Path:
    data = yaml.safe_load(OWN_LOOP.read_text(encoding="utf-8"))
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def _refused(path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["plan", str(path)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


# -- the sweep file ------------------------------------------------------------------------


@pytest.mark.parametrize(("loop", "expect"), [
    ("no_such_package.loops:train", ("workload.train_loop", "'no_such_package.loops:train'",
                                     "cannot import module 'no_such_package.loops'",
                                     "ModuleNotFoundError")),
    ("examples.ddp_demo_loop:no_such_function", ("workload.train_loop",
                                                 "has no attribute 'no_such_function'")),
    ("tests.support.user_loops:NOT_CALLABLE", ("workload.train_loop",
                                               "'tests.support.user_loops:NOT_CALLABLE'",
                                       "is a int, not a callable train_loop_per_worker(config)")),
    ("examples.ddp_demo_loop", ("workload.train_loop", "must be 'package.module:function'")),
])
def test_a_loop_that_cannot_be_called_is_refused_before_anything_starts(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], loop: str, expect: tuple[str, ...],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    err = _refused(_sweep(tmp_path, workload={"train_loop": loop, "train_size": 2048}), capsys)
    for text in expect:
        assert text in err
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "scalesweep_runs").exists()


def test_run_refuses_an_unimportable_loop_before_ray_starts(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    path = _sweep(tmp_path, workload={"train_loop": "no_such_package:train", "train_size": 64})
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert "workload.train_loop" in err and "cannot import module 'no_such_package'" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sweep.yaml"]  # no Ray, no MLflow


def test_a_loop_in_the_working_directory_off_the_python_path_is_told_how_to_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the console script `scalesweep` leaves the working directory off sys.path (#34 item 3c)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "__init__.py").write_text("")
    (tmp_path / "mine" / "loops.py").write_text("def train(config):\n    pass\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    with pytest.raises(TrainLoopError) as info:
        resolve_train_loop("mine.loops:train")
    assert str(info.value).startswith("cannot import module 'mine.loops' (ModuleNotFoundError")
    assert (f"'mine' is in the working directory {str(tmp_path)!r}, which is not on the Python "
            "path: run `python -m scalesweep ...` from there, or set PYTHONPATH=.") in str(info.value)
    with pytest.raises(TrainLoopError, match=r"is 'elsewhere' installed \(pip install -e \.\), or "
                                             r"its directory on the Python path"):
        resolve_train_loop("elsewhere.loops:train")
    with pytest.raises(TrainLoopError, match=r"^'mine/loops.py' is a file: give the module it is, "
                                             r"imported from a directory on the Python path: "
                                             r"'mine.loops:train'"):
        resolve_train_loop("mine/loops.py:train")
    monkeypatch.syspath_prepend(str(tmp_path))  # python -m puts it there: the loop is found
    assert callable(resolve_train_loop("mine.loops:train"))


def test_a_loop_without_its_training_set_size_is_refused_naming_the_rule(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = _refused(_sweep(tmp_path, workload={"train_loop": LOOP}), capsys)
    assert "workload.train_size" in err and "None" in err
    assert "a train_loop must give its training-set size" in err
    assert "updates per epoch" in err and "floor(ceil(N / world_size)" in err


@pytest.mark.parametrize(("changes", "expect"), [
    ({"backend": "simulate"}, ("backend", "'simulate'", "use ddp (or auto)",
                               "scalesweep.loop_helpers.VirtualRanks")),
    ({"training": {"per_worker_batch": 32, "epochs": 3, "batch_ramp": "1:1"}},
     ("training.batch_ramp", "'1:1'", "ramps need a workload of the protocol")),
    ({"workload": {"train_loop": LOOP, "name": "mlp_regression"}},
     ("workload", "give exactly one of name", "or train_loop")),
    ({"workload": {"name": "mlp_regression", "train_size": 100}},
     ("workload", "train_size belong to a train_loop")),
    ({"workload": {"train_loop": LOOP, "train_size": 2048, "metrics": {"accuracy": "max"}}},
     ("workload.metrics", "must include loss")),
    ({"target": {"metric": "dev_accuracy", "value": 0.9}},
     ("target.metric", "'dev_accuracy'", "reports ['train_loss', 'dev_loss']")),
])
def test_what_a_loop_cannot_do_is_refused_by_name(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], changes: dict[str, Any],
        expect: tuple[str, ...]) -> None:
    err = _refused(_sweep(tmp_path, **changes), capsys)
    for text in expect:
        assert text in err


# -- the plan and the loop's config ----------------------------------------------------------


def test_a_loop_runs_ddp_on_one_worker_per_virtual_rank_by_default(tmp_path: Path) -> None:
    plan = make_plan(load_sweep(_sweep(tmp_path, backend=None)))  # no backend: ddp, not simulate
    assert [(r.world_size, r.backend, r.physical_workers) for r in plan.rows] == [
        (1, "ddp", 1), (2, "ddp", 2)]
    assert {r.trial.train_loop for r in plan.rows} == {LOOP}
    assert {r.trial.workload for r in plan.rows} == {LOOP}
    auto = make_plan(load_sweep(_sweep(tmp_path, backend="auto", physical_workers=1)))
    assert [(r.backend, r.physical_workers) for r in auto.rows] == [("ddp", 1)] * 2
    assert "backend auto -> ddp (a train_loop runs on Ray Train workers)" in auto.rows[0].notes
    assert any("the train_loop must play the virtual ranks" in n for n in auto.rows[1].notes)


def test_a_loops_ray_train_run_is_named_by_its_trial_so_a_resume_restores_it(
        tmp_path: Path) -> None:
    """Ray Train V2 restores the run it finds under the same name: a train_loop's run name
    must not carry the Tune trial id, which a resumed sweep changes."""
    from scalesweep.trainables.trial_driver import run_name

    loop_trial = make_plan(load_sweep(_sweep(tmp_path))).rows[0].trial
    assert run_name(loop_trial, "abc_00000") == run_name(loop_trial, "def_00001") == loop_trial.name
    builtin = loop_trial.model_copy(update={"train_loop": None})
    assert run_name(builtin, "abc_00000") == f"{loop_trial.name}-abc_00000"


def test_settings_only_the_builtin_loop_acts_on_are_noted(tmp_path: Path) -> None:
    training = {"per_worker_batch": 32, "epochs": 3, "dtype": "float64", "checkpoint_every": 8}
    sweep = load_sweep(_sweep(tmp_path, training=training))
    assert [n for n in sweep.notes if "built-in loop" in n] == [
        f"training.dtype, training.checkpoint_every: the built-in loop's settings; the "
        f"train_loop {LOOP} runs as it is written (its config has grad_clip)"]
    assert not [n for n in load_sweep(OWN_LOOP).notes if "built-in loop" in n]


def test_the_loops_config_is_its_plan_row_with_the_resolved_optimizer_and_schedule(
        tmp_path: Path) -> None:
    sweep = load_sweep(OWN_LOOP, ["axes.seed=[0, 1]"])
    plan = make_plan(sweep)
    row = next(r for r in plan.rows if r.world_size == 2 and r.seed == 1)
    config = loop_config(row, sweep.workload.train_size())
    assert set(PLAN_FIELDS) | {"lr", "axes", "notes"} <= set(config)
    same = [k for k in PLAN_FIELDS if k != "scheduler"]  # the spec in place of its name
    assert {k: config[k] for k in same} == {k: row.to_json()[k] for k in same}
    # the lr rule (linear x 2) and the warmup rule (scaled x 32/64) applied
    assert config["optimizer"] == {"type": "sgd", "lr": 0.1, "momentum": 0.9}
    assert config["scheduler"] == {"type": "warmuplr", "warmup_steps": 8}
    assert config["scheduler"]["type"] == row.scheduler
    assert "schedule" not in config  # one key holds the schedule (docs/workloads.md)
    assert (config["world_size"], config["global_batch"], config["per_worker_batch"],
            config["accum_grad"], config["seed"]) == (2, 64, 32, 1, 1)
    assert (config["updates_per_epoch"], config["total_updates"], config["eval_every"],
            config["warmup_steps"], config["lr"], config["peak_lr"]) == (32, 96, 8, 8, 0.1, 0.1)
    assert config["train_size"] == 2048 and config["options"] == {}
    assert json.loads(json.dumps(config)) == config  # travels through Ray as plain data
    built = schedules.build(loop_schedule(config), config["optimizer"]["lr"])
    assert built.lr(8) == pytest.approx(0.1) and built.lr(4) == pytest.approx(0.05)


# -- every report, checked -----------------------------------------------------------------


def _checker() -> ReportChecker:
    checker = ReportChecker(trial="ws2-s0", train_loop="pkg.loops:train", updates_per_epoch=8,
                            global_batch=64)
    checker.start(100.0)
    return checker


def test_a_report_is_completed_with_the_clocks_it_lacks() -> None:
    checker = _checker()
    out = checker.check({"update": 4, "dev_loss": 0.5, "dev_accuracy": 0.7}, clock=102.5)
    assert out == {"update": 4, "dev_loss": 0.5, "dev_accuracy": 0.7, "epoch": 0.5,
                   "samples_seen": 256.0, "wall_s": 2.5}
    assert isinstance(out["update"], int)
    kept = checker.check({"update": 8.0, "dev_loss": 0.4, "epoch": 0.9, "wall_s": 7.0}, clock=110)
    assert (kept["update"], kept["epoch"], kept["wall_s"]) == (8, 0.9, 7.0)
    final = checker.finish()
    assert final["status"] == "completed" and final["update"] == 8 and final["train_seconds"] == 7.0
    checker.start(200.0)  # the worker group restarted: updates may begin again, and the
    # trial's clock goes on from its last report (7.0 s), not from 0
    assert checker.check({"update": 1, "dev_loss": 0.9}, clock=201)["wall_s"] == 8.0


def test_a_resumed_trials_clock_goes_on_from_what_mlflow_has() -> None:
    """A sweep resumed by a new driver: the trial's evals in MLflow reached 10 s of training;
    the restarted loop's reports go on from there (a crossing in seconds stays ordered)."""
    checker = ReportChecker(trial="ws2-s0", train_loop="pkg.loops:train", updates_per_epoch=8,
                            global_batch=64, wall_offset=10.0)
    checker.start(500.0)
    assert checker.check({"update": 48, "dev_loss": 0.3}, clock=502.0)["wall_s"] == 12.0
    assert checker.finish()["train_seconds"] == 12.0


@pytest.mark.parametrize(("metrics", "expect"), [
    ({"dev_loss": 0.5}, "reported without 'update' (keys: ['dev_loss']); every report needs "
                        "'update' and 'dev_loss'"),
    ({"update": 9}, "reported without 'dev_loss'"),
    ({"update": 4, "dev_loss": 0.5}, "reported update=4 after update=8: updates must increase"),
    ({"update": 8, "dev_loss": 0.5}, "reported update=8 after update=8"),
    ({"update": 9, "dev_loss": math.nan}, "reported dev_loss=nan at update 9: every value must be "
                                          "finite"),
    ({"update": 9, "dev_loss": 0.5, "train_loss": math.inf}, "reported train_loss=inf"),
    ({"update": 9.5, "dev_loss": 0.5}, "reported update=9.5: must be an integer >= 1"),
    ({"update": 9, "dev_loss": "low"}, "reported dev_loss='low': every value must be a number"),
    ({"update": True, "dev_loss": 0.5}, "reported update=True: every value must be a number"),
    ({"update": 9, "dev_loss": 0.5, "wall_s": 0.5}, "reported wall_s=0.5 after wall_s=1.0: the "
                                                    "trial's training seconds must not go back"),
])
def test_a_report_that_breaks_the_contract_names_trial_loop_and_key(
        metrics: dict[str, Any], expect: str) -> None:
    checker = _checker()
    checker.check({"update": 8, "dev_loss": 0.6}, clock=101)
    with pytest.raises(LoopReportError) as info:
        checker.check(metrics, clock=102)
    assert str(info.value).startswith("trial ws2-s0: train_loop pkg.loops:train reported")
    assert expect in str(info.value)


def test_a_loop_that_never_reports_fails_by_name() -> None:
    with pytest.raises(LoopReportError, match=r"trial ws2-s0: train_loop pkg.loops:train returned "
                                              r"without ever calling ray.train.report"):
        _checker().finish()


@pytest.mark.parametrize(("adapter", "hint"), [
    ("hf", "pass `callbacks=[hf.ReportCallback(config)]` to the Trainer"),
    ("lightning", "pass `callbacks=[lightning.ReportCallback(config)]` to the pl.Trainer"),
    (None, "(scalesweep.loop_helpers.report)"),
])
def test_a_loop_that_never_reports_is_told_its_adapters_callback(adapter: str | None, hint: str) -> None:
    # the end marker names the adapter whose arguments the loop built (#34 item 3b)
    with pytest.raises(LoopReportError) as info:
        _checker().finish(adapter)
    assert hint in str(info.value)
    assert ("loop_helpers.report" in str(info.value)) == (adapter is None)


def test_a_fail_marker_fails_the_trial_by_name() -> None:
    with pytest.raises(LoopReportError, match=r"^trial ws2-s0: train_loop pkg.loops:train trains "
                                              r"without its callback$"):
        _checker().fail("trains without its callback")


def test_the_report_of_the_furthest_checkpoint_is_found_and_a_torn_one_passed_over(
        tmp_path: Path) -> None:
    from scalesweep.trainables.user_loop import REPORT_FILE, newest_report

    assert newest_report(tmp_path) is None
    for name, text in [("checkpoint_2026-11-25_10-00-00.000001", '{"update": 96, "dev_loss": 0.2}'),
                       ("checkpoint_2026-11-25_10-00-01.000001", '{"update": 112, "dev_loss": 0.1}'),
                       ("checkpoint_2026-11-25_10-00-02.000001", '{"update": 128, "dev_lo')]:
        (tmp_path / name).mkdir()
        (tmp_path / name / REPORT_FILE).write_text(text)
    (tmp_path / "checkpoint_without_report").mkdir()
    assert newest_report(tmp_path) == {"update": 112, "dev_loss": 0.1}


def test_a_resume_logs_the_eval_of_the_checkpoint_the_loop_goes_on_from(tmp_path: Path) -> None:
    """The driver died after the loop's checkpoint at update 112 was kept but before MLflow had
    that eval: the resumed sweep logs it from the report beside the checkpoint (the restored
    loop reports only after 112), once, and not again on a second resume."""
    from mlflow.tracking import MlflowClient

    from scalesweep.orchestrator.launch.run import _log_checkpoint_reports, _replay_journal
    from scalesweep.orchestrator.tracking.tracker import SweepTracker
    from scalesweep.trainables.user_loop import REPORT_FILE

    row = make_plan(load_sweep(_sweep(tmp_path))).rows[0]
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = SweepTracker(uri, "own-loop")
    parent = tracker.start_parent({}, {})
    run_id = tracker.child(parent, row.name, {})
    tracker.add_result(run_id, 96, {"dev_loss": 0.2, "epoch": 1.5, "wall_s": 9.0})
    tracker.flush(raise_on_error=True)
    checkpoint = tmp_path / "sweep" / "train" / row.name / "checkpoint_2026-11-25_10-00-01.000001"
    checkpoint.mkdir(parents=True)
    (checkpoint / REPORT_FILE).write_text(json.dumps(
        {"update": 112, "dev_loss": 0.1, "epoch": 1.75, "samples_seen": 3584.0, "wall_s": 10.5}))
    for _ in range(2):  # each resume is a new driver: a tracker of its own, as `resume` makes
        resumed = SweepTracker(uri, "own-loop")
        existing = resumed.children(parent)
        curves: dict[str, list[dict[str, Any]]] = {}
        _replay_journal(resumed, {row.name: row}, existing, curves)  # adopts every existing run
        _log_checkpoint_reports(resumed, tmp_path / "sweep", [row], existing, curves)
        resumed.flush(raise_on_error=True)
    history = MlflowClient(uri).get_metric_history(run_id, "dev_loss")
    assert sorted((m.step, m.value) for m in history) == [(96, 0.2), (112, 0.1)]
