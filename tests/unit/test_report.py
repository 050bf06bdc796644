"""scalesweep.dashboards.report against a real MLflow sqlite store logged the way docs/design.md §4.5 says."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest
from mlflow.entities import Metric, Param
from mlflow.tracking import MlflowClient

from scalesweep.dashboards.mlflow_data import load_study
from scalesweep.dashboards.report import PROJECTED, build_report, convergence_table

DATASET = 12800  # samples; updates_per_epoch = DATASET // global_batch
PER_WORKER_BATCH = 16
TARGET = 1.0


@dataclass(frozen=True)
class FakeTrial:
    name: str
    world_size: int
    scaling_rule: str
    warmup_rule: str
    warmup_steps: int
    peak_lr: float
    eval_every: int
    dev_loss: list[float]  # one value per eval, from update 0
    status: str = "completed"
    seconds_per_update: float = 0.02

    @property
    def global_batch(self) -> int:
        return self.world_size * PER_WORKER_BATCH

    @property
    def updates_per_epoch(self) -> int:
        return DATASET // self.global_batch


# The WeNet effect in miniature: 16 workers with the 4-worker warmup need more epochs; scaling
# warmup by 4/16 (and lr linearly) makes them converge in fewer epochs than the baseline.
TRIALS = [
    FakeTrial("ws4-warmup400-none", 4, "none", "fixed", 400, 1e-3, 200,
              [3.0, 2.0, 1.5, 0.5, 0.4], seconds_per_update=0.05),
    FakeTrial("ws16-warmup400-none", 16, "none", "fixed", 400, 1e-3, 25,
              [max(3.0 - 0.25 * i, 0.5) for i in range(17)]),
    FakeTrial("ws16-warmup100-linear", 16, "linear", "scaled", 100, 4e-3, 25,
              [3.0, 2.5, 2.0, 1.6, 1.2, 0.8, 0.7, 0.65, 0.6]),
    FakeTrial("ws16-warmup400-linear", 16, "linear", "fixed", 400, 4e-3, 25,
              [3.0, 5.0, math.nan], status="diverged"),
]  # fmt: skip

# Hand-computed: (updates, samples, epochs, seconds) to dev_loss <= 1.0, speedup, efficiency,
# epoch speedup, best, final. The baseline crosses halfway between updates 400 (1.5) and
# 600 (0.5); ws16-warmup100 halfway between 100 (1.2) and 125 (0.8); ws16-warmup400 exactly
# at update 200 (epoch 4).
EXPECTED = {
    "ws4-warmup400-none": (500.0, 32000.0, 2.5, 25.0, 1.0, 1.0, 1.0, 0.4, 0.4),
    "ws16-warmup100-linear": (112.5, 28800.0, 2.25, 2.25, 500 / 112.5, 500 / 112.5 / 4,
                              2.5 / 2.25, 0.6, 0.6),
    "ws16-warmup400-none": (200.0, 51200.0, 4.0, 4.0, 2.5, 0.625, 0.625, 0.5, 0.5),
    "ws16-warmup400-linear": (None,) * 7 + (3.0, None),
}  # fmt: skip
ORDER = ["ws16-warmup100-linear", "ws4-warmup400-none", "ws16-warmup400-none",
         "ws16-warmup400-linear"]  # fmt: skip
VALUE_COLUMNS = ["updates_to_target", "samples_to_target", "epochs_to_target",
                 "seconds_to_target", "speedup_vs_baseline", "scaling_efficiency",
                 "speedup_by_epochs", "best_dev_loss", "final_dev_loss"]  # fmt: skip


NOTE = "warning: baseline seed 2 left out of the target: it diverged at epoch 1.5"
PROJECTION = {"seconds_per_epoch": {"4": 407.17, "16": 121.7}, "label": "WeNet AISHELL (blog)"}
# epochs_to_target x seconds per epoch at the trial's world size (from EXPECTED)
EXPECTED_PROJECTED = {"ws4-warmup400-none": 2.5 * 407.17, "ws16-warmup100-linear": 2.25 * 121.7,
                      "ws16-warmup400-none": 4.0 * 121.7, "ws16-warmup400-linear": None}


def _log_study(
    client: MlflowClient, experiment: str, *, summary: bool, start: int, tamper: bool = False,
    beyond: bool = False,
) -> str:
    """``beyond``: the parent has a projection and the trials log noise_scale at each eval."""
    exp = client.get_experiment_by_name(experiment)
    exp_id = exp.experiment_id if exp else client.create_experiment(experiment)
    parent = client.create_run(exp_id, start_time=start, run_name="sweep", tags={"scalesweep.role": "parent"})
    pid = parent.info.run_id
    client.log_batch(pid, params=[
        Param("target_metric", "dev_loss"), Param("target_value", str(TARGET)),
        Param("target_mode", "min"), Param("baseline_trial", TRIALS[0].name),
        *([Param("projection", json.dumps(PROJECTION))] if beyond else []),
        *([Param("target_notes", json.dumps([NOTE]))] if beyond else []),
    ])  # fmt: skip
    for i, t in enumerate(TRIALS):
        run = client.create_run(exp_id, start_time=start + 1 + i, run_name=t.name, tags={
            "mlflow.parentRunId": pid, "scalesweep.role": "trial", "trial_name": t.name,
            "status": t.status,
        })  # fmt: skip
        params = {
            "world_size": t.world_size, "global_batch": t.global_batch,
            "scaling_rule": t.scaling_rule, "base_lr": 1e-3, "peak_lr": t.peak_lr,
            "warmup_steps": t.warmup_steps, "warmup_rule": t.warmup_rule,
            "scheduler": "warmuplr", "backend": "simulate", "physical_workers": 1,
            "accum_grad": 1, "seed": 0, "workload": "mini_asr",
            "warmup_epochs": t.warmup_steps / t.updates_per_epoch,
            "updates_per_epoch": t.updates_per_epoch,
        }  # fmt: skip
        metrics: list[Metric] = []
        last = t.eval_every * (len(t.dev_loss) - 1)
        for step in range(0, last + 1, 5):  # train-side logging every 5 updates
            clocks = {
                "train_loss": 3.5 - step / (last + 1), "lr": t.peak_lr * min(1, step /
                t.warmup_steps), "samples_seen": step * t.global_batch,
                "epoch": step / t.updates_per_epoch, "wall_s": step * t.seconds_per_update,
            }  # fmt: skip
            if step % t.eval_every == 0:
                clocks["dev_loss"] = t.dev_loss[step // t.eval_every]
                if beyond:
                    clocks["noise_scale"] = 40.0 + step / 10
            metrics += [Metric(k, v, start + step, step) for k, v in clocks.items()]
        if summary:
            names = [*VALUE_COLUMNS[:6], "best_dev_loss", "final_dev_loss"]
            values = EXPECTED[t.name][:6] + EXPECTED[t.name][7:]
            for k, v in zip(names, values, strict=True):
                if v is not None:  # never reached: the metric is not logged at all
                    metrics.append(Metric(k, v, start + last, last))
        if tamper and i == 0:
            metrics.append(Metric("epochs_to_target", 99.0, start + last, last))
        client.log_batch(
            run.info.run_id, metrics=metrics,
            params=[Param(k, str(v)) for k, v in params.items()],
        )  # fmt: skip
        client.set_terminated(run.info.run_id, "FAILED" if t.status == "diverged" else "FINISHED")
    client.set_tag(pid, "note", "done")
    client.set_terminated(pid)
    return pid


@dataclass(frozen=True)
class Store:
    uri: str
    tampered_parent: str


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    # An older sweep of the same study: load_study(experiment=...) must pick the newer one.
    old = _log_study(client, "wenet-4v16", summary=True, start=1_000, tamper=True)
    _log_study(client, "wenet-4v16", summary=True, start=2_000_000, beyond=True)
    _log_study(client, "wenet-4v16-nosummary", summary=False, start=3_000_000)
    yield Store(uri, old)


def _rounded(table: pd.DataFrame) -> dict[str, list[float | None]]:
    return {
        row["trial_name"]: [None if pd.isna(row[c]) else round(float(row[c]), 9)
                            for c in VALUE_COLUMNS]
        for _, row in table.iterrows()
    }  # fmt: skip


# --- invalid arguments first -------------------------------------------------------------------


def test_load_study_needs_exactly_one_source(store: Store) -> None:
    with pytest.raises(ValueError, match="exactly one of experiment and parent_run_id"):
        load_study(store.uri)
    with pytest.raises(ValueError, match="exactly one of experiment and parent_run_id"):
        load_study(store.uri, experiment="wenet-4v16", parent_run_id="abc")
    with pytest.raises(ValueError, match="no MLflow experiment named 'nope'"):
        load_study(store.uri, experiment="nope")
    with pytest.raises(ValueError, match="max_workers must be at least 1"):
        load_study(store.uri, experiment="wenet-4v16", max_workers=0)


# --- behaviour ----------------------------------------------------------------------------------


def test_load_study_reads_latest_parent_params_and_histories(store: Store) -> None:
    study = load_study(store.uri, experiment="wenet-4v16")
    assert study.parent_run_id != store.tampered_parent
    assert (study.target_metric, study.target_value, study.rules.mode) == ("dev_loss", 1.0, "min")
    assert study.baseline_trial == "ws4-warmup400-none"
    trials = study.trials.set_index("trial_name")
    assert set(trials.index) == {t.name for t in TRIALS}
    assert trials.loc["ws16-warmup400-none", "world_size"] == 16  # params typed back
    assert trials.loc["ws16-warmup400-none", "peak_lr"] == pytest.approx(1e-3)
    assert trials.loc["ws16-warmup400-linear", "status"] == "diverged"
    assert trials["has_summary"].all()
    hist = study.history[study.history["trial_name"] == "ws4-warmup400-none"]
    assert len(hist) == 800 // 5 + 1  # every logged step, dev evals joined on the same step
    assert hist["dev_loss"].notna().sum() == 5
    at = hist.set_index("step").loc[600]
    assert (at["dev_loss"], at["epoch"], at["samples_seen"]) == (0.5, 3.0, 38400.0)


def test_table_order_and_values_from_logged_summaries(store: Store) -> None:
    table = convergence_table(load_study(store.uri, experiment="wenet-4v16"))
    assert list(table["trial_name"]) == ORDER
    expected = {
        name: [None if v is None else round(v, 9) for v in values] for name, values in EXPECTED.items()
    }
    assert _rounded(table) == expected
    row = table.set_index("trial_name").loc["ws16-warmup100-linear"]
    assert (row["world_size"], row["global_batch"], row["warmup_steps"]) == (16, 256, 100)
    assert (row["scaling_rule"], row["warmup_rule"], row["status"]) == ("linear", "scaled", "completed")
    assert row["warmup_epochs"] == 2.0 and row["peak_lr"] == pytest.approx(4e-3)


def test_projection_column_and_noise_scale_history(store: Store) -> None:
    study = load_study(store.uri, experiment="wenet-4v16")
    assert study.projection is not None and study.projection.seconds_per_epoch == {4: 407.17, 16: 121.7}
    table = convergence_table(study)
    cols = list(table.columns)
    assert cols[cols.index("seconds_to_target") + 1] == PROJECTED
    got = {r["trial_name"]: None if pd.isna(r[PROJECTED]) else r[PROJECTED] for _, r in table.iterrows()}
    assert got == pytest.approx(EXPECTED_PROJECTED)
    hist = study.history.set_index(["trial_name", "step"])
    assert hist.loc[("ws16-warmup400-none", 50), "noise_scale"] == 45.0
    # a sweep without a projection has no such column
    older = load_study(store.uri, parent_run_id=store.tampered_parent)
    assert older.projection is None and PROJECTED not in convergence_table(older)


def test_crossings_are_located_on_the_history_with_their_brackets(store: Store) -> None:
    # the tampered parent's baseline logged epochs_to_target = 99 by hand; the report locates
    # every crossing on the logged evals (as the driver did on the same evals), so the bracket
    # and the value come from the curve, never from an edited number
    table = convergence_table(load_study(store.uri, parent_run_id=store.tampered_parent))
    row = table.set_index("trial_name").loc["ws4-warmup400-none"]
    assert row["epochs_to_target"] != 99.0 and row["crossing"] == "interpolated"
    assert row["epochs_to_target_lo"] <= row["epochs_to_target"] <= row["epochs_to_target_hi"]


def test_fallback_computation_matches_logged_summaries(store: Store) -> None:
    logged = convergence_table(load_study(store.uri, experiment="wenet-4v16"))
    computed = convergence_table(load_study(store.uri, experiment="wenet-4v16-nosummary"))
    assert list(computed["trial_name"]) == ORDER
    assert _rounded(computed) == _rounded(logged)


class _Sources(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.refs: list[tuple[str, str, str]] = []
        self.tags: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.refs += [(tag, k, v or "") for k, v in attrs if k in ("src", "href")]


def test_build_report_writes_self_contained_files(store: Store, tmp_path: Path) -> None:
    paths = build_report(store.uri, experiment="wenet-4v16", out_dir=tmp_path / "report")
    assert set(paths.figures) == {
        "dev_loss_vs_epoch", "dev_loss_vs_samples_seen", "dev_loss_vs_step",
        "dev_loss_vs_wall_s", "lr_vs_epoch", "epochs_to_target", "noise_scale_vs_epoch",
        "projected_time_to_target", "dev_loss_by_arm_vs_epoch", "epochs_ratio_by_level",
    }  # fmt: skip
    arms = json.loads(paths.arms_json.read_text())
    assert {a["arm"] for a in arms} == set(pd.read_csv(paths.arms_csv)["arm"])
    page = paths.html.read_text(encoding="utf-8")
    # the page leads with the answer: decisions, then the ratio by level and the arms' figures,
    # and only then the per-trial table and curves
    answer, trials = page.index("The answer: each arm against the baseline"), page.index("<h2>Trials</h2>")
    assert answer < page.index("<th>decision</th>") < page.index('alt="epochs_ratio_by_level"') < trials
    assert trials < page.index('alt="dev_loss_vs_epoch"')
    assert all("decision" in a and "ratio_by_target" in a for a in arms)
    # how the target was set reaches the report from the parent run, as `run` printed it
    (base,) = [a for a in arms if a["decision"] == "baseline"]
    assert base["target_notes"] == [NOTE] and NOTE in page
    for png in paths.figures.values():
        assert png.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    page = paths.html.read_text(encoding="utf-8")
    parser = _Sources()
    parser.feed(page)
    assert page.startswith("<!DOCTYPE html>") and "</html>" in page
    assert not parser.tags & {"link", "script", "iframe"}
    assert len(parser.refs) == len(paths.figures)
    assert all(k == "src" and v.startswith("data:image/png;base64,") for _, k, v in parser.refs)
    assert "wenet-4v16" in page and "dev_loss ≤ 1" in page and "—" in page
    assert f"{PROJECTED} — projected (from WeNet AISHELL (blog))" in page
    assert "4 workers: 407.17 s, 16 workers: 121.7 s" in page
    assert page.index("ws16-warmup100-linear") < page.index("ws16-warmup400-linear")
    csv = pd.read_csv(paths.csv)
    assert list(csv["trial_name"]) == ORDER
    records = json.loads(paths.json.read_text())
    assert [r["trial_name"] for r in records] == ORDER
    assert records[-1]["epochs_to_target"] is None
    assert records[0]["epochs_to_target"] == 2.25


def test_report_of_a_sweep_without_trials_yet(store: Store, tmp_path: Path) -> None:
    client = MlflowClient(tracking_uri=store.uri)
    exp_id = client.create_experiment("just-started")
    parent = client.create_run(exp_id, tags={"scalesweep.role": "parent"}, run_name="sweep")
    client.log_param(parent.info.run_id, "target_value", "1.0")
    paths = build_report(store.uri, parent_run_id=parent.info.run_id, out_dir=tmp_path)
    assert pd.read_csv(paths.csv).empty
    assert "just-started" in paths.html.read_text(encoding="utf-8")
    # no trials: the report says why there is no advice instead of failing
    advice = paths.advice.read_text(encoding="utf-8")
    assert advice.startswith("no advice: study 'just-started' has no trials")
