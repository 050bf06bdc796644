#!/usr/bin/env bash
# Set up .venv/ and run the whole test suite (tests/unit and tests/integration), plus ruff and mypy.
# --fast: the unit tier only (tests/unit: no Ray, no server, no sweep), a few minutes.
# pytest runs once, on 2 xdist workers (one per core: a third made every Ray start-up, browser
# page and elastic restart slower under the contention, and the whole run longer). The tests that start a Ray on Ray's fixed
# default ports (marker local_ray; tests/conftest.py) form one xdist group that a single worker
# runs one after another; every other cluster takes free ports. pytest's closing line is
# printed; a failure, or selecting no test (pytest's exit status 5), fails.
# Extra arguments go to pytest, e.g. bash scripts/test.sh -x, or bash scripts/test.sh --fast -x.
set -euo pipefail
tier=()
if [ "${1:-}" = "--fast" ]; then
    shift
    tier=(tests/unit)
fi
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tools_pid=""
if [ ${#tier[@]} = 0 ]; then
    # Debian's chromium and strace for two integration tests, fetched while the environment installs
    # and mypy runs (on a fresh machine both wait mostly on downloads)
    tools_log="$(mktemp)"
    trap 'rm -f "$tools_log"' EXIT
    bash "$root/scripts/install_test_tools.sh" >"$tools_log" 2>&1 &
    tools_pid=$!
fi
# .pyc files are written by the first process that imports a module (even where the machine
# sets PYTHONDONTWRITEBYTECODE), instead of env.sh compiling every installed module up front
unset PYTHONDONTWRITEBYTECODE
SCALESWEEP_LAZY_BYTECODE=1 bash "$root/scripts/env.sh"
cd "$root"
.venv/bin/ruff check .
.venv/bin/mypy
if [ -n "$tools_pid" ]; then
    tools_rc=0
    wait "$tools_pid" || tools_rc=$?
    cat "$tools_log"
    if [ "$tools_rc" != 0 ]; then
        exit "$tools_rc"
    fi
fi

rc=0
.venv/bin/python -m pytest -n "${SCALESWEEP_TEST_WORKERS:-2}" --dist loadgroup "${tier[@]}" "$@" || rc=$?
if [ "$rc" = 5 ]; then
    echo "test.sh: pytest selected no test (exit status 5)" >&2
fi
exit "$rc"
