"""The tables `run` prints at the end: one line per trial (fastest to target first), then one
line per arm (its seeds' median and interval, and the comparison with the baseline arm)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from scalesweep.science.stats.arms import conditioning_text, interval_text, levels_text, median_text

COLUMNS = (("trial", "name"), ("status", "status"), ("epochs→target", "epochs_to_target"),
           ("updates→target", "updates_to_target"), ("speedup", "speedup_vs_baseline"),
           ("best dev_loss", "best_dev_loss"), ("train s", "train_seconds"))
FIRST_EVAL_ADVICE = ("evaluate more often (training.eval_every_epochs) or set a harder target: "
                     "a crossing before the first evaluation is a bound, not a measurement")


def _cell(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.4g}" if math.isfinite(value) else str(value)
    return str(value)


def _crossing_cell(t: dict[str, Any], key: str) -> str:
    """epochs/updates to target as the evals allow: a value, "≤ x" at the first eval, "never"."""
    kind = t.get("crossing")
    if kind == "at_first_eval":
        return f"≤ {_cell(t.get(f'{key}_hi'))}"
    if kind == "never":
        return "never"
    return _cell(t.get(key))


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)


def format_summary(trials: Sequence[dict[str, Any]]) -> str:
    def key(t: dict[str, Any]) -> tuple[int, float]:
        e = t.get("epochs_to_target")
        if e is None and t.get("crossing") == "at_first_eval":
            e = t.get("epochs_to_target_hi")
        return (0, float(e)) if e is not None else (1, 0.0)

    rows = []
    for t in sorted(trials, key=key):
        row = [_cell(t.get(k)) for _, k in COLUMNS]
        row[2] = _crossing_cell(t, "epochs_to_target")
        row[3] = _crossing_cell(t, "updates_to_target")
        rows.append(row)
    text = _table([h for h, _ in COLUMNS], rows)
    first = [t["name"] for t in trials if t.get("crossing") == "at_first_eval"]
    if first:
        text += (f"\n{len(first)} trial(s) reached the target at their first evaluation "
                 f"({', '.join(first)}): {FIRST_EVAL_ADVICE}")
    return text


def format_arms(arms: Sequence[dict[str, Any]]) -> str:
    """Per arm: seeds reached / run, median epochs to target [interval], the epochs ratio to the
    baseline arm (paired by seed) [interval], the decision at the target and the levels at
    which it is decided; then each arm's verdict in words."""
    if not arms:
        return ""
    coverage = next((a.get("epochs_to_target_ci_coverage") for a in arms
                     if a.get("epochs_to_target_ci_coverage")), None)
    header = ["arm", "reached", "epochs→target (median)", "interval", "epochs ratio vs baseline",
              "interval", "decision", "decided at levels"]
    rows = [[a["arm"], f"{a['n_reached']}/{a['n_seeds']}", median_text(a, "epochs_to_target"),
             interval_text(a.get("epochs_to_target_ci")), median_text(a, "epochs_ratio_vs_baseline"),
             interval_text(a.get("epochs_ratio_vs_baseline_ci")), a.get("decision", ""),
             levels_text(a) if a.get("decision") != "baseline" else ""]
            for a in arms]
    margin = arms[0].get("equivalence_margin")
    note = (f"intervals: {arms[0].get('method', '')}; coverage {coverage:.0%} at these seeds "
            f"(nominal {arms[0].get('confidence', 0.9):.0%})" if coverage else
            "intervals: n/a with one seed per arm")
    if margin is not None:
        note += (f"; equivalent = the ratio's interval inside [{1 / (1 + margin):.3g}, {1 + margin:.3g}] "
                 f"(target.equivalence_margin {margin:g}); levels: targets best × (1 + level)")
    warnings = [w for a in arms if (w := conditioning_text(a))]
    verdicts = "\n".join(f"  {a['arm']}: {a['verdict']}" for a in arms if a.get("verdict") != "baseline")
    return "\n".join([_table(header, rows), note, *([verdicts] if verdicts else []), *warnings])

