"""What a Tune trial process imports: the module of the function Tune runs, and nothing of the
sweep driver's. MLflow, the planner and Ray Train (for simulate) cost ~1.3 CPU seconds per trial
process on 2 cores (benchmarks/README.md); they must stay out of
``scalesweep.trainables.trial_driver``, and out of its old path, which a sweep started before
the move still names."""

from __future__ import annotations

import json
import subprocess
import sys

DRIVER_ONLY = ("mlflow", "scalesweep.orchestrator.plan.rows", "scalesweep.orchestrator.tracking.tracker",
               "scalesweep.orchestrator.spec.load", "scalesweep.orchestrator.launch.tune",
               "scalesweep.dashboards", "matplotlib", "ray.train.v2.torch.torch_trainer")  # fmt: skip


def _imported_after(statement: str) -> list[str]:
    code = f"{statement}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_trial_entry_point_imports_none_of_the_driver() -> None:
    from scalesweep.trainables import trial_driver

    # Tune pickles the trainable by reference: the trial process imports this module
    assert trial_driver.trainable.__module__ == "scalesweep.trainables.trial_driver"
    modules = _imported_after("import scalesweep.trainables.trial_driver")
    assert "scalesweep.trainables.checkpointing" in modules and "ray.tune" in modules
    assert [m for m in modules if m.startswith(DRIVER_ONLY)] == []



def test_the_sweep_driver_imports_no_torch() -> None:
    # the driver names the trainable, plans its resources and reads its checkpoints' files;
    # torch (over a CPU second per driver) comes with the loop, in the trial's own process
    modules = _imported_after("import scalesweep.orchestrator.launch.run, "
                              "scalesweep.orchestrator.launch.tune")
    assert "scalesweep.trainables.trial_driver" in modules
    assert "torch" not in modules
