"""Every module path a sweep file names (a workload of the protocol, a train_loop) is imported by
one function (scalesweep.trainables.module_path) with one hint: a real package in the working
directory, swept without PYTHONPATH by the console script `scalesweep` (which leaves that
directory off the path), is refused by `plan`, `run` and `scalesweep.load` alike, with exit 2
naming the field, the value and what to do, before anything starts."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import scalesweep
from scalesweep.orchestrator.spec.errors import InputError
from scalesweep.trainables.module_path import ModulePathError, import_callable
from tests.support.helpers import ROOT, SCALESWEEP, cli_env

PACKAGE = "sweepmine"  # a name no installed distribution has
#: (field, sweep file) per kind of module path a sweep file names
SWEEPS = {
    "workload.name": f"""
name: mine
workload: {{name: "{PACKAGE}.workload:make", options: {{train_size: 64, dev_size: 16}}}}
target: {{metric: dev_loss, value: 0.1}}
optimizer: {{type: sgd, lr: 0.05}}
training: {{per_worker_batch: 8, epochs: 1}}
axes: {{world_size: [1]}}
""",
    "workload.train_loop": f"""
name: mine
workload: {{train_loop: "{PACKAGE}.loops:train_loop_per_worker", train_size: 64}}
target: {{metric: dev_loss, value: 0.1}}
optimizer: {{type: sgd, lr: 0.05}}
training: {{per_worker_batch: 8, epochs: 1}}
axes: {{world_size: [1]}}
""",
}
HINT = (f"'{PACKAGE}' is in the working directory {{cwd!r}}, which is not on the Python path: "
        "run `python -m scalesweep ...` from there, or set PYTHONPATH=.")


@pytest.fixture
def package_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A real package in the working directory (the shipped example workload and loop), which
    the Python path does not hold; forgotten by the import system afterwards."""
    (tmp_path / PACKAGE).mkdir()
    (tmp_path / PACKAGE / "__init__.py").write_text("")
    shutil.copy(ROOT / "examples" / "custom_workload.py", tmp_path / PACKAGE / "workload.py")
    shutil.copy(ROOT / "examples" / "ddp_demo_loop.py", tmp_path / PACKAGE / "loops.py")
    for field, text in SWEEPS.items():
        (tmp_path / f"{field}.yaml").write_text(text, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    yield tmp_path
    for name in [m for m in sys.modules if m.split(".")[0] == PACKAGE]:
        del sys.modules[name]


def _console_script(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The `scalesweep` command as a user types it: no PYTHONPATH, the package's directory as
    the working directory."""
    env = {k: v for k, v in cli_env().items() if k != "PYTHONPATH"}
    return subprocess.run([str(SCALESWEEP), *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.parametrize("field", SWEEPS)
@pytest.mark.parametrize("command", ["plan", "run"])
def test_the_cli_refuses_a_package_off_the_path_with_the_hint(
        package_here: Path, field: str, command: str) -> None:
    before = sorted(p.name for p in package_here.iterdir())
    proc = _console_script(command, f"{field}.yaml", cwd=package_here)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    value = SWEEPS[field].split('"')[1]
    assert f"{field} = '{value}': cannot import module '{value.split(':')[0]}' " \
           f"(ModuleNotFoundError: No module named '{PACKAGE}')" in proc.stderr, proc.stderr
    assert HINT.format(cwd=str(package_here)) in proc.stderr
    assert "Traceback" not in proc.stderr
    # nothing started: no MLflow store, no sweep directory, no Ray session
    assert sorted(p.name for p in package_here.iterdir()) == before


@pytest.mark.parametrize("field", SWEEPS)
def test_the_api_refuses_it_with_the_same_hint_and_loads_it_once_on_the_path(
        package_here: Path, field: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(InputError) as info:
        scalesweep.load(f"{field}.yaml")
    (problem,) = info.value.problems
    assert problem.path == field and problem.value == SWEEPS[field].split('"')[1]
    assert problem.rule.startswith(f"cannot import module '{PACKAGE}.")
    assert HINT.format(cwd=str(package_here)) in problem.rule
    monkeypatch.syspath_prepend(str(package_here))  # as the hint says: the same file loads
    assert len(scalesweep.load(f"{field}.yaml").plan()) == 1


def test_a_package_elsewhere_is_told_to_be_installed(package_here: Path) -> None:
    with pytest.raises(ModulePathError, match=r"^cannot import module 'elsewhere.mod' "
                                              r"\(ModuleNotFoundError: .*\); is 'elsewhere' "
                                              r"installed \(pip install -e \.\)"):
        import_callable("elsewhere.mod:make", "workload factory make(options)")


def test_a_module_that_fails_on_an_import_of_its_own_gets_no_path_hint(package_here: Path) -> None:
    (package_here / PACKAGE / "broken.py").write_text("import no_such_dependency_of_mine\n")
    sys.path.insert(0, str(package_here))
    with pytest.raises(ModulePathError) as info:
        import_callable(f"{PACKAGE}.broken:make", "workload factory make(options)")
    assert str(info.value) == (f"cannot import module '{PACKAGE}.broken' (ModuleNotFoundError: "
                               "No module named 'no_such_dependency_of_mine')")


def test_a_workload_module_that_raises_on_import_is_input_not_a_crash(
        package_here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (package_here / PACKAGE / "raising.py").write_text("raise RuntimeError('no GPU here')\n")
    sys.path.insert(0, str(package_here))
    with pytest.raises(InputError) as info:
        scalesweep.load({**_yaml(SWEEPS["workload.name"]),
                         "workload": {"name": f"{PACKAGE}.raising:make"}})
    (problem,) = info.value.problems
    assert (problem.path, problem.rule) == (
        "workload.name", f"cannot import module '{PACKAGE}.raising' (RuntimeError: no GPU here)")


def _yaml(text: str) -> dict[str, object]:
    import yaml

    data: dict[str, object] = yaml.safe_load(text)
    return data
