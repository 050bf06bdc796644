#!/usr/bin/env bash
# Install Debian's chromium for the browser test (tests/integration/test_ui_browser.py), once.
# Idempotent: does nothing when /usr/bin/chromium exists. Where it cannot install chromium
# (no apt, not root, apt fails) it says why; under CI=true it then exits 1, since the browser
# test would skip and CI allows no skip (tests/conftest.py); elsewhere it exits 0 and the
# browser test skips with the same reason.
# Run: bash scripts/install_browser.sh
set -uo pipefail

# the exit status of "could not install": CI must fail here, a developer may go on without
give_up=0
if [ "${CI:-}" = true ]; then
    give_up=1
fi

if [ -x /usr/bin/chromium ]; then
    echo "install_browser: /usr/bin/chromium present ($(/usr/bin/chromium --version 2>/dev/null || echo 'version unknown'))"
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "install_browser: apt-get not found; install chromium by hand at /usr/bin/chromium (the browser test will skip)" >&2
    exit $give_up
fi
sudo=""
if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        sudo="sudo -n"
    else
        echo "install_browser: not root and no password-less sudo; run 'apt-get install -y chromium' as root (the browser test will skip)" >&2
        exit $give_up
    fi
fi
export DEBIAN_FRONTEND=noninteractive
echo "install_browser: apt-get update + install chromium (once)"
if ! $sudo apt-get update -qq; then
    echo "install_browser: apt-get update failed; chromium not installed (the browser test will skip)" >&2
    exit $give_up
fi
if ! $sudo apt-get install -y -qq --no-install-recommends chromium; then
    echo "install_browser: apt-get install chromium failed (the browser test will skip)" >&2
    exit $give_up
fi
if [ ! -x /usr/bin/chromium ]; then
    echo "install_browser: apt-get installed chromium but /usr/bin/chromium is missing" >&2
    exit $give_up
fi
echo "install_browser: installed $(/usr/bin/chromium --version 2>/dev/null || echo chromium)"
