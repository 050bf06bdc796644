"""`scalesweep plan` and `scalesweep lr` behave as docs/design.md §4.1 says, through the real CLI.

Most cases call ``scalesweep.orchestrator.cli.main(argv)`` in process (the CLI minus the interpreter start);
a few run the console script in a subprocess to prove the installed entry point is the same.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import struct
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from scalesweep.orchestrator.cli import main
from tests.support.helpers import SCALESWEEP, cli

ROOT = Path(__file__).resolve().parents[2]
SMOKE = str(ROOT / "sweeps" / "smoke.yaml")
WENET_SWEEP = str(ROOT / "sweeps" / "wenet_4v16.yaml")
WENET = str(ROOT / "recipes" / "wenet_conformer.yaml")
ONECYCLE = str(ROOT / "recipes" / "deepspeed_onecycle.json")
#: the fields docs/design.md §4.3 promises in every `plan --json` object
PLAN_JSON_FIELDS = ("world_size", "scaling_rule", "warmup_rule", "global_batch", "peak_lr",
                    "warmup_steps", "warmup_epochs", "updates_per_epoch", "total_updates",
                    "backend", "physical_workers", "accum_grad", "seed", "feasible")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
REL = 1e-12



def plan_json(argv: Sequence[str], capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    rows = json.loads(cli(["plan", *argv, "--json"], capsys))
    assert isinstance(rows, list)
    assert rows
    return rows


def parse_csv(text: str) -> tuple[list[str], list[list[float]]]:
    header, *lines = text.strip().split("\n")
    return header.split(","), [[float(x) for x in line.split(",")] for line in lines]


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def assert_plan_row(row: dict[str, Any]) -> None:
    for key in PLAN_JSON_FIELDS:
        assert key in row, key
    assert row["global_batch"] == row["world_size"] * row["per_worker_batch"] * row["accum_grad"]
    assert row["warmup_epochs"] == pytest.approx(row["warmup_steps"] / row["updates_per_epoch"],
                                                 rel=REL)
    assert 1 <= row["physical_workers"] <= row["world_size"]  # any P up to V (uneven shares)
    assert row["backend"] in ("ddp", "simulate")
    assert isinstance(row["feasible"], bool)


# --- plan ---------------------------------------------------------------------------------------


def test_plan_json_prints_the_documented_fields_for_the_smoke_sweep(
        cwd: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = plan_json([SMOKE], capsys)
    # ws 2 x 3 rules merge into one trial at the reference world size
    assert [(r["world_size"], r["scaling_rule"]) for r in rows] == [
        (2, "none"), (4, "none"), (4, "linear"), (4, "sqrt")]
    for row in rows:
        assert_plan_row(row)
        assert row["total_updates"] == math.ceil(6 * row["updates_per_epoch"])
        assert row["backend"] == "simulate" and row["physical_workers"] == 1
        assert row["feasible"] is True
    by_rule = {r["scaling_rule"]: r for r in rows if r["world_size"] == 4}
    base = rows[0]["peak_lr"]
    assert by_rule["linear"]["peak_lr"] == pytest.approx(2 * base, rel=REL)
    assert by_rule["sqrt"]["peak_lr"] == pytest.approx(math.sqrt(2) * base, rel=REL)
    assert list(cwd.iterdir()) == []  # planning writes nothing: no mlflow.db, no mlruns


def test_plan_prints_a_table(cwd: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = cli(["plan", SMOKE], capsys)
    assert out.startswith("study smoke: 4 trials")
    assert "ws4-warmup20-linear" in out


def test_set_world_size_and_backend(cwd: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """docs/design.md §4.1's own example, on the WeNet study (shrunk with a third --set to plan fast)."""
    rows = plan_json([WENET_SWEEP, "--set", "axes.world_size=[4]", "--set", "backend=ddp",
                      "--set", "workload.options.train_size=512", "--set", "replicates=null",
                      "--set", "axes.seed=[0]",
                      "--set", "exclude=[{world_size: 4, warmup_rule: 19}]"], capsys)
    assert len(rows) == 1
    (row,) = rows
    assert_plan_row(row)
    assert row["world_size"] == 4 and row["backend"] == "ddp"
    assert row["updates_per_epoch"] == 512 // (4 * 16)


def test_set_on_the_smoke_sweep(cwd: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = plan_json([SMOKE, "--set", "axes.world_size=[4]", "--set", "baseline.world_size=4",
                      "--set", "backend=ddp"], capsys)
    assert {r["world_size"] for r in rows} == {4}
    assert {r["backend"] for r in rows} == {"ddp"}
    for row in rows:
        assert_plan_row(row)
    rows = plan_json([SMOKE, "--set", "axes.world_size=[2, 4, 8]", "--set",
                      "training.per_worker_batch=8"], capsys)
    assert [r["world_size"] for r in rows] == [2, 4, 4, 4, 8, 8, 8]
    assert {r["world_size"]: r["global_batch"] for r in rows} == {2: 16, 4: 32, 8: 64}
    linear = {r["world_size"]: r["peak_lr"] for r in rows if r["scaling_rule"] == "linear"}
    # linear: 0.05 at the reference (ws 2), x4 at ws 8
    assert linear[8] == pytest.approx(4 * rows[0]["peak_lr"], rel=REL)


def test_console_script_plans_in_a_subprocess(tmp_path: Path) -> None:
    proc = subprocess.run([str(SCALESWEEP), "plan", SMOKE, "--json"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert len(rows) == 4
    for row in rows:
        assert_plan_row(row)
    assert list(tmp_path.iterdir()) == []


# --- lr -----------------------------------------------------------------------------------------
# `lr` runs in a subprocess: it imports no torch (~0.2 s a run), and in process its CSV goes to
# the wrong stream (see test_lr_in_process_writes_to_the_current_stdout).


def lr_cli(argv: Sequence[str], cwd: Path) -> str:
    """stdout of a successful `scalesweep lr ...` in ``cwd``."""
    proc = subprocess.run([str(SCALESWEEP), "lr", *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    return proc.stdout


def test_lr_wenet_recipe_is_the_wenet_formula(tmp_path: Path) -> None:
    base, w = 0.002, 25000  # optim_conf.lr, scheduler_conf.warmup_steps of the recipe
    header, rows = parse_csv(lr_cli([WENET, "--updates", str(4 * w)], tmp_path))
    assert header == ["update", "lr"]
    assert [int(r[0]) for r in rows] == list(range(1, 4 * w + 1))
    lr = {int(k): v for k, v in rows}
    for k in (1, w // 2, w, 2 * w, 4 * w):
        assert lr[k] == pytest.approx(base * min(k / w, math.sqrt(w / k)), rel=REL, abs=0), k
    assert lr[w] == base  # the peak, exactly
    assert max(lr.values()) == base
    assert lr[1] == pytest.approx(base / w, rel=REL)
    assert list(tmp_path.iterdir()) == []


def test_lr_prints_csv_one_row_per_update(tmp_path: Path) -> None:
    out = lr_cli([WENET, "--updates", "7"], tmp_path)
    assert out.splitlines()[0] == "update,lr"
    assert len(out.splitlines()) == 8


def test_lr_deepspeed_onecycle_has_momentum(tmp_path: Path) -> None:
    header, rows = parse_csv(lr_cli([ONECYCLE, "--updates", "3000"], tmp_path))
    assert header == ["update", "lr", "momentum"]
    assert len(rows) == 3000 and all(len(r) == 3 for r in rows)
    assert [int(r[0]) for r in rows] == list(range(1, 3001))
    lr = [r[1] for r in rows]
    mom = [r[2] for r in rows]
    # update 1 holds what the constructor set: cycle_min_lr, cycle_min_mom
    assert (lr[0], mom[0]) == (0.0001, 0.85)
    # the cycle peaks at cycle_max_lr after cycle_first_step_size steps (update 1001), where
    # momentum is at its lowest
    peak = max(range(3000), key=lambda i: lr[i])
    assert peak + 1 == 1001
    assert lr[peak] == pytest.approx(0.001, rel=REL)
    assert mom[peak] == pytest.approx(0.85, rel=REL)
    # after the cycle (2000 steps) lr decays from cycle_min_lr: min_lr / (1 + rate * d / size)
    assert lr[2999] == pytest.approx(0.0001 / (1 + 0.001 * (3000 - 2 - 2000 + 1) / 1000), rel=REL)
    assert all(0 < x <= 0.001 + 1e-15 for x in lr)


def test_lr_plot_writes_a_png(tmp_path: Path) -> None:
    out = lr_cli([WENET, "--updates", "60000", "--plot", "out.png"], tmp_path)
    assert out.startswith("update,lr\n")
    one = png_size(tmp_path / "out.png")
    assert one[0] > 300 and one[1] > 200
    assert (tmp_path / "out.png").stat().st_size > 10_000  # axes, curve, labels: not blank

    lr_cli([WENET, "--updates", "60000", "--plot", "by_epoch/two.png", "--world-size", "4", "16",
            "--dataset-size", "120000"], tmp_path)
    two = png_size(tmp_path / "by_epoch" / "two.png")
    # a second panel (lr against epoch per world size) makes the figure wider, not taller
    assert two[0] > 1.5 * one[0] and two[1] == one[1]
    assert (tmp_path / "by_epoch" / "two.png").stat().st_size > (tmp_path / "out.png").stat().st_size
    assert sorted(p.name for p in tmp_path.iterdir()) == ["by_epoch", "out.png"]


def test_lr_plot_onecycle_with_momentum(tmp_path: Path) -> None:
    lr_cli([ONECYCLE, "--updates", "3000", "--plot", "onecycle.png", "--world-size", "1", "8",
            "--dataset-size", "50000"], tmp_path)
    width, height = png_size(tmp_path / "onecycle.png")
    assert width > height > 200
    assert (tmp_path / "onecycle.png").stat().st_size > 10_000


def test_lr_in_process_writes_to_the_current_stdout() -> None:
    import scalesweep.orchestrator.plan.lr_preview  # noqa: F401  (imported before any redirect, as in a host app)

    for _ in range(2):
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(io.StringIO()):
            rc = main(["lr", WENET, "--updates", "3"])
        assert rc == 0
        assert buf.getvalue().startswith("update,lr\n")


def test_lr_reads_our_own_form(tmp_path: Path) -> None:
    (tmp_path / "own.yaml").write_text("optimizer: {type: adam, lr: 0.001}\n"
                                       "scheduler: {type: warmuplr, warmup_steps: 4}\n")
    header, rows = parse_csv(lr_cli(["own.yaml", "--updates", "8"], tmp_path))
    assert header == ["update", "lr"]
    for k, lr in rows:
        assert lr == pytest.approx(0.001 * min(k / 4, math.sqrt(4 / k)), rel=REL)


def test_lr_reads_a_sweep_file_and_plots_per_epoch_at_its_world_sizes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from scalesweep.orchestrator.cli import main

    png = tmp_path / "sweep_lr.png"
    assert main(["lr", str(ROOT / "sweeps" / "wenet_4v16.yaml"), "--updates", "600",
                 "--plot", str(png)]) == 0
    rows = [line.split(",") for line in capsys.readouterr().out.splitlines()[1:]]
    lrs = {int(k): float(v) for k, v in rows}
    # the sweep sets warmup_steps 300 over the recipe's 25000; lr 0.002 comes from the recipe
    for k in (1, 150, 300, 600):
        assert lrs[k] == pytest.approx(0.002 * min(k / 300, (300 / k) ** 0.5), rel=1e-12)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_lr_onecycle_with_sgd_has_no_momentum(tmp_path: Path) -> None:
    """DeepSpeed turns OneCycle's momentum cycling off for an optimizer without betas (torch's
    SGD); the preview shows no momentum column, as the loop sets none (tests/data/README.md)."""
    onecycle_sgd = str(ROOT / "tests" / "data" / "deepspeed_onecycle_sgd.json")
    header, rows = parse_csv(lr_cli([onecycle_sgd, "--updates", "1500"], tmp_path))
    assert header == ["update", "lr"]
    # the lr is the same cycle as with Adam
    _, with_adam = parse_csv(lr_cli([ONECYCLE, "--updates", "1500"], tmp_path))
    assert [r[1] for r in rows] == [r[1] for r in with_adam]
    from scalesweep.orchestrator.plan.lr_preview import preview

    assert all(m is None for _, _, m in preview(onecycle_sgd, 50).rows)
    assert any(m is not None for _, _, m in preview(ONECYCLE, 50).rows)



@pytest.mark.parametrize("path", [WENET, ONECYCLE])
def test_lr_judges_the_schedule_once(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # resolve is the one judge (issue 32): the preview used to validate, then resolve again
    from scalesweep.orchestrator.plan import lr_preview
    from scalesweep.science import schedules
    from scalesweep.science.schedules import _spec

    judged: list[str] = []
    real_problems, real_validate = _spec.problems, schedules.validate

    def problems(*args: Any, **kwargs: Any) -> Any:
        judged.append("resolve")
        return real_problems(*args, **kwargs)

    def validate(*args: Any, **kwargs: Any) -> Any:
        judged.append("validate")
        return real_validate(*args, **kwargs)

    monkeypatch.setattr(_spec, "problems", problems)
    monkeypatch.setattr(schedules, "validate", validate)
    assert lr_preview.preview(path, 50).rows
    assert judged == ["resolve"]
