"""One of the sweep drivers that race to make the same MLflow experiment
(tests/unit/test_sweep_lock.py, tests/integration/test_postgres.py):
``python -m tests.support.race_experiment URI NAME GATE_DIR INDEX``. It imports MLflow, says it is ready
(``ready-INDEX``), waits for ``go`` and calls ``experiment_id_for`` at once, printing the id (or
the error) as its last line."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from mlflow.tracking import MlflowClient

from scalesweep.orchestrator.tracking.tracker import experiment_id_for

#: a driver gives up waiting for the gate after this long, so a dead test cannot leave it
MAX_WAIT_S = 120.0


def main(uri: str, name: str, gate: Path, index: str) -> int:
    client = MlflowClient(uri)
    client.search_experiments(max_results=1)  # the store's first connection, before the gate
    (gate / f"ready-{index}").touch()
    deadline = time.monotonic() + MAX_WAIT_S
    while not (gate / "go").exists():
        if time.monotonic() > deadline:
            print("error: the gate never opened")
            return 1
        time.sleep(0.0005)
    try:
        print(experiment_id_for(client, name))
    except Exception as exc:  # the racy look-then-create loses with "already exists"
        print(f"error: {type(exc).__name__}: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], Path(sys.argv[3]), sys.argv[4]))
