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
        [(5, 1.0147069455047415, 0.9004439907959276, 25.415405650730037),
         (10, 0.8267424435177961, 0.7531593207222761, 22.983445798984825)],
        "d5912ffd5ddcf96e94e691401f66eea29a375cb5b6b37dcdf05a302293b13c27"),
    "mlp_regression_unfused": (
        [(5, 1.0147069455047415, 0.9004439907959276, 21.48374162001302),
         (10, 0.8267424435177961, 0.7531593207222761, 25.486219012906353)],
        "22d9445f61a7794f74e2b67d8bb93cbd0ed3332e922cdf66e89cd2cec4926ac4"),
    "mini_asr": (
        [(5, 17.335297049849245, 14.898497617530483, 0.5468281203457147, 1.0),
         (9, 13.912771018021061, 14.159195626459494, 0.5166574951448971, 1.0)],
        "6862e6366b4d2d25c212e6e9329f104bf89625182ef830fd9a467a16fb7b16fb"),
}


def _config(**overrides: Any) -> TrialConfig:
    base: dict[str, Any] = {
        "name": "t", "workload": "mlp_regression", "workload_options": MLP,
        "world_size": 4, "physical_workers": 1, "per_worker_batch": 8, "accum_grad": 2,
        "optimizer": {"type": "adam", "lr": 3e-3}, "scheduler": {"type": "warmuplr", "warmup_steps": 5},
        "total_updates": 10, "eval_every": 5, "dtype": "float64",
    }  # fmt: skip
    return TrialConfig(**{**base, **overrides})


#: the read cadence in the counting test: read points between the reports in few updates (the
#: results do not depend on it, which the test checks too)
EVERY = 4
#: reports at 5 and 10 (mini_asr: 5 and 9), read points between them at 4 and 8
TRIALS = {
    "mlp_regression": _config(),  # fused passes; the noise scale at every 4th update
    "mlp_regression_unfused": _config(fuse="off"),  # per virtual rank; the noise scale at every update
    "mini_asr": _config(workload="mini_asr", workload_options=ASR, per_worker_batch=4, accum_grad=1,
                        total_updates=9, eval_every=5),
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
    monkeypatch.setattr(loop, "DIVERGENCE_EVERY", EVERY)
    reads, reports, digest = _count(monkeypatch, config)
    assert dict(reads.updates) == {}, f"reads per update in {name}: {dict(reads.updates)}"
    # read points: every report and every EVERY-th update, one copy each
    points = sorted({m["update"] for m in reports} | set(range(EVERY, config.total_updates + 1, EVERY)))
    assert len(points) == 4 and reads.at_reads == [1] * len(points)

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


# -- the workloads' data on the device ---------------------------------------------------------


def _tensors(batch: Any) -> list[torch.Tensor]:
    return [t for t in batch if isinstance(t, torch.Tensor)]


@pytest.mark.parametrize("name", ["mlp_regression", "mini_asr", "digits_cnn"])
def test_a_placed_workload_makes_its_batches_on_the_device(name: str) -> None:
    """"meta" stands in for a GPU: every tensor of a placed workload's batches is there (none
    made on the host and left behind), with the shapes and dtypes of the host's batches."""
    from scalesweep.trainables import workloads

    options = {"mlp_regression": MLP, "mini_asr": ASR, "digits_cnn": {}}[name]
    host, placed = workloads.make(name, options), workloads.make(name, options)
    placed.place(torch.device("meta"))  # type: ignore[attr-defined]
    indices = [5, 0, 3, 3]
    for a, b in [(host.train_batch(indices), placed.train_batch(indices)),
                 (next(iter(host.dev_batches(3))), next(iter(placed.dev_batches(3))))]:
        assert [t.device.type for t in _tensors(b)] == ["meta"] * len(_tensors(a))
        assert [(t.shape, t.dtype) for t in _tensors(b)] == [(t.shape, t.dtype) for t in _tensors(a)]


@pytest.mark.parametrize("name", ["mlp_regression", "mini_asr", "digits_cnn"])
def test_placed_on_the_host_the_batches_are_the_same(name: str) -> None:
    from scalesweep.trainables import workloads

    options = {"mlp_regression": MLP, "mini_asr": ASR, "digits_cnn": {}}[name]
    host, placed = workloads.make(name, options), workloads.make(name, options)
    placed.place(torch.device("cpu"))  # type: ignore[attr-defined]
    pairs = [(host.train_batch([7, 1, 1, 4]), placed.train_batch([7, 1, 1, 4])),
             *zip(host.dev_batches(5), placed.dev_batches(5), strict=True)]
    for a, b in pairs:
        assert all(torch.equal(x, y) and x.dtype == y.dtype
                   for x, y in zip(_tensors(a), _tensors(b), strict=True))


class _Unplaced:
    """A workload without ``place`` (as a user's may be): the loop moves its batches."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.metrics, self.defaults, self.fusable = inner.metrics, inner.defaults, inner.fusable

    def __getattr__(self, name: str) -> Any:
        if name == "place":
            raise AttributeError(name)
        return getattr(self.inner, name)


def test_a_workload_without_place_trains_as_before() -> None:
    from scalesweep.trainables import workloads

    config = _config(total_updates=8, eval_every=4)
    unplaced = _Unplaced(workloads.make("mlp_regression", MLP))
    assert not hasattr(unplaced, "place")
    a: list[dict[str, Any]] = []
    b: list[dict[str, Any]] = []
    train(config, LocalWorld(), on_report=lambda m, _: a.append(m))
    train(config, LocalWorld(), on_report=lambda m, _: b.append(m), workload=unplaced)
    assert _without_time(a) == _without_time(b)


def test_fused_seeds_read_nothing_per_update_and_each_read_point_once() -> None:
    # as the loop: between evals a fused update reads nothing, a read point one copy for every
    # seed; a 64-update trial has two read points (32, 48) more than a 32-update one
    from scalesweep.trainables.seed_fusion import train_seeds

    def reads(updates: int) -> int:
        config = _config(workload="mini_asr", workload_options=ASR, world_size=2, per_worker_batch=2,
                         accum_grad=1, total_updates=updates, eval_every=updates)
        count = 0

        def counted(method: Callable[..., Any]) -> Callable[..., Any]:
            def wrapper(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
                nonlocal count
                count += sys._getframe(1).f_globals.get("__name__", "").startswith("scalesweep.")
                return method(tensor, *args, **kwargs)
            return wrapper

        with pytest.MonkeyPatch.context() as mp:
            for name in READS:
                mp.setattr(torch.Tensor, name, counted(getattr(torch.Tensor, name)))
            train_seeds(config, [0, 1], on_report=lambda seed, metrics, directory: None)
        return count

    assert DIVERGENCE_EVERY == 16
    assert reads(64) - reads(32) == 2
