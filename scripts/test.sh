#!/usr/bin/env bash
# Set up .venv/ and run the whole test suite (slow tests included), plus ruff and mypy.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/env.sh"
bash "$root/scripts/install_browser.sh"  # Debian's chromium for the MLflow UI browser test
cd "$root"
.venv/bin/ruff check .
.venv/bin/mypy
.venv/bin/python -m pytest "$@"
