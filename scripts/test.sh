#!/usr/bin/env bash
# Set up .venv/ and run the whole test suite (slow tests included), plus ruff and mypy.
# pytest runs twice: the fast tests ("not slow": no Ray, no server processes) on 2 xdist
# workers, then the slow tests serially, since they start Ray clusters on Ray's fixed ports
# (dashboard agent 52365, Ray Client servers 23000-24000) and MLflow servers. Both runs print
# pytest's closing line; either failing, or selecting no test (pytest's exit status 5), fails.
# Extra arguments go to both runs, e.g. bash scripts/test.sh -x
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/env.sh"
bash "$root/scripts/install_browser.sh"  # Debian's chromium for the MLflow UI browser test
cd "$root"
.venv/bin/ruff check .
.venv/bin/mypy

status=0
run_pytest() {
    local name="$1"
    shift
    local rc=0
    .venv/bin/python -m pytest "$@" || rc=$?
    if [ "$rc" = 5 ]; then
        echo "test.sh: the $name tests: pytest selected no test (exit status 5)" >&2
    fi
    if [ "$rc" != 0 ]; then
        echo "test.sh: the $name tests failed (pytest exit status $rc)" >&2
        status=1
    fi
}
run_pytest fast -m "not slow" -n 2 "$@"
run_pytest slow -m slow "$@"
exit "$status"
