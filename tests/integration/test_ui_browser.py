"""`scalesweep ui` in a real browser: the URL that `run` and `ui` print lands on one dev_loss
line per arm with its min-max band over the arm's seeds, one click shows one line per trial,
and the x-axis can be switched to `epoch` (docs/mlflow_ui.md).

Headless Debian chromium (scripts/install_test_tools.sh) driven by Playwright against a real
finished smoke sweep (and studies logged directly with MlflowClient: arms of 1 and 2 seeds, and
an old study whose trials have no `arm`) and a real `scalesweep ui` on 127.0.0.1. Screenshots
go to test-artifacts/.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from scalesweep.orchestrator.tracking.ui import (
    ARMS_VIEW_ID,
    ARMS_VIEW_STATE,
    TRIALS_VIEW_ID,
    VIEWS,
    runs_url,
    view_tag,
    view_tag_value,
)
from tests.conftest import RayHead
from tests.support.helpers import SCALESWEEP

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "sweeps" / "smoke.yaml"
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
TRIALS = {"ws2-warmup20-none", "ws4-warmup20-none", "ws4-warmup20-linear", "ws4-warmup20-sqrt"}
CARD = '[data-testid="experiment-view-compare-runs-card"]'
#: the runs that the line chart titled `title` draws (traces with points), their x and colours,
#: and its x-axis title
CHART_JS = """(title) => {
  const h = Array.from(document.querySelectorAll('CARD h4')).find(e => e.getAttribute('title') === title);
  const gd = h && h.closest('CARD').querySelector('.js-plotly-plot');
  if (!gd || !gd.data || !gd.layout) return null;
  const drawn = gd.data.filter(t => (t.y || []).length > 0);
  return {names: [...new Set(drawn.map(t => t.name))], xaxis: gd.layout.xaxis.title.text,
          x: Object.fromEntries(drawn.map(t => [t.name, t.x])),
          colors: Object.fromEntries(drawn.filter(t => t.hoverinfo !== 'skip')
                                          .map(t => [t.name, (t.marker || {}).color]))};
}""".replace("CARD", CARD)
#: the same chart grouped (one series per group, unnamed): each group's line (its aggregate at
#: each step) and its band (a filled trace: the group's min at each step, reversed, then null,
#: then its max), the band's colour being the line's plus an alpha; and the legend's entries
GROUPS_JS = """(title) => {
  const h = Array.from(document.querySelectorAll('CARD h4')).find(e => e.getAttribute('title') === title);
  const card = h && h.closest('CARD');
  const gd = card && card.querySelector('.js-plotly-plot');
  if (!gd || !gd.data || !gd.layout) return null;
  const has = t => (t.y || []).some(v => typeof v === 'number');
  return {names: [...new Set(gd.data.filter(has).map(t => t.name))], xaxis: gd.layout.xaxis.title.text,
          lines: gd.data.filter(t => has(t) && !t.fill && t.hoverinfo !== 'skip')
                        .map(t => ({color: (t.marker || {}).color, x: t.x, y: t.y})),
          bands: gd.data.filter(t => has(t) && t.fill === 'tozeroy')
                        .map(t => ({color: t.fillcolor, x: t.x, y: t.y})),
          legend: card.innerText.split('\\n').filter(l => l.endsWith(' (' + title + ')'))
                                .map(l => l.slice(0, -(title.length + 3)))};
}""".replace("CARD", CARD)


# -- unit: the URL itself ----------------------------------------------------------------------

def test_runs_url_opens_the_saved_view_in_chart_mode() -> None:
    url = runs_url("http://127.0.0.1:5000", "7")
    assert url.startswith("http://127.0.0.1:5000/#/experiments/7/runs?")
    assert "workflowType=machine_learning" in url and "compareRunsMode=CHART" in url
    assert f"viewStateShareKey={ARMS_VIEW_ID}" in url  # by default: one line per arm
    assert f"viewStateShareKey={TRIALS_VIEW_ID}" in runs_url("http://h:1", "7", TRIALS_VIEW_ID)
    assert "orderByKey" not in url  # search facets in the URL would make MLflow ignore the view
    plain = runs_url("http://127.0.0.1:5000", "7", view=None)
    assert "viewStateShareKey" not in plain and "orderByKey=tags.%60mlflow.runName%60" in plain
    assert runs_url("http://h:1", None) == "http://h:1"


def test_view_tags_are_the_envelopes_mlflow_reads() -> None:
    for view_id in (ARMS_VIEW_ID, TRIALS_VIEW_ID):
        env = json.loads(view_tag_value(123, view_id))
        assert env["createdAt"] == 123 and env["name"] == VIEWS[view_id][0]
        state = json.loads(env["state"])
        assert state["runsHiddenMode"] == "SHOW_ALL"
        assert state["orderByKey"] != "attributes.start_time"  # that sort nests the trials
        assert view_tag(view_id) == f"mlflow.sharedViewState.{view_id}"
    # MLflow 3.17's RunsGroupByConfig: group by the param `arm`; the charts draw the groups
    arms = json.loads(json.loads(view_tag_value(1, ARMS_VIEW_ID))["state"])
    assert arms["groupBy"] == {"aggregateFunction": "average",
                               "groupByKeys": [{"mode": "param", "groupByData": "arm"}]}
    assert arms["useGroupedValuesInCharts"] is True
    trials = json.loads(json.loads(view_tag_value(1, TRIALS_VIEW_ID))["state"])
    assert "groupBy" not in trials


@pytest.mark.slow  # an MLflow sqlite store
def test_ensure_view_writes_the_view_once_and_colours_trials_apart(tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    from scalesweep.orchestrator.tracking.ui import PALETTE, RUN_COLOR_TAG, ensure_view

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    eid = client.create_experiment("s")
    parent = client.create_run(eid, run_name="s", tags={"scalesweep.role": "parent"}).info.run_id
    runs = {name: client.create_run(eid, run_name=name, tags={
        "scalesweep.role": "trial", "mlflow.parentRunId": parent}).info.run_id for name in "cab"}
    client.set_tag(runs["c"], RUN_COLOR_TAG, PALETTE[0])  # picked by hand: kept, and not reused
    assert ensure_view(uri, eid) == TRIALS_VIEW_ID  # no trial has an `arm`: an old study
    tags = {v: client.get_experiment(eid).tags[view_tag(v)] for v in VIEWS}
    for tag in tags.values():
        assert json.loads(json.loads(tag)["state"])["runsHiddenMode"] == "SHOW_ALL"
    colors = {n: client.get_run(r).data.tags[RUN_COLOR_TAG] for n, r in runs.items()}
    assert colors == {"c": PALETTE[0], "a": PALETTE[1], "b": PALETTE[2]}
    assert RUN_COLOR_TAG not in client.get_run(parent).data.tags
    client.log_param(runs["a"], "arm", "a")
    assert ensure_view(uri, eid) == ARMS_VIEW_ID  # idempotent: same tag values, same colours
    assert {v: client.get_experiment(eid).tags[view_tag(v)] for v in VIEWS} == tags


# -- browser -----------------------------------------------------------------------------------

def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env.update(RAY_USAGE_STATS_ENABLED="0", PYTHONUNBUFFERED="1")
    return env


def _scalesweep() -> list[str]:
    exe = SCALESWEEP
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "scalesweep"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stop(proc: subprocess.Popen[Any]) -> None:
    """Stop a process started in its own session, with everything it spawned."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=20)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    with contextlib.suppress(ProcessLookupError):  # stragglers of the group once the leader is gone
        os.killpg(proc.pid, signal.SIGKILL)


@dataclass
class Study:
    cwd: Path
    uri: str
    experiment: str
    experiment_id: str
    parent: tuple[str, str]            # (run id, run name)
    trials: dict[str, str]             # run name -> run id
    run_output: str


@pytest.fixture(scope="module")
def chromium() -> str:
    if not Path(CHROMIUM).exists():
        subprocess.run(["bash", str(ROOT / "scripts" / "install_test_tools.sh")], check=False,
                       timeout=900)
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is missing and scripts/install_test_tools.sh could not install it")
    return CHROMIUM


@pytest.fixture(scope="module")
def study(chromium: str, tmp_path_factory: pytest.TempPathFactory, ray_head: RayHead) -> Study:
    from mlflow.tracking import MlflowClient

    cwd = tmp_path_factory.mktemp("ui")
    # one epoch (two evals: a line per trial), no report: the views and the link are the subject
    proc = subprocess.Popen([*_scalesweep(), "run", str(SMOKE), "--set", "training.epochs=1",
                             "--no-report", *ray_head.args()], cwd=cwd,
                            env={**_env(), **ray_head.env()},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=600)
    finally:
        _stop(proc)
    assert proc.returncode == 0, out
    uri = f"sqlite:///{cwd / 'mlflow.db'}"
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("smoke")
    assert exp is not None
    runs = client.search_runs([exp.experiment_id], max_results=100)
    parents = [r for r in runs if r.data.tags.get("scalesweep.role") == "parent"]
    assert len(parents) == 1
    trials = {r.info.run_name: r.info.run_id for r in runs
              if r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id}
    assert set(trials) == TRIALS
    return Study(cwd, uri, exp.name, exp.experiment_id,
                 (parents[0].info.run_id, parents[0].info.run_name), trials, out)


@pytest.fixture(scope="module")
def ui_base(study: Study) -> Iterator[str]:
    port = _free_port()
    log = (study.cwd / "ui.log").open("w")
    # MLflow's job consumers (processes of their own) serve nothing the UI shows: not started
    proc = subprocess.Popen([*_scalesweep(), "ui", "--port", str(port)], cwd=study.cwd,
                            env={**_env(), "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
                            stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        end = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(f"{base}/health", timeout=2):
                    break
            except OSError:
                assert proc.poll() is None, (study.cwd / "ui.log").read_text()
                assert time.monotonic() < end, "scalesweep ui did not answer in 180 s"
                time.sleep(0.5)
        yield base
    finally:
        _stop(proc)
        log.close()


@pytest.fixture(scope="module")
def browser(chromium: str) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


#: upper bounds on a page load and on a wait with no bound of its own: generous, since a loaded
#: 2-core CI box runs the MLflow server, chromium and other tests' sweeps at once
PAGE_TIMEOUT_MS = 180_000


def _context(browser: Any) -> Any:
    ctx = browser.new_context(viewport={"width": 1600, "height": 1000})
    ctx.set_default_timeout(PAGE_TIMEOUT_MS)
    ctx.set_default_navigation_timeout(PAGE_TIMEOUT_MS)
    return ctx


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    ctx = _context(browser)
    try:
        yield ctx.new_page()
    finally:
        ctx.close()


def _shot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / name))


def _open(page: Any, url: str, lines: int = len(TRIALS)) -> dict[str, Any]:
    """Open `url` and wait until the dev_loss line chart has drawn `lines` lines (or 60 s)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    page.goto(url)
    page.locator(f'{CARD} h4[title="dev_loss"]').wait_for(timeout=PAGE_TIMEOUT_MS)
    with contextlib.suppress(PlaywrightTimeout):  # then the caller's assert names what is missing
        page.wait_for_function(f"(t) => {{ const c = ({CHART_JS})(t); "
                               f"return c && c.names.length >= {lines}; }}",
                               arg="dev_loss", timeout=60_000)
    chart: dict[str, Any] = page.evaluate(CHART_JS, "dev_loss")
    return chart


def _open_groups(page: Any, url: str, groups: int) -> dict[str, Any]:
    """Open `url` and wait until the grouped dev_loss chart has drawn `groups` lines (or 60 s)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    page.goto(url)
    page.locator(f'{CARD} h4[title="dev_loss"]').wait_for(timeout=PAGE_TIMEOUT_MS)
    with contextlib.suppress(PlaywrightTimeout):
        page.wait_for_function(f"(t) => {{ const c = ({GROUPS_JS})(t); "
                               f"return c && c.lines.length >= {groups}; }}",
                               arg="dev_loss", timeout=60_000)
    chart: dict[str, Any] = page.evaluate(GROUPS_JS, "dev_loss")
    return chart


def _epochs_at_dev_evals(study: Study, run_id: str) -> list[float]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(study.uri)
    epoch = {m.step: m.value for m in client.get_metric_history(run_id, "epoch")}
    return sorted(epoch[m.step] for m in client.get_metric_history(run_id, "dev_loss"))


@pytest.mark.slow
@pytest.mark.timeout(1500)  # the first to use them sets up chromium (900 s) and the study (600 s)
def test_run_and_ui_print_the_url(study: Study, ui_base: str) -> None:
    # the smoke trials have an `arm` param: the link opens the arms view
    assert runs_url("http://127.0.0.1:5000", study.experiment_id, ARMS_VIEW_ID) in study.run_output
    assert "'Group by: arm'" in study.run_output  # and says how to get one line per trial
    ui_log = (study.cwd / "ui.log").read_text()
    assert runs_url(ui_base, study.experiment_id, ARMS_VIEW_ID) in ui_log
    assert re.search(r"127\.0\.0\.1:\d+", ui_log)


@pytest.mark.slow
def test_url_of_a_one_seed_study_lands_on_one_line_per_arm(study: Study, ui_base: str,
                                                           page: Any) -> None:
    """The smoke sweep has one seed per arm: one line per arm = per trial, each band flat."""
    _open_groups(page, runs_url(ui_base, study.experiment_id), len(TRIALS))
    groups = page.evaluate(GROUPS_JS, "dev_loss")
    assert sorted(groups["legend"]) == sorted([*TRIALS, "Unassigned"])  # the parent: no arm
    assert len(groups["lines"]) == len(groups["bands"]) == len(TRIALS)


@pytest.mark.slow
def test_trials_view_lands_on_one_dev_loss_line_per_trial(study: Study, ui_base: str,
                                                          page: Any) -> None:
    chart = _open(page, runs_url(ui_base, study.experiment_id, TRIALS_VIEW_ID))
    _shot(page, "ui_runs_chart.png")
    # the study, its sweep (parent run) and every trial are on the page
    assert page.get_by_test_id("experiment-link").inner_text().strip() == study.experiment
    parent_id, parent_name = study.parent
    assert page.locator(f'a[href*="/runs/{parent_id}"]').first.inner_text().strip() == parent_name
    for name, run_id in study.trials.items():
        link = page.locator(f'a[href*="/runs/{run_id}"]').first
        assert link.is_visible() and link.inner_text().strip() == name
    # the dev_loss chart: one line per trial, nothing else drawn, against epoch (the view's
    # x-axis): each line's x values are the trial's logged epoch at each evaluation
    assert page.locator(f'{CARD} h4[title="dev_loss"]').is_visible()
    assert sorted(chart["names"]) == sorted(TRIALS)
    assert chart["xaxis"] == "epoch"
    for name, run_id in study.trials.items():
        assert sorted(chart["x"][name]) == pytest.approx(_epochs_at_dev_evals(study, run_id))
    assert len(set(chart["colors"].values())) == len(TRIALS)  # told apart at a glance


@pytest.mark.slow
def test_plain_url_without_the_saved_view_still_draws_every_trial(study: Study, ui_base: str,
                                                                  page: Any) -> None:
    chart = _open(page, runs_url(ui_base, study.experiment_id, view=None))
    _shot(page, "ui_runs_chart_plain_url.png")
    assert sorted(chart["names"]) == sorted(TRIALS)


@pytest.mark.slow
def test_chart_configure_dialog_puts_the_update_count_back_on_the_x_axis(
        study: Study, ui_base: str, page: Any) -> None:
    _open(page, runs_url(ui_base, study.experiment_id, TRIALS_VIEW_ID))
    card = page.locator(CARD).filter(has=page.locator('h4[title="dev_loss"]')).first
    card.get_by_test_id("experiment-view-compare-runs-card-menu").click()
    page.get_by_role("menuitem", name="Configure").click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_role("radio", name="Step").check()
    _shot(page, "ui_configure_dialog_step.png")
    dialog.get_by_role("button", name="Save changes").click()
    page.wait_for_function(f"(t) => {{ const c = ({CHART_JS})(t); return c && c.xaxis === 'Step'; }}",
                           arg="dev_loss", timeout=30_000)
    chart = page.evaluate(CHART_JS, "dev_loss")
    _shot(page, "ui_runs_chart_step.png")
    assert sorted(chart["names"]) == sorted(TRIALS)
    from mlflow.tracking import MlflowClient

    client = MlflowClient(study.uri)
    for name, run_id in study.trials.items():  # each line's x is the update of each eval
        steps = sorted(m.step for m in client.get_metric_history(run_id, "dev_loss"))
        assert sorted(chart["x"][name]) == pytest.approx(steps)


@pytest.mark.slow
def test_chart_settings_put_samples_seen_on_the_x_axis_of_every_chart(study: Study, ui_base: str,
                                                         page: Any) -> None:
    _open(page, runs_url(ui_base, study.experiment_id, TRIALS_VIEW_ID))
    page.get_by_role("button", name="Configure charts").click()  # the gear beside the search box
    page.get_by_role("menuitem", name="Metric").hover()
    page.get_by_role("menuitemcheckbox", name="samples_seen", exact=True).click()
    page.keyboard.press("Escape")
    # the line charts on screen (the rest, `lr` among them since the *_to_target_lo/hi summary
    # charts came before it, render lazily when scrolled to)
    for title in ("dev_loss", "epoch"):
        page.wait_for_function(f"(t) => {{ const c = ({CHART_JS})(t); "
                               "return c && c.xaxis === 'samples_seen' && c.names.length > 0; }",
                               arg=title, timeout=30_000)
        assert sorted(page.evaluate(CHART_JS, title)["names"]) == sorted(TRIALS)
    _shot(page, "ui_runs_chart_samples_seen.png")


@pytest.mark.slow
def test_saved_view_charts_every_trial_beyond_the_first_ten_rows(study: Study, ui_base: str,
                                                                 page: Any, browser: Any) -> None:
    """Without the view MLflow charts the first 10 rows only; a study of 18 trials shows all."""
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    from scalesweep.orchestrator.tracking.ui import ensure_view

    client = MlflowClient(study.uri)
    eid = client.create_experiment("ui-many-trials")
    parent = client.create_run(eid, run_name="ui-many-trials",
                               tags={"scalesweep.role": "parent"}).info.run_id
    names = {f"ws{ws}-warmup{w}-{rule}" for ws in (4, 16) for w in ("fixed", "scaled", "19")
             for rule in ("none", "linear", "sqrt")}
    now = int(time.time() * 1000)
    for k, name in enumerate(sorted(names)):
        run_id = client.create_run(eid, run_name=name, tags={
            "scalesweep.role": "trial", "mlflow.parentRunId": parent}).info.run_id
        client.log_batch(run_id, metrics=[m for step in range(1, 11) for m in (
            Metric("dev_loss", 1.0 / (step + k), now, step), Metric("epoch", step / 4, now, step))])
        client.set_terminated(run_id)
    client.set_terminated(parent)
    view = ensure_view(study.uri, eid)
    assert view == TRIALS_VIEW_ID  # its trials have no `arm` (an old study): one line per trial
    chart = _open(page, runs_url(ui_base, eid, view), lines=len(names))
    _shot(page, "ui_runs_chart_18_trials.png")
    assert sorted(chart["names"]) == sorted(names)
    assert len(set(chart["colors"].values())) == len(names)
    # the plain URL (no view; a fresh browser) hits MLflow's cap: the parent and 9 trials
    ctx = _context(browser)
    try:
        plain = _open(ctx.new_page(), runs_url(ui_base, eid, view=None), lines=9)
    finally:
        ctx.close()
    assert 0 < len(plain["names"]) < len(names)


#: a study logged directly: arm -> per seed, dev_loss at steps 1..10 (two arms of 2 seeds)
ARMS = {"ws2-warmup20-none": {0: 1.0, 1: 1.2}, "ws4-warmup20-linear": {0: 1.5, 1: 1.9},
        "ws4-warmup20-sqrt": {0: 2.4}}
STEPS = range(1, 11)


def _arm_loss(scale: float, step: int) -> float:
    return scale / step


@pytest.mark.slow
def test_url_lands_on_one_line_per_arm_with_its_band_and_one_click_gives_every_trial(
        study: Study, ui_base: str, page: Any) -> None:
    """The link: one dev_loss line per arm (the seeds' mean) over a band from the seeds' min
    to their max; the (x) on 'Group by: arm' then shows one line per trial."""
    from mlflow.entities import Metric, Param
    from mlflow.tracking import MlflowClient

    from scalesweep.orchestrator.tracking.ui import ensure_view

    client = MlflowClient(study.uri)
    eid = client.create_experiment("ui-arms")
    parent = client.create_run(eid, run_name="ui-arms",
                               tags={"scalesweep.role": "parent"}).info.run_id
    now = int(time.time() * 1000)
    trials = []
    for arm, seeds in ARMS.items():
        for seed, scale in seeds.items():
            name = f"{arm}-s{seed}" if len(seeds) > 1 else arm
            run_id = client.create_run(eid, run_name=name, tags={
                "scalesweep.role": "trial", "mlflow.parentRunId": parent}).info.run_id
            client.log_batch(run_id, params=[Param("arm", arm), Param("seed", str(seed))],
                             # epoch as trials log it: the views chart against it
                             metrics=[m for step in STEPS for m in (
                                 Metric("dev_loss", _arm_loss(scale, step), now, step),
                                 Metric("epoch", step / 4, now, step))])
            client.set_terminated(run_id)
            trials.append(name)
    client.set_terminated(parent)
    view = ensure_view(study.uri, eid)
    assert view == ARMS_VIEW_ID and ARMS_VIEW_STATE["groupBy"]["groupByKeys"][0] == {
        "mode": "param", "groupByData": "arm"}

    # the link: grouped by arm, one line and one band per arm, not one per trial
    chart = _open_groups(page, runs_url(ui_base, eid, view), len(ARMS))
    _shot(page, "ui_runs_chart_arms.png")
    assert page.get_by_text(VIEWS[ARMS_VIEW_ID][0]).first.is_visible()  # the Views selector
    group_by = page.get_by_test_id("column-selection-dropdown")
    assert group_by.inner_text().strip() == "Group by: arm"
    assert sorted(page.get_by_text("Group: ").all_inner_texts()) == \
        sorted(f"Group: {arm}" for arm in ARMS)
    assert sorted(chart["legend"]) == sorted([*ARMS, "Unassigned"])  # the parent has no arm
    assert len(chart["lines"]) == len(ARMS) < len(trials)
    assert len(chart["bands"]) == len(ARMS)
    assert chart["xaxis"] == "epoch"  # per epoch: world sizes side by side, not squeezed left
    assert all(line["x"] == pytest.approx([s / 4 for s in STEPS]) for line in chart["lines"])
    expect = {arm: [sum(_arm_loss(c, step) for c in seeds.values()) / len(seeds)
                    for step in STEPS] for arm, seeds in ARMS.items()}
    seen = {}
    for line in chart["lines"]:  # each line is an arm's mean over its seeds at each step
        arm = next(a for a, ys in expect.items() if line["y"] == pytest.approx(ys))
        seen[arm] = line["color"]
        band = next(b for b in chart["bands"] if b["color"].startswith(line["color"]))
        lo = [min(_arm_loss(c, step) for c in ARMS[arm].values()) for step in STEPS]
        hi = [max(_arm_loss(c, step) for c in ARMS[arm].values()) for step in STEPS]
        assert band["y"] == pytest.approx([*reversed(lo), None, *hi])  # min..max over seeds
        assert (min(hi) - min(lo) > 0) == (len(ARMS[arm]) > 1)  # a real band where 2 seeds
    assert set(seen) == set(ARMS)

    # one click: the (x) on 'Group by: arm' drops the grouping, one line per trial
    group_by.get_by_role("button").click()
    page.wait_for_function(f"(t) => {{ const c = ({CHART_JS})(t); "
                           f"return c && c.names.length >= {len(trials)}; }}",
                           arg="dev_loss", timeout=60_000)
    per_trial = page.evaluate(GROUPS_JS, "dev_loss")
    _shot(page, "ui_runs_chart_arms_back_to_trials.png")
    assert group_by.inner_text().strip() == "Group by"
    assert sorted(per_trial["names"]) == sorted(trials)
    assert len(per_trial["lines"]) == len(trials) and per_trial["bands"] == []
    assert len({line["color"] for line in per_trial["lines"]}) == len(trials)
