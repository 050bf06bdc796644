"""On one CUDA GPU: an update of the built-in loop waits for the GPU nowhere (issue 51, item 2).

torch's sync debug mode raises at every op that makes the host wait for the device (a read of
a value, a blocking copy either way) while it is "error"; it is set around each update
(``_Trial._update``: the batches made, forward, backward, the step), and not around the loop's
read points and reports, which read on purpose (loop.py's module doc, "Host syncs"). The CPU
twin, tests/unit/test_host_syncs.py, counts Python-side reads; this one also sees torch's own.

mini_asr is left out: ``F.ctc_loss`` on CUDA copies its lengths and target offsets between
host and device with blocking copies inside torch, in every pass.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from scalesweep.trainables import loop
from scalesweep.trainables.config import TrialConfig
from scalesweep.trainables.world import LocalWorld

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize(("workload", "options", "fuse"), [
    ("mlp_regression", {"train_size": 512, "dev_size": 64}, "auto"),
    ("mlp_regression", {"train_size": 512, "dev_size": 64}, "off"),  # the probe at every update
    ("digits_cnn", {}, "auto"),
])
def test_an_update_waits_for_the_gpu_nowhere(
    monkeypatch: pytest.MonkeyPatch, workload: str, options: dict[str, Any], fuse: str
) -> None:
    config = TrialConfig.model_validate({
        "name": "syncs", "workload": workload, "workload_options": options, "world_size": 4,
        "physical_workers": 1, "per_worker_batch": 8, "accum_grad": 2, "fuse": fuse,
        "optimizer": {"type": "adam", "lr": 3e-3}, "scheduler": {"type": "constant"},
        "grad_clip": 1.0, "total_updates": 20, "eval_every": 10, "use_gpu": True})
    update = loop._Trial._update

    def strict(self: Any, ddp: torch.nn.Module, step: int) -> None:
        torch.cuda.set_sync_debug_mode("error")
        try:
            update(self, ddp, step)
        finally:
            torch.cuda.set_sync_debug_mode("default")

    monkeypatch.setattr(loop._Trial, "_update", strict)
    reports: list[dict[str, Any]] = []
    loop.train(config, LocalWorld(torch.device("cuda", 0)), on_report=lambda m, _: reports.append(m))
    assert [(m["update"], m["status"]) for m in reports] == [(10, "running"), (20, "completed")]
