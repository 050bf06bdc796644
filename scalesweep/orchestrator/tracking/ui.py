"""`scalesweep ui`: the MLflow UI for a store, bound to 127.0.0.1 only, and the URL to open.

Why the URL is not just the experiment page (MLflow 3.17, read from its UI source under
mlflow/server/js/src/experiment-tracking/components/experiment-page; see docs/mlflow_ui.md):

- an experiment opens on its GenAI overview; ``workflowType=machine_learning`` on the runs
  tab opens the training runs, and ``compareRunsMode=CHART`` the chart view;
- child runs are nested (collapsed) under their parent whenever the runs are sorted by start
  time, MLflow's default; sorting by anything else lists every run flat, so the charts see the
  trials (the runs table computes ``nestChildren = (!orderByKey && !searchFilter) ||
  orderByKey === 'attributes.start_time'``);
- the charts draw only the first 10 rows unless the "runs visibility" mode is "show all", and
  that mode lives in per-browser UI state, not in the URL. A *saved view* (an experiment tag
  ``mlflow.sharedViewState.<id>``, what the UI's Views > "Save as new view" writes) carries the
  sort and the visibility mode, and ``viewStateShareKey=<id>`` in the URL applies it.

- grouping runs (the runs list's *Group by*) is UI state too, never a URL parameter
  (the URL's search facets are ``searchFilter, orderByKey, orderByAsc, startTime,
  lifecycleFilter, modelVersionFilter, datasetsFilter``); a saved view carries it as
  ``groupBy = {"aggregateFunction": "min"|"max"|"average", "groupByKeys": [{"mode":
  "param", "groupByData": "arm"}]}``. With ``useGroupedValuesInCharts`` (MLflow's default) a
  line chart then draws one line per group (its ``aggregateFunction`` of the group's runs at
  each step) and, behind it, a band from the group's min to its max at each step, whatever
  the function.

- the x-axis of every line chart is the workspace setting ``globalLineChartConfig``
  (``{"xAxisKey": "metric", "selectedXAxisMetricKey": "epoch"}`` charts against the logged
  ``epoch``); a saved view carries it too.

So ``ensure_view`` writes two saved views per study, *one line per arm* (grouped by the param
``arm``, the trial's settings minus its seed: a line per arm, band = min-max over its seeds)
and *one line per trial* (and gives the trials distinct colours: MLflow's hash of the run id
often paints two trials alike), both charting against ``epoch``, and the URL opens the first,
or the second for a study logged before trials had an ``arm`` param. Where the views cannot be
written, the plain URL (chart view, flat, sorted by name) still charts 9 trials.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from typing import Any
from urllib.parse import urlencode

from scalesweep.mlflow_names import ARM_PARAM, store_uri_for_mlflow

HOST = "127.0.0.1"
#: the saved views' ids (URL param ``viewStateShareKey``); their names are what the Views menu
#: shows. The link opens the arms view (the trials view for a study whose trials have no arm).
ARMS_VIEW_ID = "scalesweep-arms"
TRIALS_VIEW_ID = "scalesweep-trials"
VIEW_TAG_PREFIX = "mlflow.sharedViewState."
#: the MLflow param that names a trial's arm (its settings minus the seed; scalesweep.orchestrator.launch.run)
#: sorting by run name (anything but start time) lists the child runs flat, next to their parent
ORDER_BY = "tags.`mlflow.runName`"
#: the x-axis of every line chart (the workspace setting, which a saved view carries): going
#: from N to M workers changes the updates per epoch, so trials of different world sizes are
#: compared per epoch; against the update count the larger world sizes are squeezed left
EPOCH_X_AXIS: dict[str, Any] = {"xAxisKey": "metric", "selectedXAxisMetricKey": "epoch",
                                "lineSmoothness": 0}
TRIALS_VIEW_STATE: dict[str, Any] = {
    "searchFilter": "",
    "orderByKey": ORDER_BY,
    "orderByAsc": True,
    "runsHiddenMode": "SHOW_ALL",  # chart every run, not only the first 10 rows
    "globalLineChartConfig": EPOCH_X_AXIS,
}
#: the line is the arm's mean over its seeds at each step; MLflow draws the min-max band of the
#: group behind its line whatever the aggregate function ("min", "max" or "average")
ARMS_AGGREGATE = "average"
ARMS_VIEW_STATE: dict[str, Any] = {
    **TRIALS_VIEW_STATE,
    "groupBy": {"aggregateFunction": ARMS_AGGREGATE,
                "groupByKeys": [{"mode": "param", "groupByData": ARM_PARAM}]},
    "useGroupedValuesInCharts": True,  # the charts draw the groups, not their runs
}
#: view id -> (name in the Views menu, state)
VIEWS: dict[str, tuple[str, dict[str, Any]]] = {
    ARMS_VIEW_ID: ("scalesweep: one line per arm (band = min-max over seeds)", ARMS_VIEW_STATE),
    TRIALS_VIEW_ID: ("scalesweep: one line per trial", TRIALS_VIEW_STATE),
}
#: MLflow colours a run by a hash of its id (neighbours often look alike) unless the run has
#: this tag, which is what picking a colour in the runs list writes
RUN_COLOR_TAG = "mlflow.runColor"
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896",
           "#c5b0d5", "#c49c94", "#f7b6d2", "#c7c7c7", "#dbdb8d", "#9edae5")


def runs_url(base: str, experiment_id: str | None, view: str | None = ARMS_VIEW_ID) -> str:
    """The chart view of a study's runs, in the saved ``view`` (written by ``ensure_view``).

    ``ARMS_VIEW_ID``: one dev_loss line per arm with its min-max band; ``TRIALS_VIEW_ID``: one
    line per trial. Without a view the URL alone lists the runs flat by name in chart view,
    which charts the first 10 rows, one line per trial.
    """
    if experiment_id is None:
        return base
    query: dict[str, str] = {"workflowType": "machine_learning", "compareRunsMode": "CHART"}
    if view:
        # search facets in the URL would make MLflow ignore the view, so the view carries them
        query["viewStateShareKey"] = view
    else:
        query.update(orderByKey=ORDER_BY, orderByAsc="true")
    return f"{base}/#/experiments/{experiment_id}/runs?{urlencode(query)}"


def experiment_id(uri: str, name: str) -> str | None:
    from mlflow.tracking import MlflowClient

    try:
        exp = MlflowClient(store_uri_for_mlflow(uri)).get_experiment_by_name(name)
    except Exception:
        return None
    return None if exp is None else str(exp.experiment_id)


def view_tag(view_id: str) -> str:
    """The experiment tag that holds saved view ``view_id``."""
    return f"{VIEW_TAG_PREFIX}{view_id}"


def view_tag_value(created_ms: int, view_id: str = ARMS_VIEW_ID) -> str:
    """The saved-view envelope MLflow 3.17 reads: name, createdAt and the state as JSON text."""
    name, state = VIEWS[view_id]
    return json.dumps({"name": name, "createdAt": created_ms,
                       "state": json.dumps(state, sort_keys=True)})


def ensure_view(uri: str, experiment_id: str) -> str | None:
    """Write (or refresh) the study's saved views, colour its trials apart, and say which view
    the link should open: ``ARMS_VIEW_ID``, or ``TRIALS_VIEW_ID`` when no trial has an ``arm``
    param (a study logged before arms: grouping would lump every trial together).

    None when the store refuses the views (then use ``runs_url(..., view=None)``).
    """
    from mlflow.tracking import MlflowClient

    try:
        client = MlflowClient(store_uri_for_mlflow(uri))
        tags = client.get_experiment(experiment_id).tags
        now = int(time.time() * 1000)
        for view_id, (name, state) in VIEWS.items():
            current = tags.get(view_tag(view_id))
            if current is None or _envelope(current) != (name, state):
                client.set_experiment_tag(experiment_id, view_tag(view_id),
                                          view_tag_value(now, view_id))
    except Exception:
        return None
    trials: list[Any] = []
    with contextlib.suppress(Exception):
        trials = _trials(client, experiment_id)
    with contextlib.suppress(Exception):  # colours are a nicety; the views work without them
        color_trials(client, experiment_id, trials)
    return ARMS_VIEW_ID if any(ARM_PARAM in r.data.params for r in trials) else TRIALS_VIEW_ID


def _trials(client: Any, experiment_id: str) -> list[Any]:
    from scalesweep.orchestrator.tracking.tracker import ROLE_TAG

    return list(client.search_runs([experiment_id], f"tags.`{ROLE_TAG}` = 'trial'",
                                   max_results=5000))


def color_trials(client: Any, experiment_id: str, trials: list[Any] | None = None) -> None:
    """Give every trial without a colour one from PALETTE, unused ones first, in name order.

    A colour already set (by an earlier call, or picked by hand in the UI) is kept. ``trials``:
    the study's trial runs, when the caller has them already.
    """
    if trials is None:
        trials = _trials(client, experiment_id)
    used = {r.data.tags[RUN_COLOR_TAG] for r in trials if RUN_COLOR_TAG in r.data.tags}
    todo = sorted((r for r in trials if RUN_COLOR_TAG not in r.data.tags),
                  key=lambda r: (r.info.run_name or "", r.info.start_time or 0))
    colors = [c for c in PALETTE if c not in used] + list(PALETTE)
    for k, run in enumerate(todo):
        client.set_tag(run.info.run_id, RUN_COLOR_TAG, colors[k % len(colors)])


def _envelope(tag_value: str) -> tuple[str, Any] | None:
    """(name, state) of a saved-view tag value; None when it is not one."""
    try:
        env = json.loads(tag_value)
        return env["name"], json.loads(env["state"])
    except (ValueError, KeyError, TypeError):
        return None


def study_url(uri: str, base: str, experiment_id: str) -> str:
    return runs_url(base, experiment_id, ensure_view(uri, experiment_id))


#: what the link shows, by the view it opens, and how to get one line per trial back
SHOWS = {
    ARMS_VIEW_ID: ("one dev_loss line per arm (mean over its seeds), its band the min-max over "
                   "the seeds; one line per trial: one click on the (x) in 'Group by: arm' "
                   "above the runs list"),
    TRIALS_VIEW_ID: "one dev_loss line per trial",
    None: "one dev_loss line per trial",
}
PER_EPOCH = ("x-axis: epoch; per optimizer update instead: the gear beside 'Search metric "
             "charts' > X-axis > Step")


def ui_hint(uri: str, experiment: str, port: int = 5000) -> str:
    eid = experiment_id(uri, experiment)
    remote = uri.startswith(("http://", "https://"))
    base = uri.rstrip("/") if remote else f"http://{HOST}:{port}"
    view = None if eid is None else ensure_view(uri, eid)
    url = runs_url(base, eid, view)
    shows = f"  ({SHOWS[view]};\n   {PER_EPOCH})"
    if remote:
        return f"compare the runs: {url}\n{shows}"
    cmd = "scalesweep ui" if uri == "sqlite:///mlflow.db" else f"scalesweep ui --tracking-uri {uri}"
    return f"compare the runs: {cmd}   then open {url}\n{shows}"


def studies(uri: str) -> list[tuple[str, str]]:
    """(experiment id, name) of every study in the store that holds a scalesweep sweep."""
    from mlflow.tracking import MlflowClient

    from scalesweep.orchestrator.tracking.tracker import ROLE_TAG

    try:
        client = MlflowClient(store_uri_for_mlflow(uri))
        exps = {e.experiment_id: e.name for e in client.search_experiments(max_results=1000)}
        if not exps:
            return []
        parents = client.search_runs(list(exps), f"tags.`{ROLE_TAG}` = 'parent'", max_results=1000)
    except Exception:
        return []
    ids = sorted({r.info.experiment_id for r in parents}, key=lambda e: (len(e), e))
    return [(e, exps[e]) for e in ids]


def serve(uri: str, port: int, host: str = HOST) -> int:
    """Run ``mlflow ui`` on ``host`` (127.0.0.1 unless the user chose another) until Ctrl-C or
    SIGTERM, then stop its whole process tree."""
    base = f"http://{host}:{port}"
    print(f"MLflow UI at {base} (store {uri}); Ctrl-C stops it", flush=True)
    if not uri.startswith(("http://", "https://")):
        for eid, name in studies(uri):
            view = ensure_view(uri, eid)
            print(f"  {name}: {runs_url(base, eid, view)}\n    ({SHOWS[view]})", flush=True)
    # one worker: a personal UI needs no more, and it starts in half the time on a small machine
    cmd = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri,
           "--host", host, "--port", str(port), "--workers", "1"]
    # its own session, so that stopping it reaches the uvicorn workers it spawns
    proc = subprocess.Popen(cmd, env=os.environ.copy(), start_new_session=True)

    def _stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, _stop)
    try:
        return proc.wait()
    except KeyboardInterrupt:
        _stop_group(proc)
        return 0
    finally:
        signal.signal(signal.SIGTERM, previous)
        if proc.poll() is None:
            _stop_group(proc)


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    """Stop ``mlflow ui`` (it stops its uvicorn workers), then SIGKILL what is left of its group."""
    with contextlib.suppress(ProcessLookupError):
        proc.terminate()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=15)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
