"""The Python API end to end: docs/api.md's walkthrough run as one script on a real Ray, its
tables equal to what the CLI writes and to what ``scalesweep.results`` reads back from MLflow.
Then, on the same study (the smoke sweep, lr rules none and linear), predict, verify and score
end to end: a prediction at 8 workers recorded, its --verify sweep run into the same
experiment, and the ledger scoring every predicted rule against the verification's seeds.
The API's unit tests are in tests/unit/test_api.py."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from mlflow.tracking import MlflowClient

import scalesweep
from tests.conftest import RayHead
from tests.support.helpers import SWEEPS, cli, cli_env, same_value
from tests.support.helpers import scalesweep as run_cli
from tests.unit.test_api import _walkthrough

SMOKE = str(SWEEPS / "smoke.yaml")
M = 8  # the world size predicted and verified

#: docs/api.md's walkthrough as one script (its run joins RAY_ADDRESS), then its tables saved
RUN = "\n".join(_walkthrough()) + """
import json
result.trials.to_pickle("trials.pkl")
result.arms.to_pickle("arms.pkl")
back.arms.to_pickle("back_arms.pkl")
prediction.to_pickle("prediction.pkl")
curves.to_pickle("curves.pkl")
json.dump({"said": said, "answer_arms": list(result.answer["arm"]),
           "blocks": list(everything.parent_run_ids)}, open("more.json", "w"))
json.dump({"experiment": result.experiment, "parent_run_id": result.parent_run_id,
           "report_dir": str(result.report_dir), "sweep_dir": str(result.sweep_dir),
           "failed": result.failed}, open("result.json", "w"))
"""


def _close(x: Any, y: Any) -> bool:
    """Equal, floats to rounding, inside lists and dicts too."""
    numbers = (isinstance(x, float | int) and isinstance(y, float | int)
               and not isinstance(x, bool) and not isinstance(y, bool))
    if numbers and (isinstance(x, float) or isinstance(y, float)):
        return bool(x == pytest.approx(y, rel=1e-9, abs=1e-6, nan_ok=True))
    if isinstance(x, list | tuple) and isinstance(y, list | tuple):
        return len(x) == len(y) and all(_close(a, b) for a, b in zip(x, y, strict=True))
    if isinstance(x, dict) and isinstance(y, dict):
        return x.keys() == y.keys() and all(_close(x[k], y[k]) for k in x)
    return bool(x == y)


def _same(mine: pd.DataFrame, theirs: pd.DataFrame, key: str, skip: tuple[str, ...] = ()) -> None:
    """The same rows (by ``key``) and columns, equal values (floats to rounding)."""
    assert list(mine.columns) == list(theirs.columns)
    assert sorted(mine[key]) == sorted(theirs[key])
    a, b = mine.set_index(key).sort_index(), theirs.set_index(key).sort_index()
    for col in a.columns:
        if col not in skip:
            for name, x, y in zip(a.index, a[col], b[col], strict=True):
                assert _close(x, y), (name, col, x, y)


@pytest.fixture(scope="module")
def walkthrough(tmp_path_factory: pytest.TempPathFactory, ray_head: RayHead
                ) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """docs/api.md's walkthrough, run once: its directory and what it printed."""
    start = time.monotonic()
    tmp_path = tmp_path_factory.mktemp("api")
    # in the repository's root, as docs/api.md's paths are; its files go to tmp_path
    (tmp_path / "sweeps").mkdir()
    (tmp_path / "sweeps" / "smoke.yaml").write_text(Path(SMOKE).read_text(encoding="utf-8"))
    proc = subprocess.run([sys.executable, "-c", RUN], cwd=tmp_path, timeout=600,
                          env=cli_env(RAY_ADDRESS=ray_head.address, **ray_head.env()),
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    print(f"API sweep: {time.monotonic() - start:.1f} s")
    return tmp_path, proc


@pytest.mark.slow
def test_a_run_through_the_api_is_what_the_cli_writes_and_mlflow_reads_back(
        walkthrough: tuple[Path, subprocess.CompletedProcess[str]],
        capsys: pytest.CaptureFixture[str]) -> None:
    tmp_path, proc = walkthrough
    meta = json.loads((tmp_path / "result.json").read_text())
    trials, arms = pd.read_pickle(tmp_path / "trials.pkl"), pd.read_pickle(tmp_path / "arms.pkl")
    # the run printed nothing of its own (the library never prints: its progress went to the
    # `scalesweep` logger), and its tables are the files it wrote
    assert "MLflow parent run" not in proc.stdout and "report: " not in proc.stdout, proc.stdout
    assert meta["failed"] == []
    assert meta["report_dir"] == str(tmp_path.resolve() / "reports/smoke")
    assert (tmp_path / "reports/smoke/report.html").is_file()
    # the summary JSON `--summary-json` writes (the sweep directory has its copy)
    summary = json.loads((Path(meta["sweep_dir"]) / "summary.json").read_text())
    pd.testing.assert_frame_equal(trials, pd.DataFrame(summary))
    written = json.loads((Path(meta["sweep_dir"]) / "arms.json").read_text())
    pd.testing.assert_frame_equal(arms, pd.DataFrame(written))
    assert list(trials["name"]) == ["ws2-warmup20-none", "ws4-warmup20-none", "ws4-warmup20-linear"]
    assert set(trials["crossing"]) == {"interpolated"} and len(arms) == 3
    # read back from MLflow: the same tables, as far as a run's params hold them
    back = scalesweep.results("smoke", tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert (back.experiment, back.parent_run_id) == ("smoke", meta["parent_run_id"])
    # ws2's linear trial is its none trial (same_as), which MLflow does not hold
    assert trials["same_as"].notna().sum() == 1
    _same(back.trials, trials.drop(columns="same_as"), "name", skip=scalesweep.api.NOT_IN_MLFLOW)
    assert back.trials[list(scalesweep.api.NOT_IN_MLFLOW)].isna().all().all()
    # the arms as the report computes them, the driver's but for axes (the report adds the
    # derived settings its runs' params hold); target_notes (here: only one seed could set the
    # target) reach the report through the parent run
    _same(back.arms, arms, "arm", skip=("axes",))
    assert any(notes for notes in back.arms["target_notes"].dropna())
    for mine, theirs in zip(back.arms.set_index("arm").loc[arms["arm"], "axes"], arms["axes"], strict=True):
        assert theirs.items() <= mine.items()
    # the report the run made (`scalesweep report`'s arms.json) is what results() reads
    pd.testing.assert_frame_equal(back.arms, pd.DataFrame(json.loads(
        (tmp_path / "reports/smoke/arms.json").read_text())))
    pd.testing.assert_frame_equal(pd.read_pickle(tmp_path / "back_arms.pkl"), back.arms)
    # the curves: one row per trial and eval, each trial's evals as MLflow holds them
    curves = pd.read_pickle(tmp_path / "curves.pkl")
    assert list(curves["trial"].unique()) == list(trials["name"])
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    for name, run_id in zip(trials["name"], trials["mlflow_run_id"], strict=True):
        logged = client.get_metric_history(run_id, "dev_loss")
        mine = curves[curves["trial"] == name]
        assert list(mine["update"]) == sorted(m.step for m in logged)
        assert mine["lr"].notna().all() and mine["epoch"].is_monotonic_increasing
    more = json.loads((tmp_path / "more.json").read_text())
    # the resume's progress went to the walkthrough's list, as `scalesweep resume` prints it
    assert any("trials already finished" in line for line in more["said"]), more["said"]
    assert more["blocks"] == [meta["parent_run_id"]] and set(more["answer_arms"]) <= set(arms["arm"])
    # and the walkthrough's prediction is `predict --json` (batch 128 from 32 and 64 measured)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    printed = json.loads(cli(["predict", "--experiment", "smoke", "--world-size", "8", "--json",
                              "--no-record", "--tracking-uri", uri], capsys))
    pd.testing.assert_frame_equal(pd.read_pickle(tmp_path / "prediction.pkl"), pd.DataFrame(printed),
                                  check_exact=False)


#: what every trial of the summary JSON holds (docs/sweep-file.md, "The summary")
SUMMARY_FIELDS = ("world_size", "scaling_rule", "warmup_rule", "global_batch", "peak_lr", "warmup_steps",
                  "warmup_epochs", "updates_per_epoch", "total_updates", "backend", "physical_workers",
                  "accum_grad", "seed", "feasible", "status", "mlflow_run_id", "updates_to_target",
                  "samples_to_target", "epochs_to_target", "seconds_to_target", "final_dev_loss",
                  "best_dev_loss", "speedup_vs_baseline", "train_seconds")


@pytest.mark.slow
def test_the_runs_summary_mlflow_runs_and_report_agree(
        walkthrough: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    """The study's records, each against the others: the summary JSON has every documented
    field; MLflow has the parent and one child per trial, with clean curves; the summary,
    MLflow and the report agree on epochs to target."""
    tmp_path, proc = walkthrough
    meta = json.loads((tmp_path / "result.json").read_text())
    summary = {t["name"]: t for t in json.loads((Path(meta["sweep_dir"]) / "summary.json").read_text())}
    for t in summary.values():
        assert all(key in t for key in SUMMARY_FIELDS), set(SUMMARY_FIELDS) - set(t)
        assert t["status"] == "completed" and t["train_seconds"] > 0
    assert summary["ws2-warmup20-none"]["speedup_vs_baseline"] == pytest.approx(1.0)
    assert "workflowType=machine_learning" not in proc.stdout  # no UI link printed either

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    parent = client.get_run(meta["parent_run_id"])
    assert parent.info.status == "FINISHED"
    exp = parent.info.experiment_id
    children = client.search_runs([exp], f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    assert {c.info.run_name for c in children} == set(summary)
    report = {r.get("trial_name", r.get("name")): r
              for r in json.loads((tmp_path / "reports/smoke/trials.json").read_text())}
    for child in children:
        info, data = child.info, child.data
        assert info.status == "FINISHED" and data.tags["status"] == "completed"
        for key in ("world_size", "global_batch", "scaling_rule", "base_lr", "peak_lr",
                    "warmup_steps", "warmup_rule", "scheduler", "backend", "physical_workers",
                    "accum_grad", "seed", "workload"):
            assert key in data.params, key
        total = int(data.params["total_updates"])
        for key in ("dev_loss", "train_loss", "lr", "epoch", "samples_seen", "wall_s"):
            steps = [m.step for m in client.get_metric_history(info.run_id, key)]
            assert steps == sorted(set(steps)), f"{key}: duplicated or unordered steps"
            assert steps[-1] == total
        epochs = {m.step: m.value for m in client.get_metric_history(info.run_id, "epoch")}
        upe = int(data.params["updates_per_epoch"])
        assert all(v == pytest.approx(s / upe) for s, v in epochs.items())
        ours = summary[info.run_name]["epochs_to_target"]
        assert same_value(ours, data.metrics.get("epochs_to_target"))
        assert same_value(ours, report[info.run_name]["epochs_to_target"])
    assert any(t["epochs_to_target"] is not None for t in summary.values())
    artifacts = [a.path for a in client.list_artifacts(parent.info.run_id, "report")]
    assert "report/report.html" in artifacts


def _cli_both(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[str, str]:
    """stdout and stderr of a successful in-process run of the CLI (a command without Ray)."""
    from scalesweep.orchestrator.cli import main

    capsys.readouterr()
    rc = main(argv)
    out, err = capsys.readouterr()
    assert rc == 0, out + err
    return out, err


@pytest.mark.slow
def test_a_prediction_is_verified_by_its_own_verification_sweep(
        walkthrough: tuple[Path, subprocess.CompletedProcess[str]], ray_head: RayHead,
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    # after the test above, which reads the study alone: this one adds the verification's runs
    tmp_path, _ = walkthrough
    monkeypatch.chdir(tmp_path)  # where the study ran: its sweep directory is found from there
    uri = ["--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}"]
    verify = tmp_path / "verify.yaml"
    # two lr rules of smoke's three: enough to predict; the verification adds linear and sqrt anyway
    out, err = _cli_both(["predict", "--experiment", "smoke", "--world-size", str(M), "--json",
                          "--verify", str(verify), *uri], capsys)
    predicted = {r["rule"]: r for r in json.loads(out) if r["epochs_to_target_median"]}
    assert predicted, out
    assert f"scalesweep run {verify}" in err and "recorded: predictions/" in err
    # the study's own copy in the sweep directory `run` wrote, as resume reads it
    assert "from the study's sweep file via sweep directory " in err, err
    spec = yaml.safe_load(verify.read_text())
    assert spec["axes"]["world_size"] == [2, M] and spec["name"] == "smoke"

    # two seeds are enough to score; the file's own adaptive seeds would add more where undecided
    check = run_cli("run", "--no-report", str(verify), "--set", "replicates={min: 2, max: 2}",
                       *ray_head.args(), cwd=tmp_path, **ray_head.env())
    assert check.returncode == 0, check.stdout + check.stderr
    out, _ = _cli_both(["predict", "--ledger", "--json", *uri], capsys)
    lines = json.loads(out)
    assert {x["rule"] for x in lines} == set(predicted)
    for x in lines:
        assert x["result"] != "pending" and x["observed_seeds"] == 2, x
        inside = x["observed"] is not None and x["ci"][0] <= x["observed"] <= x["ci"][1]
        assert x["hit"] is inside
    assert lines[-1]["running_verified"] == len(predicted)
    # the verification's parent run (in the study's experiment) is tagged with the study's id,
    # so predicting again reads the study, not the verification
    study = err.split("on parent run ", 1)[1].split()[0]
    again, _ = _cli_both(["predict", "--experiment", "smoke", "--world-size", str(M), "--no-record",
                          *uri], capsys)
    assert f"(parent run {study})" in again, again
