"""`scalesweep solve` end to end on a workload whose best lr is known (tests/support/quadratic_workload.py):
the search (Optuna's TPE through Ray Tune) finds it within one grid step, the verification
decides it with seeds, and MLflow holds the search and the verification as two parent runs.

One solve only (CI time): started through the Python API from a sweep given as a mapping
(tests/support/api_solve.py), stopped with Ctrl-C once its journal holds a finished candidate,
resumed with the CLI from the copy the solve kept, that resume's driver SIGKILLed two
candidates later, and resumed again to the end; the answer is checked as a whole solve's is."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from mlflow.tracking import MlflowClient

from scalesweep.mlflow_names import ROLE_TAG, SOLVE_RATIO_METRIC, SOLVE_SEARCH_TAG, SOLVE_TAG, SWEEP_FILE_TAG
from scalesweep.orchestrator.launch.solve_search import start_points
from scalesweep.science.solve import GRID_STEP
from tests.conftest import RayHead
from tests.support.helpers import ROOT, cli_env, scalesweep, wait_for
from tests.support.quadratic_workload import BEST_LR
from tests.unit.test_advice import T, _log
from tests.unit.test_solve import QUADRATIC
from tests.unit.test_solve_state import _solve_plan

pytestmark = pytest.mark.slow

REFERENCE_LR = 0.0606  # QUADRATIC's optimizer.lr: the best factor at 4 workers is BEST_LR / it


DEADLINE_S = 600
#: the late noise scale (samples) of the study's own trials, logged before the solve
NOISE_SCALE = 1.0


def _journaled(tmp_path: Path) -> list[dict[str, Any]]:
    """The finished trials in the solve's journal (a torn last line passed over)."""
    out = []
    for journal in tmp_path.glob("scalesweep_runs/solve-quadratic-solve-*/solve.journal.jsonl"):
        for line in journal.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out


def _candidates_journaled(tmp_path: Path) -> int:
    return sum(1 for row in _journaled(tmp_path) if row["lr_factor"] is not None)


def _stopped(tmp_path: Path, argv: list[str], ray_head: RayHead, log_name: str, candidates: int,
             sig: signal.Signals) -> tuple[int, str]:
    """Run ``python -m argv`` (``scalesweep ...``, or the API's driver with the head's
    address); once the journal holds ``candidates`` finished candidates, send its driver
    ``sig`` (the driver only: the test's Ray head lives on); its exit code (after a SIGINT, the
    clean stop's) and its output."""
    log = tmp_path / log_name
    with open(log, "w") as out:
        driver = subprocess.Popen([sys.executable, "-m", *argv],
                                  cwd=tmp_path, env=cli_env(PYTHONPATH=str(ROOT), **ray_head.env()),
                                  stdout=out, stderr=subprocess.STDOUT)
        try:
            wait_for(f"{candidates} finished candidates in the journal",
                     lambda: _candidates_journaled(tmp_path) >= candidates, driver, DEADLINE_S)
            os.kill(driver.pid, sig)
            rc = driver.wait(timeout=DEADLINE_S)
        finally:
            if driver.poll() is None:
                driver.kill()
            driver.wait(timeout=60)
    return rc, log.read_text()


def _search_parent(client: MlflowClient) -> Any:
    exp = client.get_experiment_by_name("solve-quadratic-solve")
    assert exp is not None
    (run,) = client.search_runs([exp.experiment_id], f"tags.`{SOLVE_TAG}` = 'search'")
    return run


def test_solve_stopped_then_resumed_finds_the_known_best_lr_within_one_grid_step(
        tmp_path: Path, ray_head: RayHead) -> None:
    """`scalesweep.solve` on a mapping, Ctrl-C after one candidate; `resume` SIGKILLed after
    two more; `resume` again to the end."""
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    # the study's own experiment, its trials' late noise scale 1 sample: it places the lr
    # factor's low end (SGD at k = 4: 4 (1 + 1) / (1 + 4) = 1.6, one grid step lower)
    _log(client, "solve-quadratic", [T(4, "none", "fixed", 1000.0 + s, seed=s, noise=NOISE_SCALE)
                                     for s in range(2)])
    rc, log = _stopped(tmp_path, ["tests.support.api_solve", ray_head.address], ray_head, "solve.log",
                       1, signal.SIGINT)
    (state_dir,) = tmp_path.glob("scalesweep_runs/solve-quadratic-solve-*")
    assert rc == 1, log  # as `run`'s Ctrl-C
    assert f"`scalesweep resume {state_dir}` continues the solve" in log
    assert "baseline seed 0: target dev_loss 0.001" in log
    assert "  noise scale: 1 samples, the late-training median of the trials of study " \
           "'solve-quadratic'" in log
    search = _search_parent(client)
    assert search.info.status == "KILLED"
    # no file was given: the sweep the solve runs, and its resumes read, is the copy it kept
    assert search.data.tags[SWEEP_FILE_TAG] == str(state_dir / "sweep.yaml")
    after_ctrl_c = _candidates_journaled(tmp_path)
    _stopped(tmp_path, ["scalesweep", "resume", str(state_dir), *ray_head.args()], ray_head, "resume.log",
             after_ctrl_c + 2, signal.SIGKILL)
    before = _journaled(tmp_path)
    proc = scalesweep("resume", str(state_dir), "--json", *ray_head.args(), cwd=tmp_path, timeout=900,
                      PYTHONPATH=str(ROOT), **ray_head.env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    print("\n".join(line for line in proc.stderr.splitlines()  # the resume, in the test's log
                    if any(w in line for w in ("resuming", "finished before", "candidate "))))
    finished = [row for row in before if row["lr_factor"] is not None]
    assert f"{len(before) - len(finished)} baseline seed(s) and {len(finished)} candidate(s) " \
           "finished before" in proc.stderr
    assert "told to the TPE sampler as evaluated" in proc.stderr
    # the named rules' start points that finished are not queued again. (The sampler itself
    # may draw a point again, rounded to the space's resolution: a replicate on another
    # baseline seed, as Optuna's TPE does; the verification takes distinct points.)
    tried = {(row["lr_factor"], row["warmup"]) for row in finished}
    (tmp_path / "plan").mkdir()
    starts = [(s["lr_factor"], s["warmup"]) for s in start_points(
        _solve_plan(tmp_path / "plan", noise_scale=NOISE_SCALE))]
    assert starts  # the quadratic space holds named rules' points
    left = sum(1 for s in starts if s not in tried)
    assert f"{left} named-rule start point(s) still to try" in proc.stderr
    answer = json.loads(proc.stdout)  # stdout is the answer alone; the progress went to stderr
    best = BEST_LR / REFERENCE_LR
    assert best / GRID_STEP <= answer["lr_factor"] <= best * GRID_STEP, answer
    assert answer["peak_lr"] == pytest.approx(answer["lr_factor"] * REFERENCE_LR, rel=1e-6)
    assert answer["recipe"]["settings"]["optimizer.lr"] == pytest.approx(answer["peak_lr"])
    assert answer["decision"] in ("faster", "slower", "equivalent", "not resolved")
    lo, hi = answer["ratio_ci"]
    assert lo <= answer["ratio_median"] <= hi
    assert [level["level"] for level in answer["ratio_by_target"]] == [0.1, 0.25, 0.5, 1.0, 2.0]
    # lr factor 1.6/sqrt(2)..8 (placed with the study's noise scale, which the state kept for
    # the resumes) and warmup 1..4 in steps of sqrt(2): 7 x 4 points (1 and 1.41 round to one
    # warmup) of 4 epochs
    assert answer["grid_trial_epochs"] == 7 * 4 * 4
    assert answer["space"]["lr_factor"] == [pytest.approx(1.6 / GRID_STEP), 8.0]
    assert answer["space"]["noise_scale"] == NOISE_SCALE
    assert "the sgd model puts the best at 1.6..3.14" in answer["space"]["lr_low_reason"]
    assert answer["sampler"] == "tpe"
    assert 0 < answer["search_trial_epochs_used"] < answer["trial_epochs_used"]
    # the search's trial-epochs are every candidate's: those finished before the kill, those the
    # kill cut short (ended KILLED in MLflow, run again under new names) and those after
    spent_before = sum(max(float(e["epoch"]) for e in row["evals"]) for row in finished)
    exp = client.get_experiment_by_name("solve-quadratic-solve")
    assert exp is not None
    parent_id = _search_parent(client).info.run_id
    ran = [r for r in client.search_runs([exp.experiment_id], f"tags.mlflow.parentRunId = '{parent_id}'",
                                         max_results=1000) if r.info.run_name.startswith("c")]
    assert answer["search_trial_epochs_used"] == pytest.approx(
        sum(r.data.metrics.get("epoch", 0.0) for r in ran), abs=1e-3)  # the answer rounds to 3 places
    assert spent_before > 0
    assert "search budget" in proc.stderr

    runs = client.search_runs([exp.experiment_id], max_results=1000)
    search = [r for r in runs if r.data.tags.get(SOLVE_TAG) == "search"]
    verify = [r for r in runs if r.data.tags.get(SOLVE_TAG) == "verify"]
    assert len(search) == len(verify) == 1
    assert search[0].data.tags[ROLE_TAG] == "solve"  # not a study: `report` passes it over
    assert verify[0].data.tags[SOLVE_SEARCH_TAG] == search[0].info.run_id
    assert verify[0].info.run_id == answer["verification_parent_run_id"]
    # the pick is one of best_of verified candidates: each read at an error of 10 % / best_of
    assert answer["best_of"] >= 1
    assert answer["selection_confidence"] == pytest.approx(1 - 0.1 / answer["best_of"])
    assert search[0].info.status == "FINISHED"  # reopened by resume, then closed
    every = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == search[0].info.run_id]
    # a run the kill cut short is ended KILLED; its trial ran again from scratch
    assert all(r.info.status in ("FINISHED", "KILLED") for r in every)
    children = [r for r in every if r.info.status == "FINISHED"]
    names = [r.info.run_name for r in children]
    assert len(names) == len(set(names))  # no trial finished twice
    candidates = [r for r in children if r.info.run_name.startswith("c")]
    assert len(children) - len(candidates) == 3  # the baseline seeds
    # the candidates that finished before the kill kept their one run and were not run again
    assert {str(row["name"]) for row in finished} <= set(names)
    assert len(candidates) > len(finished)  # the search went on after the resume
    assert candidates and all(SOLVE_RATIO_METRIC in r.data.metrics for r in candidates)
    # every candidate's score is what its evals say: its last one, never made up
    assert all(math.isfinite(r.data.metrics[SOLVE_RATIO_METRIC]) for r in candidates)
    # the verification ran seeds the search never ran (a candidate was picked on its own seed)
    # (the finished runs: a run the kill cut short right after its creation has no params yet)
    searched = {int(r.data.params["seed"]) for r in children}
    verified = {int(r.data.params["seed"]) for r in runs
                if r.data.tags.get("mlflow.parentRunId") == verify[0].info.run_id}
    assert searched and verified and not searched & verified, (searched, verified)
    # the verification's report, made at the end as `run` makes a study's, shows the search
    report = (tmp_path / "reports" / "solve-quadratic-solve" / "report.html").read_text()
    assert "Solve: the search this study verifies" in report
    assert f"{len(candidates)} candidates" in report
    # the sweep was read from the copy in the state directory, as `run` keeps one
    state = json.loads((state_dir / "solve.json").read_text())
    assert state["sweep"] == str(state_dir / "sweep.yaml")
    assert yaml.safe_load((state_dir / "sweep.yaml").read_text()) == yaml.safe_load(QUADRATIC)
    # a finished solve resumed again trains nothing and answers as before
    again = scalesweep("resume", str(state_dir), "--json", *ray_head.args(), cwd=tmp_path, timeout=300,
                       PYTHONPATH=str(ROOT), **ray_head.env())
    assert again.returncode == 0, again.stdout + again.stderr
    assert "this solve had already finished" in again.stderr
    assert json.loads(again.stdout)["verification_parent_run_id"] == answer["verification_parent_run_id"]
    assert len(client.search_runs([exp.experiment_id], max_results=1000)) == len(runs)
    # and through the Python API (scalesweep.resume, docs/api.md): the same answer as a typed
    # record, in a process of its own that joins the test's Ray; nothing printed on stdout
    probe = (f"import json, scalesweep; s = scalesweep.resume({str(state_dir)!r}, report=False); "
             "print(json.dumps({'answer': s.answer.json, 'decision': s.answer.decision, "
             "'ci': s.answer.ratio_ci, 'type': type(s).__name__}))")
    api = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True,
                         timeout=300, env=cli_env(PYTHONPATH=str(ROOT), RAY_ADDRESS=ray_head.address,
                                              MLFLOW_TRACKING_URI=f"sqlite:///{tmp_path / 'mlflow.db'}",
                                              **ray_head.env()))
    assert api.returncode == 0, api.stdout + api.stderr
    solved = json.loads(api.stdout)  # stdout is the probe's line alone
    assert solved["type"] == "Solved" and solved["answer"] == json.loads(again.stdout)
    assert solved["decision"] == answer["decision"] and solved["ci"] == answer["ratio_ci"]
