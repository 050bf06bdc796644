"""A study's report written to a disk that cannot take it, on a real small filesystem (a tmpfs
mounted in a user namespace of the test's own), and where no mount can be made under
RLIMIT_FSIZE (tests/support/full_report.py drives it): at the end of a sweep
(``write_report``) and from ``scalesweep report``, the error names the file, the OS's error
and the command that writes the report again, with no traceback (exit 1); the report from
before stays whole, file by file, and no temporary file is left."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from scalesweep.dashboards.report import again_command
from tests.support.full_report import BEFORE
from tests.support.helpers import ROOT, bounded_run, cli_env
from tests.support.small_disk import on_small_disk
from tests.unit.test_report import _log_study

EXPERIMENT = "wenet-4v16"


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"
    yield uri, _log_study(MlflowClient(tracking_uri=uri), EXPERIMENT, summary=True, start=1_000)


@pytest.mark.parametrize(("mode", "how", "reason"), [
    ("tmpfs", "report", "No space left on device, ENOSPC"),
    ("fsize", "run", "File too large, EFBIG")])
def test_a_report_the_disk_cannot_take_names_the_file_and_the_command_again(
        study: tuple[str, str], tmp_path: Path, mode: str, how: str, reason: str) -> None:
    # one way in per disk (a report costs seconds): `scalesweep report`, and the end of a sweep
    (uri, parent), small = study, tmp_path / "small"
    small.mkdir()
    cmd = on_small_disk([sys.executable, "-m", "tests.support.full_report", uri, EXPERIMENT, parent,
                         str(small), mode, how], small, mode)
    done = bounded_run(cmd, cwd=ROOT, env=cli_env(), timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    # the first file of the report, a figure, is the one refused
    message = (rf"{small}/\w+\.png: cannot write the report \({reason}\); the sweep's trials "
               r"are finished and in MLflow, and each file of the report is whole \(the one "
               rf"before, if any\)\. Free space, then `scalesweep report --experiment {EXPERIMENT} "
               rf"--out {small}` writes it again")
    if how == "run":  # the run's end: the command's error (exit 1), not the report's warning
        assert result["raised"] is not None and re.fullmatch(message, result["raised"]), result
    else:  # exit 1, the message once, no traceback
        assert result["rc"] == 1 and result["stdout"] == "", result
        error, hint = result["stderr"].splitlines()
        assert re.fullmatch(f"error: ReportUnwritable: {message}", error), error
        assert hint == "(set SCALESWEEP_DEBUG=1 for the traceback)"
    assert result["before"] == BEFORE  # whole, as they were
    assert result["files"] == sorted(BEFORE)  # no temporary file, no torn one


def test_the_command_again_names_the_directory_only_when_it_is_not_the_default() -> None:
    assert again_command("s", Path("reports") / "s") == "scalesweep report --experiment s"
    assert again_command("s", Path("/x/r")) == "scalesweep report --experiment s --out /x/r"
