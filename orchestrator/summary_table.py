"""The table `run` prints at the end: one line per trial, fastest to target first."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

COLUMNS = (("trial", "name"), ("status", "status"), ("epochs→target", "epochs_to_target"),
           ("updates→target", "updates_to_target"), ("speedup", "speedup_vs_baseline"),
           ("best dev_loss", "best_dev_loss"), ("train s", "train_seconds"))


def _cell(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.4g}" if math.isfinite(value) else str(value)
    return str(value)


def format_summary(trials: Sequence[dict[str, Any]]) -> str:
    def key(t: dict[str, Any]) -> tuple[int, float]:
        e = t.get("epochs_to_target")
        return (0, float(e)) if e is not None else (1, 0.0)

    rows = [[_cell(t.get(k)) for _, k in COLUMNS] for t in sorted(trials, key=key)]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, (h, _) in enumerate(COLUMNS)]
    lines = ["  ".join(h.ljust(w) for (h, _), w in zip(COLUMNS, widths, strict=True))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)
