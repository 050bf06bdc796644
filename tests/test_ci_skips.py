"""Under CI=true a skip fails the run (tests/conftest.py): a pytest run of its own, in a
directory holding this suite's conftest.py and a test file that skips, xfails and passes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

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
