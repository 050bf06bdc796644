"""Checkpoints written atomically and checked before use (scalesweep.trainables.checkpointing):
a torn one is named and passed over for the previous whole one, and a checkpoint written before
the science/ split (and before meta.json listed its files) still resumes its trial."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from scalesweep.trainables import checkpointing
from scalesweep.trainables.config import TrialConfig
from scalesweep.trainables.loop import train
from scalesweep.trainables.world import LocalWorld

#: made by the code of commit 459ec22 (the pre-split layout): the trial below, at update 6
OLD = Path(__file__).parents[1] / "data" / "checkpoint_before_science_split"


def _config() -> TrialConfig:
    return TrialConfig(
        name="t", workload="mlp_regression", workload_options={"train_size": 256, "dev_size": 96},
        world_size=4, physical_workers=1, per_worker_batch=8, accum_grad=2,
        optimizer={"type": "adam", "lr": 3e-3}, scheduler={"type": "warmuplr", "warmup_steps": 5},
        total_updates=14, eval_every=4, dtype="float64", checkpoint_every=6)


def _checkpoints(tmp_path: Path) -> list[Path]:
    """Every checkpoint the trial writes, copied out, in order (6, 12, 14)."""
    kept: list[Path] = []

    def keep(metrics: dict[str, Any], directory: str | None) -> None:
        if directory is not None:
            kept.append(Path(shutil.copytree(directory, tmp_path / f"ckpt-{metrics['update']}")))

    train(_config(), LocalWorld(), on_report=keep)
    return kept


def test_a_checkpoint_lists_its_files_and_leaves_no_temporary_name(tmp_path: Path) -> None:
    first = _checkpoints(tmp_path)[0]
    meta = json.loads((first / checkpointing.META_FILE).read_text())
    state = first / checkpointing.STATE_FILE
    assert meta["files"][checkpointing.STATE_FILE]["size"] == state.stat().st_size
    assert len(meta["files"][checkpointing.STATE_FILE]["sha256"]) == 64
    assert sorted(p.name for p in first.iterdir()) == [checkpointing.META_FILE, checkpointing.STATE_FILE]
    assert checkpointing.incomplete(first) is None


def test_torn_checkpoints_are_told_apart_from_whole_ones(tmp_path: Path) -> None:
    ckpt = _checkpoints(tmp_path)[0]
    state = ckpt / checkpointing.STATE_FILE
    whole = state.read_bytes()
    state.write_bytes(whole[: len(whole) // 2])  # a copy cut short
    assert "has" in str(checkpointing.incomplete(ckpt)) and "bytes" in str(checkpointing.incomplete(ckpt))
    flipped = bytearray(whole)
    flipped[len(whole) // 2] ^= 0xFF  # same size, other bytes
    state.write_bytes(bytes(flipped))
    assert "checksum" in str(checkpointing.incomplete(ckpt))
    state.write_bytes(whole)
    assert checkpointing.incomplete(ckpt) is None
    (ckpt / checkpointing.META_FILE).unlink()  # killed before the last file
    assert checkpointing.incomplete(ckpt) == "no meta.json"


def test_the_newest_whole_checkpoint_is_taken_and_the_torn_one_named(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    at6, at12, _ = _checkpoints(tmp_path)
    (at12 / checkpointing.STATE_FILE).write_bytes(b"torn")
    assert checkpointing.newest_complete([at12, at6], label="t") == at6
    err = capsys.readouterr().err
    assert f"t: torn checkpoint {at12}" in err and f"resuming from the previous one, {at6}" in err
    (at6 / checkpointing.META_FILE).unlink()
    assert checkpointing.newest_complete([at12, at6]) is None
    assert "no whole checkpoint" in capsys.readouterr().err


def test_a_checkpoint_from_before_the_split_resumes_its_trial(tmp_path: Path) -> None:
    assert "files" not in json.loads((OLD / checkpointing.META_FILE).read_text())
    assert checkpointing.incomplete(OLD) is None
    whole: list[dict[str, Any]] = []
    train(_config(), LocalWorld(), on_report=lambda m, d: whole.append(m))
    resumed: list[dict[str, Any]] = []
    train(_config(), LocalWorld(), on_report=lambda m, d: resumed.append(m), resume_from=OLD)
    assert [m["update"] for m in resumed] == [8, 12, 14]
    after = [m for m in whole if m["update"] > 6]
    for a, b in zip(after, resumed, strict=True):
        # float64; the stored state was computed on another machine, so not bit for bit
        assert b["dev_loss"] == pytest.approx(a["dev_loss"], rel=1e-9)
        assert b["train_loss"] == pytest.approx(a["train_loss"], rel=1e-9)
