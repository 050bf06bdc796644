"""The report's "solve" section, for a study that verifies a `scalesweep solve` search: every
candidate's score against its order, and the lr factor x warmup map with the candidates the
verification took (docs/solve.md). Read from MLflow only: the search's parent run is the one
the study's parent names (``scalesweep.solve_search``)."""

from __future__ import annotations

import base64
import html
import io
import math
from dataclasses import dataclass

from matplotlib.figure import Figure
from mlflow.entities import Run
from mlflow.tracking import MlflowClient

from scalesweep.mlflow_names import (
    PARENT_TAG,
    SOLVE_RATIO_METRIC,
    SOLVE_SEARCH_TAG,
    STATUS_TAG,
    store_uri_for_mlflow,
)

#: the candidates' run names start so (the baseline seeds' do not)
CANDIDATE_PREFIX = "c"


@dataclass(frozen=True)
class Scored:
    number: int
    lr_factor: float
    warmup: int
    score: float
    reached: bool  # stopped at the target; else the score is a bound


def _children(client: MlflowClient, experiment_id: str, parent: str) -> list[Run]:
    return list(client.search_runs([experiment_id], f"tags.`{PARENT_TAG}` = '{parent}'",
                                   max_results=5000))


def _setting(run: Run) -> tuple[float, int] | None:
    try:
        return float(run.data.params["scaling_rule"]), int(run.data.params["warmup_steps"])
    except (KeyError, ValueError):  # a named rule ("linear"): not a candidate's setting
        return None


def search_of(tracking_uri: str, parent_run_id: str
              ) -> tuple[str, list[Scored], set[tuple[float, int]]] | None:
    """The search parent run id, its candidates and the settings the study verified (lr
    factor, warmup), when the study verifies a solve."""
    client = MlflowClient(store_uri_for_mlflow(tracking_uri))
    parent = client.get_run(parent_run_id)
    search = parent.data.tags.get(SOLVE_SEARCH_TAG)
    if not search:
        return None
    exp = parent.info.experiment_id
    verified = {s for run in _children(client, exp, parent_run_id) if (s := _setting(run))}
    out = []
    for run in _children(client, exp, search):
        name = run.info.run_name or ""
        score = run.data.metrics.get(SOLVE_RATIO_METRIC)
        # KILLED: a candidate a driver's death cut short, run again under a new name on resume
        if (not name.startswith(CANDIDATE_PREFIX) or score is None or not math.isfinite(score)
                or run.info.status == "KILLED"):
            continue
        out.append(Scored(number=int(name[1:].split("-", 1)[0]),
                          lr_factor=float(run.data.params["scaling_rule"]),
                          warmup=int(run.data.params["warmup_steps"]), score=float(score),
                          reached=run.data.tags.get(STATUS_TAG) == "stopped"))
    return search, sorted(out, key=lambda s: s.number), verified


def plot_search(scored: list[Scored], verified: set[tuple[float, int]]) -> Figure:
    """Left: each candidate's score in the order drawn (open: a bound, not reached). Right:
    the lr factor x warmup map, colour the score, the verified candidates ringed."""
    fig = Figure(figsize=(10, 4))
    left, right = fig.subplots(1, 2)
    for reached, marker in ((True, "o"), (False, "^")):
        pts = [s for s in scored if s.reached == reached]
        left.scatter([s.number for s in pts], [s.score for s in pts], marker=marker,
                     facecolors="C0" if reached else "none", edgecolors="C0",
                     label="reached the target" if reached else "bound (stopped before reaching)")
    best = [min(s.score for s in scored[: i + 1] if s.reached) if any(t.reached for t in scored[: i + 1])
            else math.nan for i in range(len(scored))]
    left.step([s.number for s in scored], best, where="post", color="C1", label="best reached so far")
    left.axhline(1.0, color="grey", lw=0.8, ls="--")
    left.set(xlabel="candidate", ylabel="epochs ratio to its baseline seed", title="search")
    left.legend(fontsize=7)
    points = right.scatter([s.lr_factor for s in scored], [s.warmup for s in scored],
                           c=[s.score for s in scored], cmap="viridis_r",
                           marker="o", edgecolors="k", linewidths=0.3)
    ringed = [s for s in scored if (s.lr_factor, s.warmup) in verified]
    right.scatter([s.lr_factor for s in ringed], [s.warmup for s in ringed], s=200,
                  facecolors="none", edgecolors="C3", label="verified")
    right.set(xscale="log", yscale="log", xlabel="lr factor (x the reference lr)",
              ylabel="warmup (updates)", title="lr x warmup")
    fig.colorbar(points, ax=right, label="score")
    if ringed:
        right.legend(fontsize=7)
    fig.tight_layout()
    return fig


def solve_html(tracking_uri: str, parent_run_id: str) -> str:
    """The section, or "" when the study verifies no solve."""
    found = search_of(tracking_uri, parent_run_id)
    if found is None or not found[1]:
        return ""
    search, scored, verified = found
    buf = io.BytesIO()
    plot_search(scored, verified).savefig(buf, format="png", dpi=90)
    png = base64.b64encode(buf.getvalue()).decode("ascii")
    reached = sum(s.reached for s in scored)
    return f"""<h2>Solve: the search this study verifies</h2>
<p>This study is the verification of <code>scalesweep solve</code> (search parent run
{html.escape(search)}): {len(scored)} candidates, {reached} of which reached the target, each
scored by its epochs to the target over its paired baseline seed's (one seed each; a candidate
that had not reached scores the bound it is known to exceed, drawn open). The arms above
decide the verified ones with seeds; the answer is the best decision (docs/solve.md).</p>
<figure><img alt="solve search" src="data:image/png;base64,{png}"><figcaption>solve search
</figcaption></figure>"""
