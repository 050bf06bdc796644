#!/usr/bin/env bash
# Install the Debian programs two integration tests need, once: chromium for the MLflow UI
# browser test (tests/integration/test_ui_browser.py) and strace, which records every command
# line scripts/mlflow_server.sh runs (tests/integration/test_postgres.py: no password in any).
# Idempotent: installs only what is missing. Where it cannot (no apt, not root, apt fails) it
# says why; under CI=true it then exits 1, since those tests would skip and CI allows no skip
# (tests/conftest.py); elsewhere it exits 0 and the tests skip with the same reason.
# Run: bash scripts/install_test_tools.sh
set -uo pipefail

# the exit status of "could not install": CI must fail here, a developer may go on without
give_up=0
if [ "${CI:-}" = true ]; then
    give_up=1
fi

missing=()
if [ -x /usr/bin/chromium ]; then
    echo "install_test_tools: /usr/bin/chromium present ($(/usr/bin/chromium --version 2>/dev/null || echo 'version unknown'))"
else
    missing+=(chromium)
fi
if command -v strace >/dev/null 2>&1; then
    echo "install_test_tools: strace present"
else
    missing+=(strace)
fi
if [ ${#missing[@]} = 0 ]; then
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "install_test_tools: apt-get not found; install ${missing[*]} by hand (their tests will skip)" >&2
    exit $give_up
fi
sudo=""
if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        sudo="sudo -n"
    else
        echo "install_test_tools: not root and no password-less sudo; run 'apt-get install -y ${missing[*]}' as root (their tests will skip)" >&2
        exit $give_up
    fi
fi
export DEBIAN_FRONTEND=noninteractive
echo "install_test_tools: apt-get update + install ${missing[*]} (once)"
if ! $sudo apt-get update -qq; then
    echo "install_test_tools: apt-get update failed; ${missing[*]} not installed (their tests will skip)" >&2
    exit $give_up
fi
if ! $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"; then
    echo "install_test_tools: apt-get install ${missing[*]} failed (their tests will skip)" >&2
    exit $give_up
fi
if [ ! -x /usr/bin/chromium ] || ! command -v strace >/dev/null 2>&1; then
    echo "install_test_tools: apt-get ran but chromium or strace is still missing" >&2
    exit $give_up
fi
echo "install_test_tools: installed ${missing[*]}"
