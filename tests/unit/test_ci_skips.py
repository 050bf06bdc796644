"""Under CI=true a skip fails the run (tests/conftest.py): a pytest run of its own, in a
directory holding this suite's conftest.py and a test file that skips, xfails and passes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]

PLANTED = '''
import pytest

def test_skips():
    pytest.skip("no such machine here")

@pytest.mark.xfail(strict=True, reason="a known bug")
def test_known_bug():
    assert False

def test_passes():
    pass
'''


def run_planted(tmp_path: Path, ci: str | None, body: str = PLANTED) -> subprocess.CompletedProcess[str]:
    shutil.copy(TESTS / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_planted.py").write_text(body)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist",
                           "-q", "-o", "addopts=", "test_planted.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("ci", ["true", "TRUE"])
def test_a_skip_fails_under_ci_and_an_xfail_does_not(tmp_path: Path, ci: str) -> None:
    proc = run_planted(tmp_path, ci)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "1 failed, 1 passed, 1 xfailed" in proc.stdout, proc.stdout
    assert "skipped under CI=true, which allows no such skip: no such machine here" in proc.stdout


@pytest.mark.parametrize("ci", [None, "false", ""])
def test_a_skip_stays_a_skip_outside_ci(tmp_path: Path, ci: str | None) -> None:
    proc = run_planted(tmp_path, ci)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed, 1 skipped, 1 xfailed" in proc.stdout, proc.stdout


def test_a_module_that_skips_itself_fails_under_ci(tmp_path: Path) -> None:
    body = 'import pytest\npytest.skip("not here", allow_module_level=True)\n\ndef test_x():\n    pass\n'
    proc = run_planted(tmp_path, "true", body)
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "skipped under CI=true, which allows no such skip: not here" in proc.stdout
    assert run_planted(tmp_path, None, body).returncode == 5  # outside CI: skipped, nothing ran


def test_a_pytest_xfail_call_fails_under_ci(tmp_path: Path) -> None:
    body = ('import pytest\n\ndef test_gives_up():\n    pytest.xfail("flaky here")\n\n'
            'def test_x():\n    pass\n')
    under_ci = run_planted(tmp_path, "true", body)
    assert under_ci.returncode == 1 and "1 failed, 1 passed" in under_ci.stdout, under_ci.stdout
    assert "pytest.xfail() under CI=true checks nothing after it: flaky here" in under_ci.stdout
    outside = run_planted(tmp_path, None, body)
    assert outside.returncode == 0 and "1 passed, 1 xfailed" in outside.stdout, outside.stdout


def test_the_local_ray_group_guard_stops_a_suite_whose_groups_vanished(tmp_path: Path) -> None:
    # xdist writes each test's group into its node id; a local_ray test without it would run
    # beside another Ray on the same fixed ports, so the run stops instead
    body = ('import pytest\n\n@pytest.mark.local_ray\ndef test_a():\n    pass\n\n'
            '@pytest.mark.local_ray\ndef test_b():\n    pass\n')
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    local_ray: x\n    slow: x\n")
    grouped = run_planted_xdist(tmp_path, body, ["-n", "2", "--dist", "loadgroup"])
    assert grouped.returncode == 0 and "2 passed" in grouped.stdout, grouped.stdout + grouped.stderr
    # the guard itself, on a worker whose node ids lack the group (what pytest 9.2 did)
    from types import SimpleNamespace

    from tests import conftest

    item = SimpleNamespace(nodeid="test_planted.py::test_a",
                           get_closest_marker=lambda name: name == "local_ray" or None)
    session = SimpleNamespace(items=[item], config=SimpleNamespace(option=SimpleNamespace(loadgroup=True)))
    with pytest.raises(pytest.UsageError, match="xdist did not put 1 local_ray test"):
        conftest.pytest_collection_finish(session)  # type: ignore[arg-type]
    item.nodeid += "@local_ray"
    conftest.pytest_collection_finish(session)  # type: ignore[arg-type]


def run_planted_xdist(tmp_path: Path, body: str, args: list[str]) -> subprocess.CompletedProcess[str]:
    shutil.copy(TESTS / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_planted.py").write_text(body)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-o", "addopts=",
                           *args, "test_planted.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_the_projects_xfail_strict_fails_a_marker_whose_bug_is_gone(tmp_path: Path) -> None:
    """pyproject.toml's ``xfail_strict = true``, read by pytest as the project's own runs read
    it: an xfail marker without ``strict=`` whose test passes (the bug fixed, the marker left)
    fails the run instead of passing as XPASS."""
    shutil.copy(TESTS.parent / "pyproject.toml", tmp_path / "pyproject.toml")
    body = 'import pytest\n\n@pytest.mark.xfail(reason="a bug since fixed")\ndef test_fixed():\n    pass\n'
    proc = run_planted(tmp_path, None, body)
    assert proc.returncode == 1 and "1 failed" in proc.stdout, proc.stdout
    assert "[XPASS(strict)] a bug since fixed" in proc.stdout, proc.stdout
