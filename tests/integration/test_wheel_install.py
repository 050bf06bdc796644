"""scalesweep as a user installs it: a wheel built from this repository, in an environment
without the source tree, passes a slice of the tests and runs a real sweep (docs/design.md §3.1,
"One import namespace"). The editable install is what every other test runs on.

The sweep runs beside a Ray someone else started on this host (a shared workstation, a CI box):
`scalesweep run` without --address starts a Ray of its own and leaves the other one alone
(tests/support/other_ray.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.support.helpers import ROOT, cli_env
from tests.support.other_ray import OtherRay

# the slice's pytest and the sweep, of up to 900 s each, bound it
pytestmark = [pytest.mark.slow, pytest.mark.local_ray, pytest.mark.timeout(1800)]

#: what the wheel's tests need from the repository besides the code (no scalesweep/ among them)
NEEDED = ("tests", "sweeps", "recipes", "examples", "pyproject.toml")
#: tests that cover the CLI, planner, schedules and recipes through public imports only (the
#: loop: the sweep below runs it)
SLICE = ("tests/unit/test_plan.py", "tests/unit/test_schedules.py", "tests/unit/test_cli_plan_lr.py",
         "tests/unit/test_recipes.py")


def _run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 600
         ) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def test_a_wheel_installed_without_the_source_tree_works(tmp_path: Path) -> None:
    # build with the environment's setuptools (no download); --no-deps: the wheel alone
    _run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation",
          "-w", str(tmp_path / "dist"), "-q"], cwd=tmp_path)
    (wheel,) = (tmp_path / "dist").glob("scalesweep-*.whl")

    # a fresh venv that sees this environment's dependencies (torch, ray, mlflow, ...) through a
    # plain path line, so the editable install's finder in that site-packages is never loaded;
    # without a pip of its own: this environment's pip installs into it (--python)
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp_path)
    python = venv / "bin" / "python"
    site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                     cwd=tmp_path).stdout.strip())
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index",
          "-q", str(wheel)], cwd=tmp_path)

    project = tmp_path / "project"
    project.mkdir()
    for name in NEEDED:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, project / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, project / name)
    assert not (project / "scalesweep").exists()

    env = cli_env(PATH=f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
    where = _run([str(python), "-c", "import scalesweep; print(scalesweep.__file__)"], cwd=project,
                 env=env)
    assert Path(where.stdout.strip()).is_relative_to(site), where.stdout  # the wheel's code
    # nothing of ours at the top level of the environment
    for name in ("orchestrator", "trainables", "dashboards"):
        proc = subprocess.run([str(python), "-c", f"import {name}"], cwd=project, env=env,
                              capture_output=True, text=True)
        assert proc.returncode != 0 and "No module named" in proc.stderr, name

    _run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slow", *SLICE],
         cwd=project, env=env, timeout=900)
    # a real sweep through the console script the wheel installed: embedded Ray, sqlite MLflow,
    # the report; one short trial is the whole path. Another user's Ray is up on this host
    summary = project / "summary.json"
    with OtherRay(tmp_path) as other:
        _run([str(venv / "bin" / "scalesweep"), "run", "sweeps/smoke.yaml",
              "--set", "axes.world_size=[2]", "--set", "axes.scaling_rule=[none]",
              "--set", "training.epochs=1",
              "--tracking-uri", f"sqlite:///{project / 'mlflow.db'}", "--summary-json", str(summary)],
             cwd=project, env={**env, "RAY_ADDRESS": ""}, timeout=900)
        other.assert_untouched()
    trials = json.loads(summary.read_text())
    assert [t["status"] for t in trials] == ["completed"], trials
