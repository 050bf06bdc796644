#!/usr/bin/env bash
# Quick start: set up .venv/ and run the WeNet 4-vs-16 study end to end on an embedded local Ray,
# tracked in MLflow (sqlite:///mlflow.db here), with the report made at the end.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/env.sh"
cd "$root"
.venv/bin/scalesweep run sweeps/wenet_4v16.yaml --summary-json reports/wenet-4v16/summary.json "$@"
