"""The machine a sweep's driver ran on, as tags of its parent run: a rerun on another CPU is
another random draw (floating-point rounding differs), so what to compare across machines are
the decisions, and these tags say which machines two studies came from."""

from __future__ import annotations

import os
import platform
from importlib import metadata

from scalesweep.mlflow_names import MACHINE_TAG_PREFIX

#: x86-64 microarchitecture levels by the CPU flags that define them (the psABI's levels)
_ISA_LEVELS = (("x86-64-v4", {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}),
               ("x86-64-v3", {"avx2", "bmi1", "bmi2", "fma", "movbe"}),
               ("x86-64-v2", {"sse4_2", "popcnt", "ssse3"}))


def _cpuinfo() -> tuple[str, set[str]]:
    model, flags = platform.processor() or platform.machine(), set[str]()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and value.strip():
                    model = value.strip()
                elif key in ("flags", "Features") and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    return model, flags


def isa_level(flags: set[str], machine: str | None = None) -> str:
    machine = machine or platform.machine()
    if machine not in ("x86_64", "AMD64"):
        return machine
    return next((name for name, need in _ISA_LEVELS if need <= flags), "x86-64")


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def machine_tags() -> dict[str, str]:
    model, flags = _cpuinfo()
    tags = {"cpu": model, "isa": isa_level(flags), "cpus": str(os.cpu_count() or 0),
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS", "unset"),
            "python": platform.python_version()}
    tags.update({f"version.{p}": _version(p) for p in ("scalesweep", "torch", "ray", "mlflow")})
    return {f"{MACHINE_TAG_PREFIX}{k}": v for k, v in tags.items()}
