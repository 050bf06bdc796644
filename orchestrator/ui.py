"""`scalesweep ui`: the MLflow UI for a store, bound to 127.0.0.1 only."""

from __future__ import annotations

import os
import subprocess
import sys

HOST = "127.0.0.1"


def runs_url(base: str, experiment_id: str | None) -> str:
    """Where a person lands on the training runs (not the GenAI traces overview) of a study."""
    if experiment_id is None:
        return base
    return f"{base}/#/experiments/{experiment_id}/runs?workflowType=machine_learning"


def experiment_id(uri: str, name: str) -> str | None:
    from mlflow.tracking import MlflowClient

    try:
        exp = MlflowClient(uri).get_experiment_by_name(name)
    except Exception:
        return None
    return None if exp is None else str(exp.experiment_id)


def ui_hint(uri: str, experiment: str, port: int = 5000) -> str:
    if uri.startswith(("http://", "https://")):
        return f"compare the runs: {runs_url(uri.rstrip('/'), experiment_id(uri, experiment))}"
    url = runs_url(f"http://{HOST}:{port}", experiment_id(uri, experiment))
    cmd = "scalesweep ui" if uri == "sqlite:///mlflow.db" else f"scalesweep ui --tracking-uri {uri}"
    return (f"compare the runs: {cmd}   then open {url}\n"
            "  (Chart view: set the x-axis to 'epoch' or 'samples_seen' to compare world sizes)")


def serve(uri: str, port: int) -> int:
    cmd = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri,
           "--host", HOST, "--port", str(port)]
    print(f"MLflow UI at http://{HOST}:{port} (store {uri}); Ctrl-C stops it", flush=True)
    try:
        return subprocess.call(cmd, env=os.environ.copy())
    except KeyboardInterrupt:
        return 0
