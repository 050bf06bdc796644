"""The sweep a `run` keeps for `resume` is the one it validated (issue 50, item 2): the sweep
file and its recipe edited while the command connects to Ray (tests/support/edit_at_ray_start.py,
a hook at that function's call, no clock), the run trains the file as loaded, keeps that text
in its sweep directory, and `resume` runs the copy, saying that each file on disk differs from
it. The unit tests of the copy are in tests/unit/test_sweep_copy.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from mlflow.tracking import MlflowClient

from scalesweep.mlflow_names import ROLE_TAG
from tests.conftest import RayHead
from tests.support.helpers import ROOT, bounded_run, cli_env, scalesweep

#: one trial of the smoke study, 1 epoch; its optimizer from the recipe
STUDY = """name: copy_e2e
workload: {name: mlp_regression}
recipe: recipe.yaml
reference: {world_size: 2}
target: {metric: dev_loss, relative_to_baseline: 0.10}
baseline: {world_size: 2, warmup_rule: fixed, scaling_rule: none}
backend: simulate
scheduler: {type: gradual_warmup, warmup_steps: 20}
training: {per_worker_batch: 16, epochs: 1, eval_every_epochs: 0.5}
axes: {world_size: [2], warmup_rule: [fixed], scaling_rule: [none], seed: %s}
"""
RECIPE = "optimizer: {type: sgd, lr: %s, momentum: 0.9}\n"
DEADLINE_S = 600  # a hang guard only
TRIALS = f"tags.`{ROLE_TAG}` = 'trial'"


def test_a_sweep_file_edited_while_run_starts_is_not_what_resume_runs(tmp_path: Path,
                                                                     ray_head: RayHead) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    study, recipe = tmp_path / "study.yaml", tmp_path / "recipe.yaml"
    study.write_text(STUDY % "[0]")
    recipe.write_text(RECIPE % "0.05")
    validated = study.read_bytes(), recipe.read_bytes()
    # the edit: a second seed, and another lr
    (tmp_path / "study.new").write_text(STUDY % "[0, 1]")
    (tmp_path / "recipe.new").write_text(RECIPE % "0.5")
    run = bounded_run([sys.executable, "-m", "tests.support.edit_at_ray_start",
                       str(study), str(tmp_path / "study.new"), str(recipe), str(tmp_path / "recipe.new"),
                       "--", "run", str(study), "--tracking-uri", uri, "--no-report", *ray_head.args()],
                      cwd=tmp_path, env=cli_env(PYTHONPATH=str(ROOT), **ray_head.env()), timeout=DEADLINE_S)
    assert run.returncode == 0, run.stdout + run.stderr
    assert (tmp_path / "edited").exists()  # the edit happened, after the load and before Ray
    assert study.read_text() == STUDY % "[0, 1]"
    (sweep_dir,) = (tmp_path / "scalesweep_runs").glob("copy_e2e-*")
    assert (sweep_dir / "sweep.yaml").read_bytes() == validated[0]
    assert (sweep_dir / "recipe.yaml").read_bytes() == validated[1]
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("copy_e2e")
    assert exp is not None
    children = client.search_runs([exp.experiment_id], TRIALS)
    assert [r.info.run_name for r in children] == ["ws2-warmup20-none"]
    assert float(children[0].data.params["peak_lr"]) == 0.05  # the recipe as validated

    resumed = scalesweep("resume", str(sweep_dir), "--no-report", *ray_head.args(), cwd=tmp_path,
                         timeout=DEADLINE_S, PYTHONPATH=str(ROOT), **ray_head.env())
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    out = resumed.stdout
    for original, copy in ((study, sweep_dir / "sweep.yaml"), (recipe, sweep_dir / "recipe.yaml")):
        assert (f"note: {original.resolve()} differs from {copy}, the copy this resume runs (the "
                "file as validated when the sweep started); an edit made since runs only in a new "
                "sweep") in out, out
    # the sweep validated runs: its one trial finished, the edit's second seed never planned
    assert "1 trials already finished (left as they are); running 0" in out, out
    assert [t["name"] for t in json.loads((sweep_dir / "summary.json").read_text())] == \
        ["ws2-warmup20-none"]
    assert len(client.search_runs([exp.experiment_id], TRIALS)) == 1
