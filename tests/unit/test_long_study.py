"""sweeps/wenet_4v16_long.yaml stands in for WeNet's AISHELL job at its proportions (issue 33):
its `plan --json` puts every dimensionless regime row within 25 % of the job's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.helpers import scalesweep

SWEEPS = Path(__file__).resolve().parents[2] / "sweeps"
TOLERANCE = 0.25


def within(study: float, job: float) -> bool:
    return abs(study / job - 1.0) <= TOLERANCE


def _plan(sweep: str, cwd: Path, *sets: str) -> dict[str, dict[str, Any]]:
    """`plan --json` of a shipped sweep, its rows by arm."""
    done = scalesweep("plan", str(SWEEPS / sweep), "--json", *sets, cwd=cwd)
    assert done.returncode == 0, done.stderr
    return {r["arm"]: r for r in json.loads(done.stdout)}


@pytest.fixture(scope="module")
def regimes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    rows = _plan("wenet_4v16_long.yaml", tmp_path_factory.mktemp("plan"))
    return {arm: row["regime"] for arm, row in rows.items()}


@pytest.fixture(scope="module")
def short_plan(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """The shipped 4-epoch study's plan, as it stands."""
    return _plan("wenet_4v16.yaml", tmp_path_factory.mktemp("short"))


def test_the_four_arms_of_the_short_study(regimes: dict[str, dict[str, Any]]) -> None:
    assert sorted(regimes) == ["ws16-warmup100-linear", "ws16-warmup25-none", "ws16-warmup400-none",
                               "ws4-warmup400-none"]


def test_every_regime_row_is_within_25_percent_of_the_job(regimes: dict[str, dict[str, Any]]) -> None:
    for arm, r in regimes.items():
        study, job = r["study"], r["reference_job"]
        for row in ("warmup_share", "lr_end_over_peak"):
            assert within(study[row], job[row]), (arm, row, study[row], job[row])
    base, blog = regimes["ws4-warmup400-none"], regimes["ws16-warmup25-none"]
    for arm, r in regimes.items():
        # total updates relative to the baseline's (a quarter at 16 workers, as in the job)
        ratio = {k: r[k]["total_updates"] / base[k]["total_updates"] for k in ("study", "reference_job")}
        assert within(ratio["study"], ratio["reference_job"]), (arm, ratio)
    # the blog's warmup / 16 in epochs, relative to the baseline's warmup in epochs
    rel = {k: blog[k]["warmup_epochs"] / base[k]["warmup_epochs"] for k in ("study", "reference_job")}
    assert within(rel["study"], rel["reference_job"]) and rel["study"] == pytest.approx(0.25)
    # WeNet's own numbers, so that the comparison is with the job and not with itself
    assert base["reference_job"]["warmup_share"] == pytest.approx(25000 / 112560)
    assert base["study"]["warmup_share"] == pytest.approx(400 / 1792)


def test_the_shipped_short_study_is_not_at_the_jobs_proportions(
        short_plan: dict[str, dict[str, Any]]) -> None:
    # the check has teeth: wenet_4v16.yaml's baseline warmup is 59 % of its run against 22 %
    short = short_plan["ws4-warmup300-none"]["regime"]
    assert not within(short["study"]["warmup_share"], short["reference_job"]["warmup_share"])


#: docs/study.md, "The 4-epoch study on the cheaper instrument": wenet_4v16.yaml on the long
#: study's data (4096 short utterances, so 64 updates an epoch at 4 workers), run for the same
#: 512 updates with an eval every 16 of them, as the 4-epoch study's 4 epochs of 128
CHEAPER = ["--set", "workload.options.train_size=4096", "--set", "workload.options.dev_size=600",
           "--set", "workload.options.max_tokens=4", "--set", "training.epochs=8",
           "--set", "training.eval_every_epochs=0.25"]


def test_the_cheaper_instrument_check_keeps_the_short_studys_regime(
        short_plan: dict[str, dict[str, Any]], tmp_path: Path) -> None:
    short, cheaper = short_plan, _plan("wenet_4v16.yaml", tmp_path, *CHEAPER)
    assert sorted(short) == sorted(cheaper)
    for arm, row in short.items():
        study, other = row["regime"]["study"], cheaper[arm]["regime"]["study"]
        for key in ("total_updates", "warmup_share", "lr_end_over_peak"):
            assert other[key] == pytest.approx(study[key]), (arm, key)
        assert other["warmup_epochs"] == pytest.approx(2 * study["warmup_epochs"])  # half the data
        assert cheaper[arm]["eval_every"] == row["eval_every"]  # evals at the same updates
