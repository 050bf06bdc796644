"""The benchmark scripts cannot rot: each one's ``--quick`` mode runs and writes its tables.

Checks sanity, not targets: every table has rows, every timing, rate and ratio column is a
finite number > 0, every difference column is finite, and the markdown and JSON agree on the
tables. The quick modes that use Ray join the xdist worker's session Ray head (RAY_ADDRESS, as
``scalesweep run`` would), instead of each starting a local Ray of its own: they run beside the
other tests then, not in the ``local_ray`` group. ``benchmarks/README.md``'s own runs start their
own Ray.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from benchmarks._common import Column, Report, Table
from tests.conftest import RayHead
from tests.support.helpers import ROOT, bounded_run, cli_env

SCRIPTS = ["loop_efficiency", "logging_cost", "backends", "overhead", "scale", "fusion", "study_wall",
           "predict_backtest", "mlperf_lr_transfer",
           "adaptive_cost"]
#: the quick modes that use Ray (in process, or through `scalesweep run`)
USES_RAY = {"backends", "overhead", "scale", "study_wall", "adaptive_cost"}


def check_results(out: Path, name: str) -> dict:
    data = json.loads((out / f"{name}.json").read_text())
    md = (out / f"{name}.md").read_text()
    assert data["benchmark"] == name
    for key in ("cores", "memory_gib", "python", "torch", "ray", "mlflow"):
        assert data["machine"][key], key
    assert len(data["load_before"]) == 3 and len(data["load_after"]) == 3
    assert data["tables"], "no tables"
    for table in data["tables"]:
        assert table["rows"], f"table {table['title']!r} is empty"
        assert f"**{table['title']}**" in md
        for col in table["columns"]:
            for row in table["rows"]:
                value = row.get(col["key"])
                if value is None or col["kind"] == "text":
                    continue
                where = f"{name}: {table['title']!r} column {col['label']!r} row {row}"
                assert isinstance(value, int | float) and math.isfinite(value), where
                if col["kind"] == "positive":
                    assert value > 0, where
    for target in data["targets"]:
        assert isinstance(target["met"], bool)
    return data


def test_report_writes_markdown_and_json(tmp_path: Path) -> None:
    report = Report("unit", quick=True)
    report.tables.append(
        Table(
            "t",
            [Column("a", "A", "text"), Column("x", "X"), Column("d", "D", "number")],
            [{"a": "row", "x": 1.5, "d": -0.25}],
        )
    )
    report.target("x", 1.5, ">=", 1.0)
    report.target("d", -0.25, "<=", -1.0)
    report.finish(tmp_path)
    data = check_results(tmp_path, "unit")
    assert [t["met"] for t in data["targets"]] == [True, False]
    assert "| row | 1.5 | -0.25 |" in (tmp_path / "unit.md").read_text()


@pytest.mark.slow
@pytest.mark.timeout(1500)  # the quick mode's own subprocess bound
@pytest.mark.parametrize("name", SCRIPTS)
def test_quick_mode_produces_sane_tables(name: str, tmp_path: Path,
                                         request: pytest.FixtureRequest) -> None:
    ray_env: dict[str, str] = {}
    if name in USES_RAY:
        head: RayHead = request.getfixturevalue("ray_head")
        ray_env = {"RAY_ADDRESS": head.address, **head.env()}
    proc = bounded_run([sys.executable, "-m", f"benchmarks.{name}", "--quick", "--out", str(tmp_path)],
                       cwd=ROOT, env=cli_env(**ray_env), timeout=1500)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    check_results(tmp_path, name)
    assert "| ---" in proc.stdout or "|---" in proc.stdout  # the table was printed too


#: what every case of benchmarks.calibration's JSON list holds (issue #31, item 6)
CALIBRATION_FIELDS = ("case", "studies", "false_direction", "false_equivalent", "p_slower", "p_equivalent",
                      "p_not_resolved", "mean_seeds", "familywise_levels", "well_conditioned",
                      "p_resolved_well_conditioned", "p_resolved_flagged")


@pytest.mark.timeout(600)
def test_calibration_prints_its_json_list_of_cases(tmp_path: Path) -> None:
    proc = bounded_run(
        [sys.executable, "-m", "benchmarks.calibration", "--studies", "8", "--json", "--out", str(tmp_path)],
        cwd=ROOT, env=cli_env(), timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    cases = json.loads(proc.stdout)  # stdout is the list alone: the tables go to stderr
    assert {c["case"] for c in cases} >= {"A/A", "1.05", "1.10", "1.20", "plateau A/A"}
    for case in cases:
        assert all(key in case for key in CALIBRATION_FIELDS), case
        assert case["studies"] == 8 and 5 <= case["mean_seeds"] <= 10, case
        shares = [case[k] for k in ("p_slower", "p_equivalent", "p_not_resolved", "p_faster")]
        assert all(0 <= p <= 1 for p in shares) and sum(shares) == pytest.approx(1.0), case
        # equivalence is an error only on the band's edge or outside it
        assert (case["false_equivalent"] is None) == (case["ratio"] < 1.10), case
    assert check_results(tmp_path, "calibration")["raw"]["cases"] == cases


def _quick_on_head(name: str, out: Path, ray_head: RayHead) -> dict:
    """``benchmarks.<name> --quick`` on the session's Ray head; its checked results."""
    proc = bounded_run([sys.executable, "-m", f"benchmarks.{name}", "--quick", "--out", str(out)],
                       cwd=ROOT, env=cli_env(RAY_ADDRESS=ray_head.address, **ray_head.env()),
                       timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return check_results(out, name)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_report_cost_quick_mode_measures_an_own_loops_cost_per_eval(
        tmp_path: Path, ray_head: RayHead) -> None:
    # on the session's head, whose trials do not see the CLI's environment: the sweep's own
    # poll alone, 4 evals in one trial at world size 2 (two ranks; #34 item 4)
    data = _quick_on_head("report_cost", tmp_path, ray_head)
    rows = data["raw"]["own_loop"]
    assert [r["trial"] for r in rows] == ["ws2-warmup4-none"]
    assert all(r["variant"] == "sweep default" and r["evals"] == 4 for r in rows)
    assert [t["what"] for t in data["targets"]] == [
        "own loop's cost per eval over standalone, s (worst trial, median of repeats)"]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_solve_grid_quick_mode_runs_every_grid_point_once_beside_the_search(
        tmp_path: Path, ray_head: RayHead) -> None:
    """`solve --sampler grid` end to end (the benchmark's two solves, through the CLI): every
    point of the grid trains once, its trial-epochs are what its candidates trained, and the
    search and the grid each verify an answer."""
    data = _quick_on_head("solve_grid", tmp_path, ray_head)
    tpe, grid = data["raw"]["tpe"], data["raw"]["grid"]
    assert (tpe["answer"]["sampler"], grid["answer"]["sampler"]) == ("tpe", "grid")
    # lr factor 2..2.828 and warmup 5..10 at sqrt(2) steps: 2 x 3 points, each run once
    points = sorted((c["lr_factor"], c["warmup"]) for c in grid["candidates"])
    assert points == [(f, w) for f in (2.0, 2.83) for w in (5, 7, 10)]
    assert grid["answer"]["candidates_run"] == 6
    assert grid["answer"]["grid_trial_epochs"] == tpe["answer"]["grid_trial_epochs"] == 6 * 6
    assert grid["answer"]["search_trial_epochs_used"] == pytest.approx(
        sum(c["epochs"] for c in grid["candidates"]))
    assert 0 < len(tpe["candidates"]) < 6  # the search's budget: fewer than the grid's points
    for side in (tpe, grid):  # each verified one of its own candidates
        ran = [(c["lr_factor"], c["warmup"]) for c in side["candidates"]]
        assert (side["answer"]["lr_factor"], side["answer"]["warmup_steps"]) in ran
        assert side["answer"]["decision"] in ("faster", "equivalent", "slower", "not resolved")
    assert isinstance(data["raw"]["same_point"], bool)
