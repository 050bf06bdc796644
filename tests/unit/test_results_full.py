"""A sweep's results (summary.json, arms.json) written to a disk that cannot take them, on a
real small filesystem (a tmpfs mounted in a user namespace of the test's own), and where no
mount can be made under RLIMIT_FSIZE: the command stops with the file, the OS's error and the
resume command, the parent run ends KILLED, and the summary from before stays whole, with no
temporary file left (tests/support/full_results.py drives it)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.support.helpers import ROOT, bounded_run, cli_env
from tests.support.small_disk import on_small_disk


@pytest.mark.parametrize(("mode", "reason"), [("tmpfs", "No space left on device, ENOSPC"),
                                              ("fsize", "File too large, EFBIG")])
def test_results_the_disk_cannot_take_stop_the_sweep_for_resume(tmp_path: Path, mode: str,
                                                                 reason: str) -> None:
    uri, small = f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path / "small"
    small.mkdir()
    cmd = on_small_disk([sys.executable, "-m", "tests.support.full_results", uri, str(small), mode],
                        small, mode)
    done = bounded_run(cmd, cwd=ROOT, env=cli_env(), timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["raised"] == (
        f"{small / 'summary.json'}: cannot write the sweep's results ({reason}); the trials and "
        "their evals are in MLflow, the file before this one (if any) is whole. Free space, then "
        f"`scalesweep resume {small}`")
    assert result["summary"] == '[{"name": "the run before"}]'  # whole, as it was
    assert [f for f in result["files"] if f != "filler"] == ["summary.json"]  # no temporary file
    assert MlflowClient(uri).get_run(result["parent"]).info.status == "KILLED"
