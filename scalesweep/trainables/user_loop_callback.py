"""The Ray Train callback of a train_loop trial: rank 0's reports, checked against the contract
and the trial's plan (which the start marker carries) and completed
(:class:`scalesweep.trainables.user_loop.ReportChecker`), forwarded to Tune.

It runs in Ray Train's controller, which calls it as the workers' reports arrive. A report that
breaks the contract raises :class:`~scalesweep.trainables.user_loop.LoopReportError` there;
Ray Train V2 treats an error of the controller as final (no restart of the worker group: the
same loop would make the same report again), stops the workers and fails ``fit()``, and the
trial driver reports the trial ``failed`` with the error's line as its ``error`` tag.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from ray.train import Checkpoint
from ray.train.v2._internal.execution.context import TrainRunContext
from ray.tune.integration.ray_train import TuneReportCallback

from scalesweep.trainables.user_loop import (
    END,
    FAIL,
    MARKER_KEY,
    PLAN_KEY,
    REASON_KEY,
    REPORT_FILE,
    SOURCE_KEY,
    START,
    ReportChecker,
)


class LoopReportCallback(TuneReportCallback):
    """``TuneReportCallback`` with the contract of a user's loop in front of it."""

    def __init__(self, checker: ReportChecker) -> None:
        super().__init__()
        self.checker = checker

    def after_report(self, run_context: TrainRunContext, metrics: list[dict[str, Any]],
                     checkpoint: Checkpoint | None) -> None:
        first = metrics[0]  # rank 0's, as TuneReportCallback forwards
        marker = first.get(MARKER_KEY)
        if marker == START:
            self.checker.start(time.monotonic(), plan=first.get(PLAN_KEY))
            return
        if marker == FAIL:  # the loop's worker found it cannot go on (user_loop.fail_trial)
            self.checker.fail(str(first.get(REASON_KEY)))
        if marker == END:
            out: dict[str, Any] = self.checker.finish(first.get(SOURCE_KEY))
        else:
            out = self.checker.check(first, time.monotonic())
            out["physical_workers"] = len(metrics)
            if checkpoint is not None:  # the report goes with it, for a resume (run.py)
                _write_report(checkpoint, out)
        super().after_report(run_context, [out, *metrics[1:]], checkpoint)


def _write_report(checkpoint: Checkpoint, report: dict[str, Any]) -> None:
    """``report`` as the checkpoint's REPORT_FILE, where Ray Train persisted it."""
    data = json.dumps(report).encode()
    if checkpoint.filesystem is None:
        Path(checkpoint.path, REPORT_FILE).write_bytes(data)
        return
    with checkpoint.filesystem.open_output_stream(f"{checkpoint.path}/{REPORT_FILE}") as f:
        f.write(data)
