"""Figures of a study's arms, read at a glance: every seed a dot, the median and its interval,
censored seeds drawn as what they are; dev loss per arm as a median curve with a min-max band."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from scalesweep.mlflow_names import ARM_PARAM
from scalesweep.science.stats.arms import ArmSummary
from scalesweep.science.stats.decisions import band
from scalesweep.science.stats.levels import LevelRatio
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


#: bounds and interval ends within this factor of the median ratios widen the axis; further
#: out a bound is drawn at the axis edge with its value, so one degenerate level (a target
#: above an arm's starting loss, reached at its first eval) cannot squash the others
RATIO_RANGE_FACTOR = 3.0


@dataclass(frozen=True)
class _LevelPoint:
    arm: str
    color: str
    x: float
    level: LevelRatio
    kind: str | None  # the median's Estimate.kind; None without paired seeds
    median: float | None
    lo: float | None  # the interval's finite ends
    hi: float | None


def _level_points(others: Sequence[ArmSummary]) -> list[_LevelPoint]:
    out = []
    for i, arm in enumerate(others):
        for lv in arm.levels:
            if lv.target is None:
                continue
            mi = lv.ratios if lv.ratios is not None and lv.ratios.n else None
            ci = (None, None) if mi is None or mi.ci is None else mi.ci
            out.append(_LevelPoint(
                arm.arm, f"C{i % 10}", lv.target * (1 + 0.012 * (i - len(others) / 2)),  # dodge
                lv, None if mi is None else mi.median.kind,
                None if mi is None else _finite(mi.median.value), _finite(ci[0]), _finite(ci[1])))
    return out


def _ratio_range(points: Sequence[_LevelPoint], margin: float | None) -> tuple[float, float]:
    """The y-limits: the median ratios that are values (with 1 and the equivalence band), and
    bounds or interval ends no further than RATIO_RANGE_FACTOR from them."""
    core = [1.0, *(band(margin) if margin else ())]
    values = [p.median for p in points if p.kind == "value" and p.median is not None and p.median > 0]
    lo, hi = min(core + values), max(core + values)
    if not values:  # nothing but bounds: let them set the range, as far as the factor allows
        lo, hi = lo / RATIO_RANGE_FACTOR, hi * RATIO_RANGE_FACTOR
    near = [v for p in points for v in (p.median, p.lo, p.hi)
            if v is not None and lo / RATIO_RANGE_FACTOR <= v <= hi * RATIO_RANGE_FACTOR and v > 0]
    lo, hi = min([lo, *near]), max([hi, *near])
    # room above the highest bound for its arrow
    return (max(0.0, lo * 0.9 if lo < 1 else 0.8), max(hi * 1.3, 1.2))


def plot_ratio_by_level(arms: Sequence[ArmSummary]) -> Figure:
    """Per arm, the paired epochs ratio against the baseline arm at every target loss (time
    to quality): the median with its interval, the marker saying the decision there; the
    equivalence band shaded around 1. A bound beyond the axis (a target above an arm's
    starting loss makes the ratio "at least" or "at most" its first eval over the other's
    crossing) sits at the axis edge with its value; a level both arms reached at their first
    eval has no ratio at all and is drawn as "?" at the bottom. The legend says which."""
    fig = Figure(figsize=(8.5, 5.0), layout="constrained")
    ax = fig.add_subplot()
    others = [a for a in arms if a.levels]
    margin = next((a.margin for a in others if a.margin), None)
    if margin:
        ax.axhspan(*band(margin), color="tab:blue", alpha=0.08,
                   label=f"equivalent (margin {margin:g})")
    ax.axhline(1.0, color="black", linewidth=0.8)
    points = _level_points(others)
    bottom, top = _ratio_range(points, margin)
    for arm in others:
        # a median that is only a bound (seeds that never reached) is drawn as an arrow from
        # it, never as a point on the line
        line = [p for p in points if p.arm == arm.arm and p.kind == "value" and p.median is not None]
        color = next((p.color for p in points if p.arm == arm.arm), "C0")
        ax.plot([p.x for p in line], [_nan(p.median) for p in line], "-", color=color, linewidth=1,
                label=arm.arm)
    beyond: list[str] = []
    unknown = 0
    for p in points:
        # the axis clips what runs past it; 0 to +inf (unknown) says nothing worth a bar
        if p.kind != "unknown" and (p.lo is not None or p.hi is not None):
            ax.vlines(p.x, p.lo if p.lo is not None else 0.0, p.hi if p.hi is not None else top,
                      color=p.color, linewidth=1.2, alpha=0.7)
        if p.kind == "unknown":  # 0 to +inf: both reached at their first eval
            unknown += 1
            ax.plot(p.x, bottom + 0.04 * (top - bottom), marker="$?$", color=p.color,
                    markersize=9, linestyle="none")
        elif p.median is not None and p.kind in ("at_least", "at_most"):
            up = p.kind == "at_least"
            sign = "≥" if up else "≤"
            if bottom <= p.median <= top:
                ax.annotate("", xy=(p.x, p.median * (1.25 if up else 0.8)), xytext=(p.x, p.median),
                            arrowprops={"arrowstyle": "->", "color": p.color, "linewidth": 1.5})
                ax.plot(p.x, p.median, "_", color=p.color, markersize=10, markeredgewidth=2)
            else:  # beyond the axis: at its edge, pointing out, with its value
                edge = top if p.median > top else bottom
                ax.plot(p.x, edge, "^" if edge == top else "v", color=p.color, markersize=8,
                        clip_on=False)
                ax.annotate(f"{sign} {p.median:.3g}", (p.x, edge), xytext=(0, -10 if edge == top else 4),
                            textcoords="offset points", ha="center", fontsize="x-small",
                            color=p.color)
                beyond.append(f"{p.arm} {sign} {p.median:.3g} at {p.level.target:.3g}")
        elif p.median is not None:
            marker, edge_color = DECISION_MARKERS.get(p.level.decision, ("o", "tab:gray"))
            ax.plot(p.x, p.median, marker, color=p.color, markeredgecolor=edge_color,
                    markeredgewidth=1.5, markersize=7)
    if beyond:
        ax.plot([], [], "^", color="tab:gray", linestyle="none",
                label="bound beyond the axis, at its edge: " + "; ".join(beyond))
    if unknown:
        ax.plot([], [], marker="$?$", color="tab:gray", linestyle="none",
                label="?: both reached the target at their first eval, no ratio")
    ax.set_ylim(bottom, top)
    ax.set_xscale("log")
    ax.invert_xaxis()  # training runs left to right: high losses first
    ax.set_xlabel("target loss (levels: the baseline arm's best × (1 + level))")
    ax.set_ylabel("epochs ratio vs baseline (paired; > 1: slower)")
    ax.set_title("time to quality: epochs ratio at every target; ▲ slower, ▼ faster, ■ equivalent, "
                 "● not resolved\nan arrow: a bound (seeds that never reached, or reached at the "
                 "first eval); bars: intervals", fontsize="small")
    ax.grid(alpha=0.3)
    if ax.lines:
        ax.legend(fontsize="x-small", loc="center left", bbox_to_anchor=(1.01, 0.5))
    return fig
