"""Figures of a study's arms, read at a glance: every seed a dot, the median and its interval,
censored seeds drawn as what they are; dev loss per arm as a median curve with a min-max band."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from scalesweep.mlflow_names import ARM_PARAM
from scalesweep.science.stats.arms import ArmSummary
from scalesweep.science.stats.trial_summary import TrialSummary

WARMUP_STYLES = ("-", "--", ":", "-.")


def _finite(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _nan(x: float | None) -> float:
    return math.nan if x is None else x


def plot_epochs_to_target(arms: Sequence[ArmSummary], trials: Sequence[TrialSummary]) -> Figure:
    """Per arm: each seed's epochs to target (dot; "▼" = reached by the first eval, plotted at
    that eval; "never" = above the plot's top), the median (bar) and its interval (whisker).
    ``trials``: the seeds, in the order they are drawn within each arm."""
    fig = Figure(figsize=(max(6.0, 0.9 * len(arms) + 2), 5.0), layout="constrained")
    ax = fig.add_subplot()
    ends = [v for t in trials for v in (t.epochs_to_target_hi, t.epochs_to_target, t.epochs_to_target_lo)]
    top = max([v for v in map(_finite, ends) if v is not None] or [1.0]) * 1.12
    for i, arm in enumerate(arms):
        seeds = [t for t in trials if t.arm == arm.arm]
        for j, t in enumerate(seeds):
            x = i + (j - (len(seeds) - 1) / 2) * 0.08
            if t.crossing == "interpolated":
                ax.plot(x, _nan(t.epochs_to_target), "o", color="tab:blue", markersize=5)
            elif t.crossing == "at_first_eval":
                ax.plot(x, _nan(t.epochs_to_target_hi), "v", color="tab:purple", markersize=6)
            else:
                ax.plot(x, top, "x", color="tab:red", markersize=6)
        mi = arm.medians["epochs"]
        med = mi.median.value
        if mi.ci is not None:
            lo, hi = _finite(mi.ci[0]), _finite(mi.ci[1])
            lo, hi = 0.0 if lo is None else lo, top if hi is None else hi
            ax.vlines(i + 0.25, lo, hi, color="black", linewidth=1.5)
            ax.hlines([lo, hi], i + 0.21, i + 0.29, color="black", linewidth=1.5)
        kind = mi.median.kind if mi.n else None
        label = "never" if kind == "never" else ("—" if med is None else
                                                  ("≤ " if kind == "at_most" else "") + f"{med:.3g}")
        if med is not None:
            ax.hlines(med, i - 0.3, i + 0.3, color="tab:orange", linewidth=2.5)
        ax.annotate(f"{label}\n{arm.n_reached}/{arm.n_seeds}", (i, top), ha="center",
                    va="bottom", fontsize="x-small")
    ax.axhline(top, color="tab:red", linewidth=0.6, linestyle=":")
    ax.text(len(arms) - 0.5, top, " never", color="tab:red", va="center", fontsize="x-small")
    ax.set_xticks(range(len(arms)), [a.arm.replace("-", "\n", 2) for a in arms], fontsize="x-small")
    ax.set_ylim(0, top * 1.12)
    ax.set_ylabel("epochs to target")
    cover = next((c for a in arms if (c := a.medians["epochs"].coverage)), None)
    ax.set_title("epochs to target per arm: seeds (dots; ▼ reached by the first eval; × never),\n"
                 f"median (orange), interval (black{f', {cover:.0%} coverage' if cover else ''})",
                 fontsize="small")
    ax.grid(axis="y", alpha=0.3)
    return fig


def plot_dev_loss_by_arm(history: pd.DataFrame, table: pd.DataFrame, x: str = "epoch",
                         y: str = "dev_loss", target: float | None = None) -> Figure:
    """Per arm the median of its seeds' curves with a min-max band; one colour per arm, the
    line style by warmup rule. Seeds are aligned on the update they were evaluated at."""
    fig = Figure(figsize=(8.5, 5.0), layout="constrained")
    ax = fig.add_subplot()
    arms = list(dict.fromkeys(table[ARM_PARAM]))
    warmups = list(dict.fromkeys(str(w) for w in table["warmup_rule"]))
    colors = [f"C{i % 10}" for i in range(len(arms))]
    for arm, color in zip(arms, colors, strict=True):
        rows = table[table[ARM_PARAM] == arm]
        runs = set(rows["run_id"])
        warm = str(rows["warmup_rule"].iloc[0])
        h = history[history["run_id"].isin(runs) & history[y].notna()]
        if h.empty or x not in h:
            continue
        wide = h.pivot_table(index="step", columns="run_id", values=y)
        xs = h.groupby("step")[x].mean().reindex(wide.index)
        med = wide.median(axis=1)
        style = WARMUP_STYLES[warmups.index(warm) % len(WARMUP_STYLES)]
        ax.plot(xs, med, style, color=color, linewidth=1.4, label=f"{arm} (n={len(runs)})")
        if wide.shape[1] > 1:
            ax.fill_between(xs, wide.min(axis=1), wide.max(axis=1), color=color, alpha=0.15,
                            linewidth=0)
    if target is not None:
        ax.axhline(target, color="black", linestyle="--", linewidth=0.8, label=f"target {target:g}")
    values = history[y].to_numpy(dtype=float) if y in history else np.array([])
    finite = values[np.isfinite(values)]
    if finite.size and finite.min() > 0 and finite.max() / finite.min() > 10:
        ax.set_yscale("log")  # early losses are 10-100x the converged ones
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.set_title(f"{y} per arm: median over seeds, band = min-max (line style: warmup rule)",
                 fontsize="small")
    ax.grid(alpha=0.3)
    if ax.lines:
        ax.legend(fontsize="x-small", loc="center left", bbox_to_anchor=(1.01, 0.5))
    return fig


DECISION_MARKERS = {"slower": ("^", "tab:red"), "faster": ("v", "tab:green"),
                    "equivalent": ("s", "tab:blue"), "not resolved": ("o", "tab:gray")}


def plot_ratio_by_level(arms: Sequence[ArmSummary]) -> Figure:
    """Per arm, the paired epochs ratio against the baseline arm at every target loss (time
    to quality): the median with its interval, the marker saying the decision there; the
    equivalence band shaded around 1."""
    fig = Figure(figsize=(8.5, 5.0), layout="constrained")
    ax = fig.add_subplot()
    others = [a for a in arms if a.levels]
    margin = next((a.margin for a in others if a.margin), None)
    if margin:
        ax.axhspan(1 / (1 + margin), 1 + margin, color="tab:blue", alpha=0.08,
                   label=f"equivalent (margin {margin:g})")
    ax.axhline(1.0, color="black", linewidth=0.8)
    tops: list[float] = []
    for i, arm in enumerate(others):
        color = f"C{i % 10}"
        pts = [(lv, lv.target) for lv in arm.levels if lv.target is not None]
        xs = [target * (1 + 0.012 * (i - len(others) / 2)) for _, target in pts]  # dodge
        # a median that is only a bound (seeds that never reached) is drawn as an arrow from
        # it, never as a point on the line
        kinds = [lv.ratios.median.kind if lv.ratios and lv.ratios.n else None for lv, _ in pts]
        meds = [_finite(lv.ratios.median.value) if lv.ratios and lv.ratios.n else None for lv, _ in pts]
        on_line = [(x, m) for x, m, k in zip(xs, meds, kinds, strict=True) if m is not None and k == "value"]
        ax.plot([x for x, _ in on_line], [m for _, m in on_line], "-", color=color, linewidth=1,
                label=arm.arm)
        for x, (lv, _), med in zip(xs, pts, meds, strict=True):
            ci = (None, None) if lv.ratios is None or lv.ratios.ci is None else lv.ratios.ci
            lo, hi = _finite(ci[0]), _finite(ci[1])
            if lo is not None or hi is not None:
                tops += [v for v in (lo, hi) if v is not None]
                ax.vlines(x, lo if lo is not None else 0.0, hi if hi is not None else 10.0,
                          color=color, linewidth=1.2, alpha=0.7)
            marker, edge = DECISION_MARKERS.get(lv.decision, ("o", "tab:gray"))
            kind = lv.ratios.median.kind if lv.ratios and lv.ratios.n else None
            if med is not None and kind in ("at_least", "at_most"):
                tops.append(med)
                ax.annotate("", xy=(x, med * (1.25 if kind == "at_least" else 0.8)), xytext=(x, med),
                            arrowprops={"arrowstyle": "->", "color": color, "linewidth": 1.5})
                ax.plot(x, med, "_", color=color, markersize=10, markeredgewidth=2)
            elif med is not None:
                tops.append(med)
                ax.plot(x, med, marker, color=color, markeredgecolor=edge, markeredgewidth=1.5,
                        markersize=7)
    finite = [v for v in tops if v > 0]
    if finite:
        # room above the highest bound for its arrow
        ax.set_ylim(max(0.0, min(finite) * 0.9 if min(finite) < 1 else 0.8), max(max(finite) * 1.3, 1.2))
    ax.set_xscale("log")
    ax.invert_xaxis()  # training runs left to right: high losses first
    ax.set_xlabel("target loss (levels: the baseline arm's best × (1 + level))")
    ax.set_ylabel("epochs ratio vs baseline (paired; > 1: slower)")
    ax.set_title("time to quality: epochs ratio at every target; ▲ slower, ▼ faster, ■ equivalent, "
                 "● not resolved\nan arrow: a bound (seeds that never reached); bars: intervals",
                 fontsize="small")
    ax.grid(alpha=0.3)
    if ax.lines:
        ax.legend(fontsize="x-small", loc="center left", bbox_to_anchor=(1.01, 0.5))
    return fig
