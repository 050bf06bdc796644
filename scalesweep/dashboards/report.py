"""The convergence report of one sweep: a table, figures, the scaling advice, and one
self-contained HTML page.

Reads MLflow (through :mod:`scalesweep.dashboards.mlflow_data`) and the pure math only: every
trial's summary is :func:`scalesweep.dashboards.convergence_table.study_trials` (the driver's
computation on the logged history), the table
:func:`scalesweep.dashboards.convergence_table.convergence_table`, the arms
:func:`scalesweep.dashboards.arms_table.arm_summaries`, the advice
:func:`scalesweep.dashboards.advice.advise` (the text ``scalesweep advise`` prints).
"""

from __future__ import annotations

import base64
import errno
import html
import io
import json
import math
import os
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from scalesweep import atomic_file
from scalesweep.dashboards import advice as scaling_advice
from scalesweep.dashboards.arm_figures import plot_dev_loss_by_arm, plot_ratio_by_level
from scalesweep.dashboards.arm_figures import plot_epochs_to_target as plot_arms_epochs_to_target
from scalesweep.dashboards.arm_text import conditioning_text, interval_text, levels_text, median_text
from scalesweep.dashboards.arms_table import arm_summaries, arms_frame
from scalesweep.dashboards.convergence_table import PROJECTED, StudyTrial, convergence_table, study_trials
from scalesweep.dashboards.mlflow_data import Projection, Study, load_study
from scalesweep.dashboards.prediction_ledger import ledger_lines
from scalesweep.dashboards.prediction_report import predictions_html
from scalesweep.dashboards.solve_report import solve_html
from scalesweep.dashboards.study_checks import checks_html
from scalesweep.errors import ScalesweepError
from scalesweep.mlflow_names import EPOCHS_TO_TARGET_METRIC, TRIAL_NAME_TAG
from scalesweep.science.stats.arms import (
    ArmSummary,
    ratios,
)
from scalesweep.science.stats.decisions import band
from scalesweep.science.stats.replicates import CONFIDENCE, METHOD, PAIRED_METHOD, MedianInterval

__all__ = ["PROJECTED", "ReportPaths", "ReportUnwritable", "build_report", "convergence_table"]

X_LABELS = {
    "step": "optimizer updates",
    "samples_seen": "samples seen",
    "epoch": "epoch",
    "wall_s": "wall time (s)",
}


@dataclass(frozen=True)
class ReportPaths:
    out_dir: Path
    html: Path
    csv: Path
    json: Path
    advice: Path
    arms_csv: Path
    arms_json: Path
    figures: dict[str, Path]
    #: what the report's tables were made of, for a caller that prints them too
    trials: list[StudyTrial] = field(default_factory=list)
    arms: list[ArmSummary] = field(default_factory=list)


def plot_curves(
    history: pd.DataFrame,
    y: str,
    x: str,
    *,
    order: Sequence[str] = (),
    target: float | None = None,
    title: str = "",
) -> Figure:
    """``y`` against ``x`` (any history column, ``step`` = updates), one line per trial."""
    fig = Figure(figsize=(8, 4.8), layout="constrained")
    ax = fig.add_subplot()
    names = list(order) or sorted(history[TRIAL_NAME_TAG].unique())
    for name in names:
        rows = history[history[TRIAL_NAME_TAG] == name]
        if y not in rows or x not in rows:
            continue
        rows = rows[rows[y].notna() & rows[x].notna()].sort_values(x)
        if not rows.empty:
            marker = "." if len(rows) <= 60 else None  # dots show where the evals are
            ax.plot(rows[x], rows[y], marker=marker, markersize=3, linewidth=1.2, label=name)
    if target is not None:
        ax.axhline(target, color="black", linestyle="--", linewidth=0.8, label=f"target {target:g}")
    values = [float(v) for line in ax.lines for v in np.asarray(line.get_ydata(), dtype=float)]
    if ("loss" in y or y == "noise_scale") and values and min(values) > 0 and max(values) / min(values) > 10:
        # early losses are 10-100x the converged ones: on a linear axis every curve looks
        # the same near the target, which is where the comparison is; the noise scale grows
        # by orders of magnitude as the loss falls, and its estimate from few small batches
        # spikes late in training
        ax.set_yscale("log")
    ax.set_xlabel(X_LABELS.get(x, x))
    ax.set_ylabel(y)
    ax.set_title(title or f"{y} vs {X_LABELS.get(x, x)}")
    ax.grid(alpha=0.3)
    if ax.lines:
        ax.legend(fontsize="x-small", loc="center left", bbox_to_anchor=(1.01, 0.5))
    return fig


def _value_median(mi: MedianInterval) -> float | None:
    """A median that is a plain value (not a bound, not never), else None."""
    return mi.median.value if mi.n and mi.median.kind == "value" else None


def plot_projected_time(arms: Sequence[ArmSummary], projection: Projection) -> Figure:
    """Per arm, the median measured seconds to target (this run's machine) beside the projected
    time to target on the projection's cluster: median epochs to target × its seconds per
    epoch at the arm's world size (hours, or minutes below two hours); "never" where half or
    more seeds never reached the target."""
    fig = Figure(figsize=(max(8.0, 1.2 * len(arms) + 3), 4.8), layout="constrained")
    labels = [a.arm.replace("-", "\n", 2) for a in arms]
    measured, projected = [], []
    for a in arms:
        per_epoch = projection.seconds_per_epoch.get(int(a.axes.get("world_size", 0)))
        epochs = _value_median(a.medians["epochs"])
        projected.append(math.nan if epochs is None or per_epoch is None else epochs * per_epoch)
        sec = _value_median(a.medians["seconds"])
        measured.append(math.nan if sec is None else float(sec))
    longest = max([v for v in projected if math.isfinite(v)] or [0.0])
    unit, unit_name = (3600.0, "hours") if longest >= 7200 else (60.0, "minutes")
    panels = [
        (measured, 1.0, "median measured seconds to target (this run)", "tab:gray", "measured here"),
        (projected, unit, f"projected {unit_name} to target", "tab:orange",
         f"projected (from {projection.label})"),
    ]  # fmt: skip
    for i, (values, scale, ylabel, color, title) in enumerate(panels):
        ax = fig.add_subplot(1, 2, i + 1)
        bars = ax.bar(range(len(arms)), [0.0 if not math.isfinite(v) else v / scale for v in values],
                      color=color)
        for bar, v, a in zip(bars, values, arms, strict=True):
            never = bool(a.medians["epochs"].n) and a.medians["epochs"].median.kind == "never"
            text = ("never" if never else "—") if not math.isfinite(v) else f"{v / scale:.3g}"
            ax.annotate(text, (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                        ha="center", va="bottom", fontsize="small")
        ax.set_xticks(range(len(arms)), labels, fontsize="x-small")
        ax.set_ylabel(ylabel)
        # the label is the user's and may be long: wrapped, or it runs off the figure
        ax.set_title(textwrap.fill(title, 48), fontsize="medium")
        ax.grid(axis="y", alpha=0.3)
    timings = ", ".join(f"{ws} workers {s:g} s" for ws, s in sorted(projection.seconds_per_epoch.items()))
    fig.suptitle(textwrap.fill("wall time to target: projected = median epochs to target × seconds "
                               f"per epoch ({timings})", 110), fontsize="small")
    return fig


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return buf.getvalue()


#: the figure of each arm's seeds' epochs to target, named after that metric
EPOCHS_FIGURE = EPOCHS_TO_TARGET_METRIC
#: the figures of the answer, shown first (the rest are per trial)
ARM_FIGURES = ("epochs_ratio_by_level", "dev_loss_by_arm_vs_epoch", EPOCHS_FIGURE,
               "projected_time_to_target")


def report_figures(study: Study, table: pd.DataFrame, trials: Sequence[StudyTrial],
                   arms: Sequence[ArmSummary] = ()) -> dict[str, Figure]:
    """Every figure of the report by file name, the arms' figures first."""
    if not arms:
        arms = arm_summaries(study, trials)
    out: dict[str, Figure] = {}
    if any(a.levels for a in arms):
        out["epochs_ratio_by_level"] = plot_ratio_by_level(arms)
    out["dev_loss_by_arm_vs_epoch"] = plot_dev_loss_by_arm(
        study.history, table, target=study.target_value if study.target_metric == "dev_loss" else None)
    out[EPOCHS_FIGURE] = plot_arms_epochs_to_target(arms, [t.summary for t in trials])
    projection = study.projection
    if projection is not None:
        out["projected_time_to_target"] = plot_projected_time(arms, projection)
    out.update(_trial_figures(study, trials))
    return out


def _trial_figures(study: Study, trials: Sequence[StudyTrial]) -> dict[str, Figure]:
    order = [t.summary.name for t in trials]
    target = study.target_value
    ys = list(dict.fromkeys(["dev_loss", study.target_metric]))
    out: dict[str, Figure] = {
        f"{y}_vs_{x}": plot_curves(
            study.history, y, x, order=order,
            target=target if y == study.target_metric else None,
        )
        for y in ys
        for x in ("epoch", "samples_seen", "step", "wall_s")
    }  # fmt: skip
    out["lr_vs_epoch"] = plot_curves(study.history, "lr", "epoch", order=order)
    if "noise_scale" in study.history and study.history["noise_scale"].notna().any():
        out["noise_scale_vs_epoch"] = plot_curves(
            study.history, "noise_scale", "epoch", order=order,
            title="gradient noise scale B_simple (EMA) vs epoch")
    return out


def _cell(v: object) -> str:
    if v is None or v is pd.NA or (isinstance(v, float) and not math.isfinite(v)):
        return "—"
    if isinstance(v, float):
        if v.is_integer() and abs(v) < 1e15:
            return f"{v:,.0f}"
        return f"{v:,.1f}" if abs(v) >= 100 else f"{v:.4g}"
    return str(v)


def advice_text(study: Study, trials: Sequence[StudyTrial]) -> str:
    """``scalesweep advise``'s text for the largest measured world size, or why there is none."""
    try:
        return scaling_advice.render(scaling_advice.advise(study, summaries=trials))
    except ValueError as exc:  # e.g. no trial with a known global batch
        return f"no advice: {exc}"


def first_eval_note(trials: Sequence[StudyTrial]) -> str:
    """Names the trials whose crossing lies before their first evaluation, and what to do."""
    first = [t.summary.name for t in trials if t.summary.crossing == "at_first_eval"]
    if not first:
        return ""
    return (f"<p><b>{len(first)} trial(s) reached the target at their first evaluation</b> "
            f"({html.escape(', '.join(first))}): their epochs to target are only bounds (≤ the "
            "first eval), and every speedup or ratio involving them is unresolved. Evaluate more "
            "often (<code>training.eval_every_epochs</code>) or set a harder target.</p>")


def arms_html(arms: Sequence[ArmSummary]) -> str:
    """The answer: each arm's decision, seeds, median and interval, the levels it is decided
    at, and its verdict in words."""
    if not arms:
        return "<p>No arms.</p>"
    e = html.escape

    def cells(a: ArmSummary) -> list[str]:
        epochs, ratio, speedup = a.medians["epochs"], ratios(a.epochs_ratio), ratios(a.speedup)
        return [a.arm, f"{a.n_reached}/{a.n_seeds}", median_text(epochs), interval_text(epochs),
                median_text(a.medians["updates"]), median_text(ratio), interval_text(ratio),
                median_text(speedup), interval_text(speedup)]

    rows = "\n".join(
        "<tr>" + f"<td><b>{e(a.answer)}</b></td>"
        + "".join(f"<td>{e(c)}</td>" for c in cells(a))
        + f"<td style='text-align:left'>{e(levels_text(a))}</td>"
        + f"<td style='text-align:left'>{e(a.verdict())}</td></tr>"
        for a in arms)
    return f"""<div class="wide"><table class="trials"><tr><th>decision</th><th>arm</th>
<th>seeds reached</th><th>epochs to target (median)</th><th>interval</th>
<th>updates to target (median)</th><th>epochs ratio vs baseline (paired)</th><th>interval</th>
<th>speedup (updates, paired)</th><th>interval</th><th>decided at levels</th><th>verdict</th></tr>
{rows}</table></div>"""


def render_html(study: Study, table: pd.DataFrame, trials: Sequence[StudyTrial], pngs: dict[str, bytes],
                advice: str = "", arms: Sequence[ArmSummary] = (), predictions: str = "",
                checks: str = "") -> str:
    """One page, no external resources: images inline as base64, styles inline;
    ``predictions``: the section of predictions_html, where any were recorded; ``checks``:
    the plateau and curtailment section (study_checks.checks_html)."""
    target = study.target_value
    sign = "≤" if study.rules.mode == "min" else "≥"
    goal = "not set" if target is None else f"{study.target_metric} {sign} {target:g}"
    if study.rules.smoothing:
        goal += f" (EMA smoothing {study.rules.smoothing:g})"
    shown = table.map(_cell)
    projection = study.projection
    about_projection = ""
    if projection is not None:
        label = f"projected (from {projection.label})"
        shown = shown.rename(columns={PROJECTED: f"{PROJECTED} — {label}"})
        missing = sorted({int(ws) for ws in table["world_size"].dropna()}
                         - set(projection.seconds_per_epoch))
        timings = ", ".join(f"{ws} workers: {s:g} s"
                            for ws, s in sorted(projection.seconds_per_epoch.items()))
        about_projection = (
            f"<p><b>{html.escape(label)}</b>: {PROJECTED} = epochs_to_target × the seconds per "
            f"epoch measured there ({html.escape(timings)}). A projection, not a measurement: it "
            "assumes this study's epochs to target carry over to that job. seconds_to_target is "
            "this run's own wall time."
            + (f" No timing for world size(s) {', '.join(map(str, missing))}: shown as —."
               if missing else "") + "</p>")
    body = shown.to_html(index=False, escape=True, classes="trials")
    e = html.escape

    def figures(names: Sequence[str]) -> str:
        return "\n".join(
            f'<figure><img alt="{e(name)}" src="data:image/png;base64,'
            f'{base64.b64encode(pngs[name]).decode("ascii")}"><figcaption>{e(name)}'
            "</figcaption></figure>" for name in names if name in pngs)

    warnings = "".join(f"<p class='warn'>{e(w)}</p>" for a in arms if (w := conditioning_text(a)))
    warnings += "".join(f"<p class='warn'>{e(n)}</p>" for a in arms if a.is_baseline for n in a.notes)
    margin = next((a.margin for a in arms if a.margin), None)
    inside = ("" if margin is None else " inside [{:.3g}, {:.3g}] ".format(*band(margin))
              + f"(<code>target.equivalence_margin</code> {margin:g})")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>scalesweep report: {e(study.experiment_name)}</title>
<style>
body {{ font-family: sans-serif; margin: 1.5em; }}
table.trials {{ border-collapse: collapse; font-size: 0.85em; }}
table.trials th, table.trials td {{ border: 1px solid #ccc; padding: 0.25em 0.5em; }}
table.trials td {{ text-align: right; }}
div.wide {{ max-width: 100%; overflow-x: auto; }}
p.warn {{ color: #a40; }}
figure {{ display: inline-block; margin: 0.5em; }}
img {{ max-width: 100%; }}
</style></head><body>
<h1>Study {e(study.experiment_name)}</h1>
<p>Parent run {e(study.parent_run_name)} ({e(study.parent_run_id)}) ·
target: <b>{e(goal)}</b> · baseline trial: {e(study.baseline_trial or "none")}</p>
<h2>The answer: each arm against the baseline</h2>
<p>An arm is a trial's settings minus its seed; its seeds are paired with the baseline arm's
by seed number (same init, same data order). The <b>decision</b> reads the paired epochs
ratio's interval (trial / baseline; &gt; 1 needs more epochs): <b>slower</b> when it lies
above 1, <b>faster</b> below 1, <b>equivalent</b> when it lies wholly{inside}, else <b>not
resolved</b>; the verdict says the same decision with the interval it rests on. The same is
done at every level of time to quality (each pair's target its cross-fitted baseline best ×
(1 + level)): the headline's level takes the headline's decision, and the others are one
family, tested from the loosest level to the tightest and stopped at the first not decided
as the loosest was: "decided at levels" (a level decided by its own interval past that stop
is marked exploratory) and the first figure. Targets: the best of the baseline's first-look
seeds other than the pair's own, read within the horizon / (1 + margin) (docs/design.md §4,
"Target"). Each arm's median: {e(METHOD)}. Ratios and decisions: {e(PAIRED_METHOD)};
read at {study.rules.confidence:.4g} before the design's last look and
{study.rules.last_confidence or study.rules.confidence:.4g} at it, so that the design's error
over its planned looks is at most {1 - CONFIDENCE:.0%} (two-sided), with the exact coverage
the seed count allows; a seed that never reached is never dropped (its pair at least the
horizon over the baseline's crossing, unbounded above; "≤ x" where the crossing lies before
the first evaluation; a ratio drawn as an arrow is a bound). A rerun on another CPU is another random draw
(floating-point rounding differs): compare decisions, not digits.</p>
{warnings}
{arms_html(arms)}
{figures([n for n in ARM_FIGURES])}
{checks}
<h2>Trials</h2>
<p>Speedup is the baseline's optimizer updates to target over the trial's (Shallue et al.
2019); speedup_by_epochs is the same on the epoch clock; scaling efficiency is the updates
speedup over the global-batch ratio (1 = perfect). Trials that never reached the target show
"—" and are listed last.</p>
{first_eval_note(trials)}
{about_projection}
<div class="wide">{body}</div>
{figures([n for n in pngs if n not in ARM_FIGURES])}
<h2>Scaling advice</h2>
<p>What <code>scalesweep advise</code> says about this study (at its largest world size; pass
<code>--world-size N</code> to it for another): updates to target against global batch, the
fit S = S_min (1 + B_crit / B) of McCandlish et al. where the data support one, the measured
gradient noise scale, and the lr and warmup rules to use. A fit needs the target reached at 3 or
more global batches; with fewer, only measured world sizes get a recommendation.</p>
<pre>{e(advice)}</pre>
{predictions}
</body></html>
"""


def build_report(
    tracking_uri: str,
    *,
    experiment: str | None = None,
    parent_run_id: str | None = None,
    out_dir: str | Path,
) -> ReportPaths:
    """Load the study from MLflow and write report.html, trials.csv/.json and one PNG a figure."""
    study = load_study(tracking_uri, experiment=experiment, parent_run_id=parent_run_id)
    out = Path(out_dir)
    trials = study_trials(study)
    table = convergence_table(study, trials)
    arms = arm_summaries(study, trials)
    pngs = {name: _png(fig) for name, fig in report_figures(study, table, trials, arms).items()}
    paths = ReportPaths(
        out_dir=out,
        html=out / "report.html",
        csv=out / "trials.csv",
        json=out / "trials.json",
        advice=out / "advice.txt",
        arms_csv=out / "arms.csv",
        arms_json=out / "arms.json",
        figures={name: out / f"{name}.png" for name in pngs},
        trials=trials,
        arms=arms,
    )
    advice = advice_text(study, trials)
    predicted = predictions_html(ledger_lines(tracking_uri, study.experiment_name))
    predicted += solve_html(tracking_uri, study.parent_run_id)
    files: list[tuple[Path, bytes | str]] = [
        *((paths.figures[name], png) for name, png in pngs.items()),
        (paths.csv, table.to_csv(index=False)),
        (paths.json, str(table.to_json(orient="records", indent=2))),
        (paths.arms_json, json.dumps([a.as_json() for a in arms], indent=1)),
        (paths.arms_csv, arms_frame(arms).to_csv(index=False)),
        (paths.advice, advice + "\n"),
        # last: the page a reader opens is there only once the files beside it are
        (paths.html, render_html(study, table, trials, pngs, advice, arms, predicted,
                                 checks_html(study))),
    ]
    write_files(files, again=again_command(study.experiment_name, out))
    return paths


class ReportUnwritable(ScalesweepError, RuntimeError):
    """A report file the disk cannot take (ENOSPC, EDQUOT, EFBIG): each file of the report is
    whole (the new one, the old one, or none); the sweep's trials are finished and in MLflow,
    and ``again`` (``scalesweep report ...``) writes the report once there is space."""

    def __init__(self, path: Path, error: OSError, again: str) -> None:
        self.path = path
        self.error = error
        code = errno.errorcode.get(error.errno or 0, str(error.errno))
        super().__init__(
            f"{path}: cannot write the report ({os.strerror(error.errno or 0)}, {code}); the "
            "sweep's trials are finished and in MLflow, and each file of the report is whole "
            f"(the one before, if any). Free space, then `{again}` writes it again")


def again_command(experiment: str, out: Path) -> str:
    """The command that writes this study's report to ``out`` again."""
    default = Path("reports") / experiment
    where = "" if Path(out) == default else f" --out {out}"
    return f"scalesweep report --experiment {experiment}{where}"


def write_files(files: Sequence[tuple[Path, bytes | str]], *, again: str) -> None:
    """Each file whole (a temporary file renamed over it); one the disk cannot take stops the
    report with :class:`ReportUnwritable`, any other OSError as it is."""
    for path, data in files:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_file.write_bytes(path, data.encode("utf-8") if isinstance(data, str) else data)
        except OSError as exc:
            if exc.errno not in atomic_file.DISK_FULL_ERRNOS:
                raise
            raise ReportUnwritable(path, exc, again) from exc
