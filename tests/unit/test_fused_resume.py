"""A fused trial goes on from its seeds' checkpoints (trial_driver.train_fused; docs/design.md,
"Fused seeds"): the checkpoints are those real fused runs wrote, laid out as Tune persists a
fused trial's (``tune/<arm>-seeds0+4/checkpoint_N/<seed trial>/``), and every seed's reports
after its checkpoint equal its uninterrupted run's (float64; to 1e-6), with none before it.

No Ray: ``report`` stands in for ``ray.tune.report`` by copying each checkpoint where Tune
would keep it, the two newest only (the sweep's ``CheckpointConfig(num_to_keep=2)``).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from scalesweep.trainables import checkpointing, trial_driver
from scalesweep.trainables.config import TrialConfig, TrialJob

RTOL = 1e-6
NAMES = {0: "arm-s0", 4: "arm-s4"}
FUSED = "arm-seeds0+4"
KEYS = ("update", "samples_seen", "epoch", "train_loss", "dev_loss", "lr", "status")
Reports = dict[int, list[dict[str, Any]]]


def _job(**overrides: Any) -> TrialJob:
    base: dict[str, Any] = {
        "name": FUSED, "workload": "mlp_regression", "workload_options": {"train_size": 256, "dev_size": 64},
        "world_size": 2, "physical_workers": 1, "per_worker_batch": 4, "accum_grad": 2,
        "optimizer": {"type": "adam", "lr": 3e-3}, "scheduler": {"type": "warmuplr", "warmup_steps": 3},
        "total_updates": 6, "eval_every": 2, "checkpoint_every": 2, "dtype": "float64", **overrides,
    }  # fmt: skip
    trial = TrialConfig(**base)
    return TrialJob(trial=trial, seeds=tuple(trial.model_copy(update={"seed": s, "name": n})
                                             for s, n in NAMES.items()))


class _Tune:
    """What Tune does with a fused trial's reports: the reports in order, each checkpoint
    copied to ``<sweep>/tune/<fused>/checkpoint_N`` (the two newest kept); ``fail_at``: raise
    at the first report of that update, as a trial that dies there."""

    def __init__(self, sweep_dir: Path, fail_at: int | None = None) -> None:
        self.trial_dir = sweep_dir / "tune" / FUSED
        self.reports: Reports = {s: [] for s in NAMES}
        self.fail_at = fail_at
        self.kept: list[Path] = sorted(self.trial_dir.glob("checkpoint_*"))

    def report(self, seed: int, metrics: dict[str, Any], checkpoint_dir: str | None) -> None:
        if metrics["update"] == self.fail_at:
            raise RuntimeError(f"trial died at update {self.fail_at}")
        self.reports[seed].append(metrics)
        if checkpoint_dir is not None:
            n = int(self.kept[-1].name.split("_")[1]) + 1 if self.kept else 0
            self.kept.append(self.trial_dir / f"checkpoint_{n:06d}")
            shutil.copytree(checkpoint_dir, self.kept[-1])
            while len(self.kept) > 2:
                shutil.rmtree(self.kept.pop(0))


def _run(job: TrialJob, sweep_dir: Path, fail_at: int | None = None) -> Reports:
    tune = _Tune(sweep_dir, fail_at)
    if fail_at is None:
        trial_driver.train_fused(job, tune.report, own=None, sweep_dir=sweep_dir)
    else:
        with pytest.raises(RuntimeError, match="trial died"):
            trial_driver.train_fused(job, tune.report, own=None, sweep_dir=sweep_dir)
    return tune.reports


@pytest.fixture(scope="module")
def whole(tmp_path_factory: pytest.TempPathFactory) -> tuple[Reports, Path]:
    """The uninterrupted fused run: its reports and its sweep directory."""
    sweep_dir = tmp_path_factory.mktemp("whole")
    return _run(_job(), sweep_dir), sweep_dir


def _same(got: list[dict[str, Any]], want: list[dict[str, Any]], where: str) -> None:
    assert [r["update"] for r in got] == [r["update"] for r in want], where
    for g, w in zip(got, want, strict=True):
        for key in KEYS:
            if isinstance(w[key], float):
                assert g[key] == pytest.approx(w[key], rel=RTOL, abs=1e-12), f"{where} {key} @ {w['update']}"
            else:
                assert g[key] == w[key], f"{where} {key} @ {w['update']}"


def _updates(sweep_dir: Path, name: str) -> list[int]:
    """The updates of ``name``'s checkpoints in those Tune keeps of the fused trial."""
    return sorted(int(_meta(p)["update"]) for p in (sweep_dir / "tune" / FUSED).glob(f"checkpoint_*/{name}"))


def _meta(checkpoint: Path) -> dict[str, Any]:
    progress: dict[str, Any] = json.loads((checkpoint / checkpointing.META_FILE).read_text())["progress"]
    return progress


def test_a_fused_trial_that_died_goes_on_from_its_seeds_checkpoints(
        tmp_path: Path, whole: tuple[Reports, Path]) -> None:
    reports, _ = whole
    assert [r["update"] for r in reports[0]] == [2, 4, 6]
    # dies at update 6, after its checkpoints at updates 2 and 4; the retry makes only update 6
    _run(_job(), tmp_path, fail_at=6)
    assert _updates(tmp_path, "arm-s0") == _updates(tmp_path, "arm-s4") == [2, 4]
    resumed = _run(_job(), tmp_path)
    for seed in NAMES:
        _same(resumed[seed], [r for r in reports[seed] if r["update"] > 4], f"seed {seed}")


def test_seeds_whose_checkpoints_disagree_each_go_on_from_their_own(
        tmp_path: Path, whole: tuple[Reports, Path]) -> None:
    reports, _ = whole
    _run(_job(), tmp_path, fail_at=6)
    # seed 4's newest checkpoint torn (a copy cut short): it goes on from update 2, seed 0
    # from update 4; neither trains a step twice
    newest = sorted((tmp_path / "tune" / FUSED).glob("checkpoint_*"))[-1]
    (newest / "arm-s4" / checkpointing.STATE_FILE).write_bytes(b"torn")
    found = trial_driver.fused_checkpoints(NAMES, None, tmp_path)
    assert trial_driver.fused_groups(found, list(NAMES)) == [([0], 4), ([4], 2)]
    resumed = _run(_job(), tmp_path)
    _same(resumed[0], [r for r in reports[0] if r["update"] > 4], "seed 0")
    _same(resumed[4], [r for r in reports[4] if r["update"] > 2], "seed 4")


def test_a_seed_that_ended_is_not_trained_again_and_its_checkpoint_is_carried(
        tmp_path: Path, whole: tuple[Reports, Path]) -> None:
    reports, whole_dir = whole
    _run(_job(), tmp_path, fail_at=6)
    # seed 0 had ended (its completed checkpoint, from the uninterrupted run), seed 4 had not
    final = sorted((whole_dir / "tune" / FUSED).glob("checkpoint_*"))[-1] / "arm-s0"
    assert _meta(final)["status"] == "completed"
    ended = tmp_path / "tune" / "arm-s0" / "checkpoint_000009"  # as a solo trial's would lie
    shutil.copytree(final, ended)
    resumed = _run(_job(), tmp_path)
    assert resumed[0] == []
    _same(resumed[4], [r for r in reports[4] if r["update"] > 4], "seed 4")
    # the checkpoint taken at seed 4's update 6 holds seed 0's final one too
    newest = sorted((tmp_path / "tune" / FUSED).glob("checkpoint_*"))[-1]
    assert sorted(p.name for p in newest.iterdir()) == ["arm-s0", "arm-s4"]
    assert _meta(newest / "arm-s0") == _meta(ended) and checkpointing.incomplete(newest / "arm-s0") is None
    # every seed ended: nothing left to train
    assert _run(_job(), tmp_path) == {0: [], 4: []}
