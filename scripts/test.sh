#!/usr/bin/env bash
# Set up .venv/ and run the whole test suite (slow tests included), plus ruff and mypy.
# pytest runs once, on 3 xdist workers (2 cores: the slow tests spend much of their time waiting
# on process start-up, so a third worker fills it). The tests that start a Ray on Ray's fixed
# default ports (marker local_ray; tests/conftest.py) form one xdist group that a single worker
# runs one after another; every other cluster takes free ports. pytest's closing line is
# printed; a failure, or selecting no test (pytest's exit status 5), fails.
# Extra arguments go to pytest, e.g. bash scripts/test.sh -x, or -m "not slow" for the quick part.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/env.sh"
bash "$root/scripts/install_browser.sh"  # Debian's chromium for the MLflow UI browser test
cd "$root"
.venv/bin/ruff check .
.venv/bin/mypy

rc=0
.venv/bin/python -m pytest -n "${SCALESWEEP_TEST_WORKERS:-3}" --dist loadgroup "$@" || rc=$?
if [ "$rc" = 5 ]; then
    echo "test.sh: pytest selected no test (exit status 5)" >&2
fi
exit "$rc"
