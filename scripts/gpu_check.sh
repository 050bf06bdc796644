#!/usr/bin/env bash
# The GPU check (docs/cluster.md, "GPU check"): on a machine with one or more NVIDIA GPUs, run
# tests/gpu (marker `gpu`) and print one line per check: name, PASS/FAIL, seconds. Exit status
# 0 only when every check passed. Meant to finish within 10 minutes on one GPU.
#
# Steps, each stopping the script with a message that says what is missing:
#   1. .venv via scripts/env.sh (first: env.sh reinstalls the pinned CPU torch whenever
#      pyproject.toml or constraints.txt change, which would undo step 3); or, with
#      GPU_CHECK_PYTHON=<python>, that Python as it is (a cluster image's, or a node without
#      PyPI): it must import the project's dependencies, and the checkout goes on PYTHONPATH;
#   2. the NVIDIA driver: nvidia-smi must list a GPU;
#   3. the CUDA build of the venv's torch version (constraints.txt pins the CPU build), from
#      TORCH_CUDA_INDEX (default download.pytorch.org, CUDA variant TORCH_CUDA, default cu128),
#      or offline from wheels in TORCH_CUDA_WHEELS (a directory: torch and its nvidia-* wheels);
#   4. torch.cuda.is_available() in the venv;
#   5. pytest tests/gpu -m gpu, each test bounded by pytest-timeout, the whole run by `timeout`;
#   6. when the tests passed, the shipped study on the GPU, `python -m benchmarks.study_speed
#      --gpu` (its wall and the device's busy share; results in benchmarks/results/gpu/
#      study_speed.md), bounded by what is left of GPU_CHECK_SECONDS; skipped, with a message,
#      when less than STUDY_SPEED_SECONDS (default 180) is left, or with STUDY_SPEED_SECONDS=0.
# Extra arguments go to pytest, e.g. bash scripts/gpu_check.sh -k fusion. GPU_CHECK_SECONDS
# (default 600) bounds the whole script, set-up included.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
started=$SECONDS
summary=()  # "name|PASS or FAIL|seconds", printed at the end whatever happened

report() {
    echo
    echo "gpu_check: summary"
    local line name result took
    for line in "${summary[@]}"; do
        IFS='|' read -r name result took <<<"$line"
        printf '  %-4s %7ss  %s\n' "$result" "$took" "$name"
    done
    echo "gpu_check: $((SECONDS - started)) s in all"
}

fail() {  # a step that cannot go on: what is missing, then the summary so far
    summary+=("$1|FAIL|$2")
    echo "gpu_check: FAIL: $3" >&2
    report
    exit 1
}

# 1. the project's environment
t=$SECONDS
if [ -n "${GPU_CHECK_PYTHON:-}" ]; then
    py="$GPU_CHECK_PYTHON"
    # the checkout's package and its tests, for pytest and for the Ray workers it starts
    export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
    needed="torch ray ray.train ray.tune mlflow pandas pydantic yaml matplotlib sklearn numpy
            optuna pytest pytest_timeout transformers accelerate pytorch_lightning scalesweep"
    if ! missing="$("$py" -c '
import importlib.util, sys
missing = []
for name in sys.argv[1:]:
    try:
        found = importlib.util.find_spec(name) is not None
    except ImportError:  # its parent package is missing
        found = False
    if not found:
        missing.append(name)
print(" ".join(missing))
sys.exit(1 if missing else 0)' $needed 2>&1)"; then
        fail "environment (GPU_CHECK_PYTHON=$py)" $((SECONDS - t)) \
            "GPU_CHECK_PYTHON=$py cannot import: ${missing:-(it did not run)}"
    fi
    summary+=("environment (GPU_CHECK_PYTHON=$py)|PASS|$((SECONDS - t))")
else
    if ! bash scripts/env.sh; then
        fail "environment (scripts/env.sh)" $((SECONDS - t)) "scripts/env.sh could not build .venv"
    fi
    summary+=("environment (scripts/env.sh)|PASS|$((SECONDS - t))")
    py=.venv/bin/python
fi

# 2. a GPU and its driver
t=$SECONDS
if ! command -v nvidia-smi >/dev/null 2>&1; then
    fail "nvidia-smi" $((SECONDS - t)) "no nvidia-smi on PATH: no NVIDIA driver here, so no GPU to check"
fi
if ! gpus="$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1)" \
        || [ -z "$gpus" ]; then
    fail "nvidia-smi" $((SECONDS - t)) "nvidia-smi lists no GPU: ${gpus:-nothing}"
fi
echo "gpu_check: GPUs: $gpus"
summary+=("nvidia-smi|PASS|$((SECONDS - t))")

# 3. torch's CUDA build, same version as the pinned CPU one (the rest of the venv stays pinned)
t=$SECONDS
version="$("$py" -c 'import torch; print(torch.__version__.split("+")[0])')"
if [ "$("$py" -c 'import torch; print(torch.version.cuda or "")')" = "" ]; then
    variant="${TORCH_CUDA:-cu128}"
    echo "gpu_check: installing torch==$version+$variant into .venv (it holds the CPU build)"
    # PIP_CONSTRAINT="": a machine-wide pip constraint may pin the CPU build
    if [ -n "${TORCH_CUDA_WHEELS:-}" ]; then
        source=(--no-index --find-links "$TORCH_CUDA_WHEELS")
        where="the wheels in $TORCH_CUDA_WHEELS"
    else
        index="${TORCH_CUDA_INDEX:-https://download.pytorch.org/whl/$variant}"
        source=(--index-url "$index")
        where="$index (needs network access; offline, give TORCH_CUDA_WHEELS=<dir of wheels>)"
    fi
    if ! PIP_CONSTRAINT="" "$py" -m pip install -q "torch==$version+$variant" "${source[@]}"; then
        fail "torch CUDA build" $((SECONDS - t)) "could not install torch==$version+$variant from $where"
    fi
fi
summary+=("torch CUDA build ($("$py" -c 'import torch; print(torch.__version__)'))|PASS|$((SECONDS - t))")

# 4. torch sees the GPU
t=$SECONDS
if ! seen="$("$py" -c 'import torch; assert torch.cuda.is_available(), "torch.cuda.is_available() is False"
print(torch.cuda.device_count(), "x", torch.cuda.get_device_name(0), "CUDA", torch.version.cuda)' 2>&1)"; then
    fail "torch.cuda" $((SECONDS - t)) "torch does not see the GPU (driver too old for its CUDA? try TORCH_CUDA=cu126): $seen"
fi
echo "gpu_check: torch sees $seen"
summary+=("torch.cuda|PASS|$((SECONDS - t))")

# 5. the checks: one summary line per test, from pytest's JUnit XML
out="$(mktemp -d)"
t=$SECONDS
budget="${GPU_CHECK_SECONDS:-600}"
left=$((budget - (SECONDS - started) - 15))  # what is left of the budget, less a margin
if [ "$left" -lt 120 ]; then
    fail "tests/gpu" 0 "only $left s left of GPU_CHECK_SECONDS=$budget after the set-up (installing torch?); run again"
fi
rc=0
timeout --signal=INT --kill-after=15 "$left" "$py" -m pytest tests/gpu -m gpu -p no:cacheprovider \
    --timeout=300 --junitxml="$out/junit.xml" -o junit_family=xunit1 -q -s "$@" || rc=$?
if [ ! -s "$out/junit.xml" ]; then
    fail "tests/gpu" $((SECONDS - t)) "pytest wrote no results (exit status $rc; 124: past $left s)"
fi
while IFS= read -r line; do
    summary+=("$line")
done < <("$py" - "$out/junit.xml" <<'EOF'
import sys
import xml.etree.ElementTree as ET

for case in ET.parse(sys.argv[1]).getroot().iter("testcase"):
    failed = any(case.find(tag) is not None for tag in ("failure", "error", "skipped"))
    name = f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}"
    print(f"{name}|{'FAIL' if failed else 'PASS'}|{float(case.get('time', 0)):.1f}")
EOF
)

# 6. the shipped study on the GPU, in what is left of the budget
t=$SECONDS
need="${STUDY_SPEED_SECONDS:-180}"
left=$((budget - (SECONDS - started) - 15))
study_cmd=(-m benchmarks.study_speed --gpu)
study="${study_cmd[*]:1}"
study_rc=0
if [ "$rc" -ne 0 ]; then
    echo "gpu_check: $study not run: the tests failed"
elif [ "$need" -le 0 ] || [ "$left" -lt "$need" ]; then
    echo "gpu_check: $study skipped: $left s left of GPU_CHECK_SECONDS=$budget, it needs" \
        "STUDY_SPEED_SECONDS=$need; run it alone: $py ${study_cmd[*]}"
    summary+=("$study|SKIP|0")
else
    timeout --signal=INT --kill-after=15 "$left" "$py" "${study_cmd[@]}" >"$out/study_speed.log" 2>&1 \
        || study_rc=$?
    if [ "$study_rc" -eq 0 ]; then
        grep -E '^- (MET|MISSED)' "$out/study_speed.log" | sed 's/^- /gpu_check: study_speed: /' || true
        echo "gpu_check: study_speed results: benchmarks/results/gpu/study_speed.md"
        summary+=("$study (benchmarks/results/gpu/study_speed.md)|PASS|$((SECONDS - t))")
    else
        tail -n 30 "$out/study_speed.log" >&2
        echo "gpu_check: $study failed (exit status $study_rc; 124: past $left s)" >&2
        summary+=("$study|FAIL|$((SECONDS - t))")
    fi
fi

report
if [ "$rc" -ne 0 ]; then
    echo "gpu_check: FAIL (pytest exit status $rc; 5: no test collected, so torch saw no GPU)" >&2
    exit 1
fi
if [ "$study_rc" -ne 0 ]; then
    echo "gpu_check: FAIL ($study: exit status $study_rc)" >&2
    exit 1
fi
echo "gpu_check: PASS"
