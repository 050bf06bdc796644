"""Extract a finished study's dev curves from an MLflow store into a small JSON file, for
tests that replay decisions on real curves (the curtailment test reads tests/data/
wenet_4v16_curves.json, made from a full run of sweeps/wenet_4v16.yaml):

    .venv/bin/python scripts/stored_curves.py --tracking-uri sqlite:////tmp/study2/mlflow.db \\
        --experiment wenet-4v16 --sweep sweeps/wenet_4v16.yaml --set replicates.first_seed=10 \\
        --out tests/data/wenet_4v16_curves.json

Each trial's evals are kept as the driver holds them (update, epoch, samples_seen, wall_s and
the metric), with its final status; the sweep file and overrides that planned it go along, so
a test plans the same trials. Numbers are rounded to 6 significant digits: the decisions read
brackets on an eval grid, far coarser than that.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from scalesweep.dashboards.mlflow_data import load_study
from scalesweep.mlflow_names import STATUS_TAG, STEP_KEY, TRIAL_NAME_TAG


def _r(x: float) -> float:
    return float(f"{x:.6g}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tracking-uri", required=True)
    ap.add_argument("--experiment", required=True)
    ap.add_argument("--sweep", required=True, help="the sweep file that planned the study")
    ap.add_argument("--set", dest="overrides", action="append", default=[],
                    help="the overrides it ran with (as run's --set)")
    ap.add_argument("--metric", default="dev_loss")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    study = load_study(args.tracking_uri, experiment=args.experiment)
    trials = {}
    for run in study.trials.to_dict("records"):
        curve = study.curve(str(run["run_id"]), args.metric)
        trials[str(run[TRIAL_NAME_TAG])] = {
            "status": str(run[STATUS_TAG]),
            "evals": [{STEP_KEY: int(p.update), "epoch": _r(p.epoch), "samples_seen": int(p.samples_seen),
                       "wall_s": _r(p.wall_s), args.metric: _r(p.value)} for p in curve]}
    out = {"sweep": args.sweep, "overrides": args.overrides, "metric": args.metric,
           "parent_run_id": study.parent_run_id, "trials": dict(sorted(trials.items()))}
    Path(args.out).write_text(json.dumps(out, separators=(",", ":")) + "\n", encoding="utf-8")
    print(f"{args.out}: {len(trials)} trials, {sum(len(t['evals']) for t in trials.values())} evals")


if __name__ == "__main__":
    main()
