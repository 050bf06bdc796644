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
    # uv installs the same pins in parallel (pip resolves, unpacks and byte-compiles on one core).
    # uv reads no pip configuration: pip's find-links (where this machine
    # keeps the CPU build of torch) are handed on, else uv would take PyPI's CUDA build.
    # Every module is byte-compiled here, as pip does: where PYTHONDONTWRITEBYTECODE is set
    # (many images set it) a process would otherwise compile all it imports, every time.
    # SCALESWEEP_LAZY_BYTECODE=1 leaves the compiling to the first import of each module
    # (scripts/test.sh, whose processes may write .pyc files: most modules are never imported).
    compile=(--compile-bytecode)
    if [ "${SCALESWEEP_LAZY_BYTECODE:-0}" = 1 ]; then
        compile=()
    fi
    links=()
    for dir in ${PIP_FIND_LINKS:-} $(.venv/bin/python -m pip config get global.find-links 2>/dev/null || true); do
        links+=(--find-links "$dir")
    done
    if .venv/bin/python -m pip install -q -c constraints.txt uv && .venv/bin/python -m uv pip install -q \
            --python .venv/bin/python "${compile[@]}" "${links[@]}" \
            -c constraints.txt -e '.[dev,hf,lightning]'; then
        :
    else
        echo "env.sh: uv could not install the environment; pip installs it" >&2
        .venv/bin/python -m pip install -q -c constraints.txt -e '.[dev,hf,lightning]'
    fi
    echo "$want" > "$stamp"
fi
