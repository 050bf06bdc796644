#!/usr/bin/env bash
# Quick start: set up .venv/ and run the WeNet 4-vs-16 study end to end.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/env.sh"
cd "$root"
.venv/bin/scalesweep plan sweeps/wenet_4v16.yaml
.venv/bin/scalesweep lr recipes/wenet_conformer.yaml --updates 100000 --plot reports/wenet_lr.png > reports/wenet_lr.csv
echo "LR curve: reports/wenet_lr.png (CSV: reports/wenet_lr.csv)"
