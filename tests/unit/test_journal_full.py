"""A full disk under the journal (tracker.add_result, called from SweepCallback.on_trial_result):
on a real small filesystem (a tmpfs mounted in a user namespace of the test's own), and where
no mount can be made under RLIMIT_FSIZE. The sweep is asked to stop once, with the journal's
path, the OS's error and the resume command; every eval still reaches MLflow once; the trial is
left open for resume; and a write the full disk cut short does not glue the next line, journaled
once space is freed, to its head (tests/support/full_journal.py drives it)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mlflow.tracking import MlflowClient

from tests.support.helpers import ROOT, bounded_run, cli_env
from tests.support.small_disk import on_small_disk


def _drive(tmp_path: Path, mode: str) -> tuple[dict[str, Any], str, Path]:
    uri, small = f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path / "small"
    small.mkdir()
    cmd = on_small_disk([sys.executable, "-m", "tests.support.full_journal", uri, str(small), mode],
                        small, mode)
    done = bounded_run(cmd, cwd=ROOT, env=cli_env(), timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1]), uri, small


@pytest.mark.parametrize(("mode", "reason"), [("tmpfs", "No space left on device"),
                                              ("fsize", "File too large")])
def test_a_full_disk_stops_the_sweep_for_resume_and_loses_no_eval(tmp_path: Path, mode: str,
                                                                  reason: str) -> None:
    result, uri, small = _drive(tmp_path, mode)
    refused = result["refused"]
    message = result["raised"]
    assert f"{small / 'metrics.journal.jsonl'}: cannot append an eval ({reason}" in message
    assert message.endswith(f"Free space, then `scalesweep resume {small}`")
    assert result["stops"] == 1 and result["printed"].count(f"error: {message}") == 1
    # left open for resume, not closed as failed
    assert "paused    t0 (the journal's disk): resume goes on from its last checkpoint" in result["printed"]
    run = MlflowClient(uri).get_run(result["run_id"])
    assert run.info.status == "RUNNING" and run.data.tags["status"] == "running"
    # every eval once in MLflow: those journaled, the one refused and the one in flight after it
    steps = [m.step for m in MlflowClient(uri).get_metric_history(result["run_id"], "dev_loss")]
    assert sorted(steps) == list(range(1, refused + 2)), steps
    # the journal: every line whole, the one written once space is back included
    assert result["journal_ends_with_newline"]
    journaled = [s for s in result["journal_steps"] if s is not None]
    assert journaled == [*range(1, refused), refused + 2], result["journal_steps"][-5:]
    assert refused > 3


def test_a_summary_the_disk_cannot_take_leaves_the_old_one_whole(tmp_path: Path) -> None:
    """`submit --summary-json` (submit._write_summary) on a disk that takes 4 KB a file
    (RLIMIT_FSIZE): the summary already there stays whole, no temporary file is left; with
    room, the new one replaces it."""
    from scalesweep.orchestrator.cluster import submit

    path, old = tmp_path / "summary.json", '[{"name": "the run before"}]'
    path.write_text(old)
    logs = submit.SUMMARY_MARK + json.dumps([{"name": "x" * 5000}])
    code = ("import resource, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
            "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096)); "
            "from scalesweep.orchestrator.cluster import submit; "
            "submit._write_summary(sys.stdin.read(), sys.argv[1])")
    done = subprocess.run([sys.executable, "-c", code, str(path)], input=logs, capture_output=True,
                          text=True, cwd=ROOT, env=cli_env(), timeout=300)
    assert done.returncode == 1 and "OSError: [Errno 27] File too large" in done.stderr, done.stderr
    assert path.read_text() == old and list(tmp_path.iterdir()) == [path]
    assert submit._write_summary(logs, str(path))
    assert json.loads(path.read_text()) == [{"name": "x" * 5000}]
