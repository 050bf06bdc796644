#!/usr/bin/env bash
# Create or refresh .venv/ at the project root. Idempotent: a stamp of the inputs that
# decide the environment (pyproject.toml, constraints) skips pip when nothing changed.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
py="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    "$py" -m venv .venv
fi
stamp=.venv/.scalesweep-stamp
want="$(cat pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    # constraints.txt pins every package (torch: the CPU build; an unpinned torch pulls CUDA wheels).
    .venv/bin/python -m pip install -q --upgrade pip
    .venv/bin/python -m pip install -q -c constraints.txt -e '.[dev,hf,lightning]'
    echo "$want" > "$stamp"
fi
