"""benchmarks.study_speed's own arithmetic (its quick mode runs two studies, minutes on a busy
machine, so it is not in tests/integration/test_benchmarks_quick.py): which trial process
trained which seed, the training seconds summed per process, the decisions compared, and
the device's busy share read off nvidia-smi."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

from benchmarks.study_speed import DeviceBusy, compare_decisions, processes, train_seconds

NAMES = ["ws4-warmup300-none-s0", "ws4-warmup300-none-s1", "ws4-warmup300-none-s2",
         "ws16-warmup300-none-s0", "ws16-warmup300-none-s1"]


def test_a_fused_trial_owns_its_seeds_and_any_other_name_is_its_own_process() -> None:
    # seeds 0+1 of ws4 fused, seed 2 (a later round) alone; ws16's seeds each solo
    tune = ["ws4-warmup300-none-seeds0+1", "ws4-warmup300-none-s2", "ws16-warmup300-none-s0",
            "ws16-warmup300-none-s1"]
    assert processes(NAMES, tune) == [["ws4-warmup300-none-s0", "ws4-warmup300-none-s1"],
                                      ["ws4-warmup300-none-s2"], ["ws16-warmup300-none-s0"],
                                      ["ws16-warmup300-none-s1"]]
    # a seed number is matched whole: seeds1+12 owns s1 and s12, not s2
    assert processes(["a-s1", "a-s12", "a-s2"], ["a-seeds1+12"]) == [["a-s1", "a-s12"], ["a-s2"]]
    # solo: no fused directory, every seed its own process
    assert processes(NAMES, NAMES) == [[n] for n in NAMES]


def test_a_fused_process_trained_as_long_as_its_last_seed() -> None:
    clocks = [10.0, 12.5, 4.0, 3.0, None]
    trials = [{"name": n, "train_seconds": s} for n, s in zip(NAMES, clocks, strict=True)]
    fused = ["ws4-warmup300-none-seeds0+1+2", "ws16-warmup300-none-seeds0+1"]
    assert train_seconds(trials, fused) == 12.5 + 3.0
    assert train_seconds(trials, []) == 10.0 + 12.5 + 4.0 + 3.0  # a missing clock counts 0


def test_decisions_differ_when_any_arm_of_any_repeat_differs_or_is_missing() -> None:
    today = {"ws16": "slower", "ws4": "baseline"}
    rows, same = compare_decisions([(today, dict(today)), (today, dict(today))])
    assert same and [(r["repeat"], r["arm"], r["same"]) for r in rows] == [
        ("1", "ws16", "yes"), ("1", "ws4", "yes"), ("2", "ws16", "yes"), ("2", "ws4", "yes")]
    rows, same = compare_decisions([(today, dict(today)), (today, {**today, "ws16": "not resolved"})])
    assert not same and [r["same"] for r in rows] == ["yes", "yes", "NO", "yes"]
    rows, same = compare_decisions([(today, {"ws4": "baseline"})])
    assert not same and rows[0] == {"repeat": "1", "arm": "ws16", "today": "slower", "fused": None,
                                    "same": "NO"}


def test_the_busy_share_is_the_mean_of_nvidia_smis_utilisation_samples(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # an nvidia-smi that prints three samples (one unreadable) and ends: the share is read off
    # what it printed, and it was asked for GPU 0's utilisation every 200 ms
    fake = tmp_path / "nvidia-smi"
    fake.write_text(f'#!/bin/sh\necho "$@" > {tmp_path}/args\nprintf "50\\n[N/A]\\n100\\n"\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    with DeviceBusy() as sampler:
        assert sampler._thread is not None
        sampler._thread.join(timeout=30)  # the fake's output read to its end
    assert sampler.samples == [0.5, 1.0] and sampler.busy == 0.75
    assert (tmp_path / "args").read_text().split() == [
        "--id=0", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits", "-lms", "200"]
    assert math.isnan(DeviceBusy().busy)  # no sample: unknown, not idle
