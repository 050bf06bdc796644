"""Host syncs per update in the built-in loop (issue 51, item 2), counted on a CPU.

A read of a tensor's value on the host (``.item()``, ``float(t)``, ``int(t)``, ``bool(t)``,
``t[:n]`` with a tensor ``n``, ``.tolist()``, ``.numpy()``, ``.cpu()``) waits, on a GPU, for
everything queued before it. The loop's rule (loop.py's module doc, "Host syncs"): an update
reads nothing; the updates' values are read in one copy at every report and at every
``DIVERGENCE_EVERY``-th update. So between reports the loop and the built-in workloads make
0 reads per update, and each read point exactly 1.

What is counted: reads made by scalesweep's own code (the loop, the built-in workloads),
found by wrapping ``torch.Tensor``'s read methods during a short trial. Reads inside torch are
left out: Adam's step counters are host tensors by torch's design (no device sync), and
float16's GradScaler reads its inf/nan flag inside ``step`` (a sync the loop cannot avoid; these
trials are float64). Not visible on a CPU: a blocking host-to-device copy, and syncs inside
torch's kernels (``F.ctc_loss`` on CUDA copies its lengths to the host).

The same trials are bit for bit what the loop made before it deferred its reads: reports and
final parameters against values recorded from the loop as it was (torch 2.13.0, CPU, float64),
and, on any machine, against the loop reading after every update (DIVERGENCE_EVERY = 1).
"""

from __future__ import annotations

import hashlib
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch

from scalesweep.trainables import loop
from scalesweep.trainables.config import TrialConfig
from scalesweep.trainables.loop import DIVERGENCE_EVERY, train
from scalesweep.trainables.world import LocalWorld

MLP = {"train_size": 256, "dev_size": 96}
#: one narrow conformer block on short utterances: float64 on a CPU stays fast
ASR = {"train_size": 64, "dev_size": 8, "d_model": 8, "num_blocks": 1, "max_frames": 40}
#: the tensor methods through which Python reads a value on the host
READS = ("item", "tolist", "numpy", "cpu", "__float__", "__int__", "__bool__", "__index__")

#: (update, train_loss, dev_loss, noise_scale[, dev_ter]) per report and the final parameters'
#: sha256, recorded from the loop before its reads were deferred (torch 2.13.0+cpu, float64)
RECORDED_ON = "2.13.0+cpu"
RECORDED: dict[str, tuple[list[tuple[float, ...]], str]] = {
    "mlp_regression": (
        [(10, 0.9207246945112686, 0.7531593207222761, 22.983445798984825),
         (20, 0.6501664231648729, 0.5832080507214809, 29.39421321095249)],
        "e6a6e034bb3033902b58ac0a4be6e0763db95cea42165bbc6f5bc5052edf6602"),
    "mlp_regression_unfused": (
        [(10, 0.9207246945112688, 0.7531593207222761, 25.486219012906353),
         (20, 0.6501664231648729, 0.5832080507214809, 28.363007458795977)],
        "ebdcbabeacdfa5c5b206421216d2d16e9bd2d04baf0800555aabe6fef9e24a69"),
    "mini_asr": (
        [(9, 15.81417436903672, 14.159195626459494, 0.5166574951448971, 1.0),
         (17, 13.171814839444869, 13.405162737946235, 0.5854372353744772, 1.0)],
        "4e1811f1d740432df29ede9d96eed166853f1f7b583d6d2eeb2e162f2cd502f8"),
}


def _config(**overrides: Any) -> TrialConfig:
    base: dict[str, Any] = {
        "name": "t", "workload": "mlp_regression", "workload_options": MLP,
        "world_size": 4, "physical_workers": 1, "per_worker_batch": 8, "accum_grad": 2,
        "optimizer": {"type": "adam", "lr": 3e-3}, "scheduler": {"type": "warmuplr", "warmup_steps": 5},
        "total_updates": 20, "eval_every": 10, "dtype": "float64",
    }  # fmt: skip
    return TrialConfig(**{**base, **overrides})


#: 20 updates, reports at 10 and 20, a read at 16 between them
TRIALS = {
    "mlp_regression": _config(),  # fused passes; the noise scale at every 4th update
    "mlp_regression_unfused": _config(fuse="off"),  # per virtual rank; the noise scale at every update
    "mini_asr": _config(workload="mini_asr", workload_options=ASR, per_worker_batch=4, accum_grad=1,
                        total_updates=17, eval_every=9),  # reports at 9 and 17, a read at 16
}


class _Reads:
    """Counts scalesweep's reads of tensor values: per update outside the read points and the
    reports, and at each read point (``_Trial._read_pending``)."""

    def __init__(self) -> None:
        self.phase: str | None = None  # None: not counting (setup, reports)
        self.updates: Counter[str] = Counter()  # where, outside read points and reports
        self.at_reads: list[int] = []  # reads made at each read point

    def wrap(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        def counted(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            caller = sys._getframe(1)
            if self.phase is not None and caller.f_globals.get("__name__", "").startswith("scalesweep."):
                site = f"{caller.f_globals['__name__']}:{caller.f_lineno} {name}"
                if self.phase == "update":
                    self.updates[site] += 1
                else:
                    self.at_reads[-1] += 1
            return method(tensor, *args, **kwargs)

        return counted

    @contextmanager
    def phase_(self, phase: str | None) -> Iterator[None]:
        before, self.phase = self.phase, phase
        try:
            yield
        finally:
            self.phase = before


def _count(monkeypatch: pytest.MonkeyPatch, config: TrialConfig) -> tuple[_Reads, list[dict[str, Any]], str]:
    """Run ``config`` counting reads; its reports and its final parameters' digest."""
    reads = _Reads()
    for name in READS:
        monkeypatch.setattr(torch.Tensor, name, reads.wrap(name, getattr(torch.Tensor, name)))
    trial = loop._Trial
    run, metrics, report, read_pending = trial.run, trial._metrics, trial._report, trial._read_pending

    def counted_run(self: Any, *args: Any) -> Any:
        with reads.phase_("update"):
            return run(self, *args)

    def uncounted_metrics(self: Any, *args: Any) -> Any:
        with reads.phase_(None):
            return metrics(self, *args)

    def uncounted_report(self: Any, *args: Any, **kwargs: Any) -> Any:
        with reads.phase_(None):
            return report(self, *args, **kwargs)

    def counted_read(self: Any) -> Any:
        reads.at_reads.append(0)
        with reads.phase_("read"):
            return read_pending(self)

    models: list[torch.nn.Module] = []
    original_init = trial.__init__

    def keep_model(self: Any, *args: Any) -> None:
        original_init(self, *args)
        models.append(self.model)

    monkeypatch.setattr(trial, "run", counted_run)
    monkeypatch.setattr(trial, "_metrics", uncounted_metrics)
    monkeypatch.setattr(trial, "_report", uncounted_report)
    monkeypatch.setattr(trial, "_read_pending", counted_read)
    monkeypatch.setattr(trial, "__init__", keep_model)
    reports: list[dict[str, Any]] = []
    train(config, LocalWorld(), on_report=lambda m, _: reports.append(m))
    monkeypatch.undo()
    return reads, reports, _digest(models[-1])


def _digest(model: torch.nn.Module) -> str:
    h = hashlib.sha256()
    for key, value in model.state_dict().items():
        h.update(key.encode())
        h.update(value.detach().numpy().tobytes())
    return h.hexdigest()


def _without_time(reports: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in m.items() if k != "wall_s"} for m in reports]


@pytest.mark.parametrize("name", list(TRIALS))
def test_an_update_reads_nothing_and_each_read_point_once(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    config = TRIALS[name]
    reads, reports, digest = _count(monkeypatch, config)
    assert dict(reads.updates) == {}, f"reads per update in {name}: {dict(reads.updates)}"
    # read points: every report and every DIVERGENCE_EVERY-th update, one copy each
    points = sorted({m["update"] for m in reports}
                    | set(range(DIVERGENCE_EVERY, config.total_updates + 1, DIVERGENCE_EVERY)))
    assert reads.at_reads == [1] * len(points)

    # bit for bit the loop as it was: recorded values (this torch), and the loop reading at
    # every update (any torch), which is what it did before
    got = [(m["update"], m["train_loss"], m["dev_loss"], m["noise_scale"])
           + ((m["dev_ter"],) if "dev_ter" in m else ()) for m in reports]
    if torch.__version__ == RECORDED_ON:
        assert (got, digest) == RECORDED[name]
    monkeypatch.setattr(loop, "DIVERGENCE_EVERY", 1)
    every: list[dict[str, Any]] = []
    train(config, LocalWorld(), on_report=lambda m, _: every.append(m))
    assert _without_time(every) == _without_time(reports)


def test_a_divergence_between_sparse_evals_ends_the_trial_at_the_next_read() -> None:
    # diverged (mean training loss above the threshold) from update 1, evals only at 40: the
    # trial ends at the first read, update DIVERGENCE_EVERY, with a report and a checkpoint
    reports: list[tuple[dict[str, Any], str | None]] = []
    final = train(_config(divergence_threshold=1e-6, total_updates=40, eval_every=40), LocalWorld(),
                  on_report=lambda m, d: reports.append((m, d)))
    assert [(m["update"], m["status"], d is not None) for m, d in reports] == [
        (DIVERGENCE_EVERY, "diverged", True)]
    assert final["update"] == DIVERGENCE_EVERY and final["status"] == "diverged"
    assert final["samples_seen"] == DIVERGENCE_EVERY * 64  # the report is of that update


def test_a_non_finite_loss_is_seen_at_a_read_point() -> None:
    reports: list[dict[str, Any]] = []
    final = train(_config(optimizer={"type": "sgd", "lr": 1e4}, total_updates=200, eval_every=100),
                  LocalWorld(), on_report=lambda m, _: reports.append(m))
    assert final["status"] == "diverged" and [m["status"] for m in reports] == ["diverged"]
    assert final["update"] % DIVERGENCE_EVERY == 0 and final["update"] < 100
