"""The tables `run` prints at the end: one line per trial (fastest to target first), then one
line per arm (its seeds' median and interval, and the comparison with the baseline arm)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from scalesweep.dashboards.arm_text import conditioning_text, interval_text, levels_text, median_text
from scalesweep.science.stats.arms import (
    ArmSummary,
    ratios,
)
from scalesweep.science.stats.decisions import band
from scalesweep.science.stats.replicates import METHOD, PAIRED_METHOD
from scalesweep.science.stats.trial_summary import TrialSummary

HEADER = ("trial", "status", "epochs→target", "updates→target", "speedup", "best dev_loss", "train s")
FIRST_EVAL_ADVICE = ("evaluate more often (training.eval_every_epochs) or set a harder target: "
                     "a crossing before the first evaluation is a bound, not a measurement")


def _cell(value: object) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.4g}" if math.isfinite(value) else str(value)
    return str(value)


def _crossing_cell(s: TrialSummary, value: float | None, hi: float | None) -> str:
    """epochs/updates to target as the evals allow: a value, "≤ x" at the first eval, "never"."""
    if s.crossing == "at_first_eval":
        return f"≤ {_cell(hi)}"
    if s.crossing == "never":
        return "never"
    return _cell(value)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)


def _fastest_first(s: TrialSummary) -> tuple[int, float]:
    e = s.epochs_to_target
    if e is None and s.crossing == "at_first_eval":
        e = s.epochs_to_target_hi
    return (0, float(e)) if e is not None else (1, 0.0)


def _row(s: TrialSummary, status: str) -> list[str]:
    return [s.name, status, _crossing_cell(s, s.epochs_to_target, s.epochs_to_target_hi),
            _crossing_cell(s, s.updates_to_target, s.updates_to_target_hi),
            _cell(s.speedup_vs_baseline), _cell(s.best_dev_loss), _cell(s.train_seconds)]


def format_summary(trials: Sequence[TrialSummary], statuses: Mapping[str, str]) -> str:
    """One line per trial, fastest to target first (a bound at the first eval by its bound,
    never reached last); ``statuses``: trial name -> its final status."""
    text = _table(HEADER, [_row(s, statuses[s.name]) for s in sorted(trials, key=_fastest_first)])
    first = [s.name for s in trials if s.crossing == "at_first_eval"]
    if first:
        text += (f"\n{len(first)} trial(s) reached the target at their first evaluation "
                 f"({', '.join(first)}): {FIRST_EVAL_ADVICE}")
    return text


def format_arms(arms: Sequence[ArmSummary]) -> str:
    """Per arm: seeds reached / run, median epochs to target [interval], the epochs ratio to the
    baseline arm (paired by seed) [interval], the decision at the target and the levels at
    which it is decided; then each arm's verdict in words."""
    if not arms:
        return ""
    coverage = next((c for a in arms if (c := a.medians["epochs"].coverage)), None)
    # the per-look confidence is the comparisons' (the baseline arm has none of its own)
    per_look = next((a.confidence for a in arms if a.epochs_ratio is not None), arms[0].confidence)
    header = ["arm", "reached", "epochs→target (median)", "interval", "epochs ratio vs baseline",
              "interval", "decision", "decided at levels"]
    rows = [[a.arm, f"{a.n_reached}/{a.n_seeds}", median_text(a.medians["epochs"]),
             interval_text(a.medians["epochs"]), median_text(ratios(a.epochs_ratio)),
             interval_text(ratios(a.epochs_ratio)), a.answer, levels_text(a)]
            for a in arms]
    margin = arms[0].margin
    note = (f"intervals: {METHOD}; ratios: {PAIRED_METHOD}; coverage {coverage:.4g} at these seeds, "
            f"read at {per_look:.4g} for the design's 90 % (docs/design.md §4)" if coverage else
            "intervals: n/a with one seed per arm")
    note += ("; equivalent = the ratio's interval inside [{:.3g}, {:.3g}] ".format(*band(margin))
             + f"(target.equivalence_margin {margin:g}); levels: targets best × (1 + level), the "
             "headline's level at the headline's decision, the others one family (a fixed sequence "
             "from the loosest)")
    warnings = [w for a in arms if (w := conditioning_text(a))]
    warnings += [note for a in arms if a.is_baseline for note in a.notes]
    verdicts = "\n".join(f"  {a.arm}: {a.verdict()}" for a in arms if not a.is_baseline)
    return "\n".join([_table(header, rows), note, *([verdicts] if verdicts else []), *warnings])
