"""`predict` backtested on data no one here made: MLPerf Training's reference convergence points.

Each MLPerf benchmark's RCP file gives, per global batch size, the epochs (or samples) to
converge of several reference runs, with hyperparameters tuned at that batch
(benchmarks/data/mlperf_rcps/, the newest version of each benchmark; SOURCE.md says from where).
Batch sizes are held out and predicted by :func:`scalesweep.science.stats.predict.predict`
(90 % interval, the bare method: ``extrapolation_factor=1``); a hit is the held-out runs'
median inside the interval. Four ways, each its own row, since a user's case is one of them:

* **interpolation**: every interior batch held out, predicted from all the others;
* **extrapolation up, 2 nearest below**: every batch from the two next smaller ones (a user with
  4- and 8-worker runs asking about 16);
* **extrapolation up, all below**: every batch from all the smaller ones;
* **extrapolation down, 2 nearest above**: every batch from the two next larger ones.

An extrapolation that `predict` refuses (more than ``MAX_FACTOR`` outside) is counted apart.
Where the extrapolation rows cover less than ``WIDEN_BELOW``, their interval is widened: the
half-width (log scale) times a factor, the smallest one at which the pooled extrapolations
cover the nominal 90 %. It is fitted **leave-one-benchmark-out**: the factor applied to
benchmark b is fitted on the other benchmarks' extrapolations only, so the coverage reported
with it is out of sample. The same fit on every benchmark is the factor `predict` ships
(``EXTRAPOLATION_FACTOR``). Beside the interpolation, MLPerf's own way to fill a batch size it
has no reference for: a straight line, in the raw batch, between the two neighbouring batch
sizes (mlperf_logging/rcp_checker), here between their medians. That gives a point, no interval.

Pure arithmetic on shipped files: seconds, the same figures on every machine.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks._common import ROOT, Column, Report, Table, parse_args

NAME = "predict_backtest"
DATA = ROOT / "benchmarks" / "data" / "mlperf_rcps"
CONFIDENCE = 0.90
#: extrapolation rows covering less than this get the calibrated widening (90 % nominal, less
#: about half the binomial standard error of some 60 held-out batches)
WIDEN_BELOW = 0.88
INTERIOR, UP_2, UP_ALL, DOWN_2 = "interior", "up_2_below", "up_all_below", "down_2_above"
KINDS = {
    INTERIOR: "interpolation: interior batch held out, predicted from all the others",
    UP_2: "extrapolation up, from the 2 nearest batches below",
    UP_ALL: "extrapolation up, from all the batches below",
    DOWN_2: "extrapolation down, from the 2 nearest batches above",
}
EXTRAPOLATION = (UP_2, UP_ALL, DOWN_2)


def load_rcps(path: Path) -> dict[int, list[float]]:
    """Batch size -> every reference run's convergence value (epochs, or samples: the key's
    name varies between files, its unit between benchmarks; one benchmark keeps one unit)."""
    out: dict[int, list[float]] = {}
    for entry in json.loads(path.read_text()).values():
        values = next(v for k, v in entry.items() if "converge" in k.lower())
        out.setdefault(int(entry["BS"]), []).extend(float(v) for v in values)
    return dict(sorted(out.items()))


@dataclass(frozen=True)
class HeldOut:
    kind: str  # a key of KINDS
    benchmark: str
    batch: int
    used: tuple[int, ...]  # the batches it was predicted from
    observed: float  # the held-out runs' median
    predicted: float
    ci: tuple[float, float]
    neighbours: float | None  # MLPerf's line between the neighbouring medians (interior only)

    @property
    def hit(self) -> bool:
        return self.ci[0] <= self.observed <= self.ci[1]

    @property
    def error(self) -> float:
        return self.predicted / self.observed - 1.0

    @property
    def neighbours_error(self) -> float | None:
        return None if self.neighbours is None else self.neighbours / self.observed - 1.0

    @property
    def half_width(self) -> float:
        """The interval's half-width, log scale (symmetric about the point: no noise scale)."""
        return math.log(self.ci[1] / self.predicted)

    @property
    def needs(self) -> float:
        """The factor on the half-width at which the interval would just hold the observed."""
        miss = abs(math.log(self.observed / self.predicted))
        if miss == 0.0:
            return 0.0
        return miss / self.half_width if self.half_width > 0 else math.inf

    def widened(self, factor: float) -> tuple[float, float]:
        h = self.half_width * factor
        return self.predicted * math.exp(-h), self.predicted * math.exp(h)

    def hit_widened(self, factor: float) -> bool:
        return self.needs <= factor


@dataclass(frozen=True)
class Refused:
    kind: str
    benchmark: str
    batch: int
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class Backtest:
    rows: list[HeldOut]
    refused: list[Refused]

    def of(self, kind: str) -> list[HeldOut]:
        return [r for r in self.rows if r.kind == kind]


def cases(batches: Sequence[int]) -> Iterator[tuple[str, int, tuple[int, ...]]]:
    """(kind, held-out batch, the batches it is predicted from), for every kind."""
    n = len(batches)
    for i in range(1, n - 1):
        yield INTERIOR, batches[i], tuple(b for b in batches if b != batches[i])
    for i in range(2, n):
        yield UP_2, batches[i], tuple(batches[i - 2:i])
        yield UP_ALL, batches[i], tuple(batches[:i])
    for i in range(n - 2):
        yield DOWN_2, batches[i], tuple(batches[i + 1:i + 3])


def backtest(data_dir: Path = DATA, draws: int = 500) -> Backtest:
    from scalesweep.science.stats.predict import BatchPoint, PredictionRefused, predict

    rows, refused = [], []
    for path in sorted(data_dir.glob("*/rcps_*.json")):
        name = path.stem.removeprefix("rcps_")
        runs = load_rcps(path)
        batches = list(runs)
        for kind, held, used in cases(batches):
            points = [BatchPoint(b, tuple(runs[b])) for b in used]
            try:  # the bare method: the widening is what this calibrates
                p = predict(points, held, confidence=CONFIDENCE, draws=draws, extrapolation_factor=1.0)
            except PredictionRefused as e:
                refused.append(Refused(kind, name, held, tuple(e.reasons)))
                continue
            line = None
            if kind == INTERIOR:
                i = batches.index(held)
                below, above = batches[i - 1], batches[i + 1]
                m_lo, m_hi = statistics.median(runs[below]), statistics.median(runs[above])
                line = m_lo + (m_hi - m_lo) * (held - below) / (above - below)
            rows.append(HeldOut(kind, name, held, used, statistics.median(runs[held]), p.median,
                                p.ci, line))
    return Backtest(rows, refused)


def fit_factor(needs: Sequence[float], confidence: float = CONFIDENCE) -> float:
    """The smallest factor (at least 1: never narrower) on the half-width at which a share
    ``confidence`` of these held-out batches is covered."""
    if not needs:
        raise ValueError("needs must hold one or more held-out batches, but is empty")
    ranked = sorted(needs)
    return max(1.0, ranked[math.ceil(confidence * len(ranked)) - 1])


def lobo_factors(rows: Sequence[HeldOut], confidence: float = CONFIDENCE) -> dict[str, float]:
    """Benchmark -> the factor fitted on the other benchmarks' extrapolations only."""
    ext = [r for r in rows if r.kind in EXTRAPOLATION]
    return {b: fit_factor([r.needs for r in ext if r.benchmark != b], confidence)
            for b in sorted({r.benchmark for r in rows})}


def full_factor(rows: Sequence[HeldOut], confidence: float = CONFIDENCE) -> float:
    """The factor fitted on every benchmark's extrapolations: what `predict` ships."""
    return fit_factor([r.needs for r in rows if r.kind in EXTRAPOLATION], confidence)


def needs_widening(bt: Backtest) -> bool:
    """Whether the extrapolation rows, pooled, cover less than ``WIDEN_BELOW``."""
    ext = [r for r in bt.rows if r.kind in EXTRAPOLATION]
    return sum(r.hit for r in ext) / len(ext) < WIDEN_BELOW


def summary(rows: list[HeldOut]) -> dict[str, float]:
    """Interpolation's figures (the interior rows), with MLPerf's neighbour line beside them."""
    rows = [r for r in rows if r.kind == INTERIOR]
    errs = [abs(r.error) for r in rows]
    near = [abs(e) for r in rows if (e := r.neighbours_error) is not None]
    return {"n": len(rows), "hit_rate": sum(r.hit for r in rows) / len(rows),
            "median_abs_error": statistics.median(errs), "max_abs_error": max(errs),
            "neighbours_median_abs_error": statistics.median(near),
            "neighbours_max_abs_error": max(near),
            "median_half_width": statistics.median(math.exp(r.half_width) - 1 for r in rows)}


def calibration(bt: Backtest) -> dict[str, dict[str, Any]]:
    """Per kind: hits/total (and refused) of the bare interval; for the extrapolation kinds,
    where widened, the same with each benchmark's leave-one-benchmark-out factor."""
    widen = needs_widening(bt)
    factors = lobo_factors(bt.rows) if widen else {}
    out: dict[str, dict[str, Any]] = {}
    for kind in KINDS:
        rows = bt.of(kind)
        hits = sum(r.hit for r in rows)
        row: dict[str, Any] = {
            "hits": hits, "total": len(rows), "coverage": hits / len(rows),
            "refused": sum(x.kind == kind for x in bt.refused),
            "median_abs_error": statistics.median(abs(r.error) for r in rows),
            "median_half_width": statistics.median(math.exp(r.half_width) - 1 for r in rows),
            "widened": False, "hits_widened": None, "coverage_widened": None,
            "factor_min": None, "factor_max": None, "median_half_width_widened": None,
        }  # fmt: skip
        if widen and kind in EXTRAPOLATION:
            used = [factors[r.benchmark] for r in rows]
            hw = sum(r.hit_widened(f) for r, f in zip(rows, used, strict=True))
            row.update(widened=True, hits_widened=hw, coverage_widened=hw / len(rows),
                       factor_min=min(used), factor_max=max(used),
                       median_half_width_widened=statistics.median(
                           math.exp(r.half_width * f) - 1 for r, f in zip(rows, used, strict=True)))
        out[kind] = row
    return out


def _pct(x: float | None) -> str:
    return "" if x is None else f"{x:.1%}"


def main(argv: list[str] | None = None) -> None:
    from scalesweep.science.stats.predict import EXTRAPOLATION_FACTOR, MAX_FACTOR

    args = parse_args(__doc__, argv)
    bt = backtest(draws=50 if args.quick else 500)
    rows = bt.rows
    s = summary(rows)
    cal = calibration(bt)
    factors = lobo_factors(rows)
    shipped_fit = full_factor(rows)
    n_bench = len({r.benchmark for r in rows})
    report = Report(NAME, quick=args.quick, settings={
        "data": str(DATA.relative_to(ROOT)), "confidence": CONFIDENCE, "widen_below": WIDEN_BELOW,
        "extrapolation_factor_shipped": EXTRAPOLATION_FACTOR})
    report.tables.append(Table(
        f"coverage of the {CONFIDENCE:.0%} interval by kind of prediction, {n_bench} MLPerf "
        "benchmarks; widened: the half-width times the factor fitted leave-one-benchmark-out "
        "(out of sample)",
        [Column("kind", "held out", "text"), Column("hits", "hits/total", "text"),
         Column("coverage", "coverage", "number", ".3f"), Column("refused", "refused", "number", "d"),
         Column("half", "median half-width", "text"), Column("err", "median abs error", "text"),
         Column("hits_w", "widened: hits/total", "text"),
         Column("coverage_w", "widened: coverage (out of sample)", "number", ".3f"),
         Column("factor", "widened: factor (per held-out benchmark)", "text"),
         Column("half_w", "widened: median half-width", "text")],
        [{"kind": KINDS[k], "hits": f"{c['hits']}/{c['total']}", "coverage": c["coverage"],
          "refused": c["refused"], "half": _pct(c["median_half_width"]),
          "err": _pct(c["median_abs_error"]),
          "hits_w": f"{c['hits_widened']}/{c['total']}" if c["widened"] else "",
          "coverage_w": c["coverage_widened"],
          "factor": f"{c['factor_min']:.3g}-{c['factor_max']:.3g}" if c["widened"] else "",
          "half_w": _pct(c["median_half_width_widened"])} for k, c in cal.items()]))
    report.tables.append(Table(
        "interpolation: every interior batch size held out and predicted from the rest",
        [Column("what", "what", "text"), Column("value", "value", "number", ".3g")],
        [{"what": "held-out batch sizes", "value": s["n"]},
         {"what": f"hit rate of the {CONFIDENCE:.0%} interval", "value": s["hit_rate"]},
         {"what": "median half-width of the interval (relative)", "value": s["median_half_width"]},
         {"what": "predict: median abs error of the point", "value": s["median_abs_error"]},
         {"what": "predict: max abs error", "value": s["max_abs_error"]},
         {"what": "MLPerf neighbour line: median abs error", "value": s["neighbours_median_abs_error"]},
         {"what": "MLPerf neighbour line: max abs error", "value": s["neighbours_max_abs_error"]}]))
    report.tables.append(Table(
        "the extrapolation factor fitted without each benchmark (leave-one-benchmark-out), and on all",
        [Column("benchmark", "held-out benchmark", "text"), Column("factor", "factor", "number", ".3f")],
        [*({"benchmark": b, "factor": f} for b, f in factors.items()),
         {"benchmark": f"(none: fitted on all {n_bench}; predict's EXTRAPOLATION_FACTOR = "
                       f"{EXTRAPOLATION_FACTOR:g} is this rounded up)", "factor": shipped_fit}]))
    report.tables.append(Table(
        "per held-out batch (values in the file's unit: epochs or samples)",
        [Column("kind", "kind", "text"), Column("benchmark", "benchmark", "text"),
         Column("batch", "batch", "number", "g"), Column("used", "from", "text"),
         Column("observed", "observed median", "number", ".4g"),
         Column("predicted", "predicted", "number", ".4g"), Column("ci", "interval", "text"),
         Column("hit", "hit", "text"), Column("ci_w", "widened interval", "text"),
         Column("hit_w", "widened hit", "text"), Column("err", "error", "number", "+.3f"),
         Column("nb", "neighbour line error", "number", "+.3f")],
        [{"kind": r.kind, "benchmark": r.benchmark, "batch": r.batch,
          "used": ", ".join(map(str, r.used)) if r.kind != INTERIOR else "all others",
          "observed": r.observed, "predicted": r.predicted,
          "ci": f"[{r.ci[0]:.4g}, {r.ci[1]:.4g}]", "hit": "yes" if r.hit else "no",
          **({"ci_w": "[{:.4g}, {:.4g}]".format(*r.widened(factors[r.benchmark])),
              "hit_w": "yes" if r.hit_widened(factors[r.benchmark]) else "no"}
             if cal[r.kind]["widened"] else {}),
          "err": r.error, "nb": r.neighbours_error} for r in rows]))
    report.target(f"interpolation: hit rate of the {CONFIDENCE:.0%} interval", s["hit_rate"], ">=", 0.85)
    for k in EXTRAPOLATION:
        c = cal[k]
        value = c["coverage_widened"] if c["widened"] else c["coverage"]
        report.target(f"{KINDS[k]}: coverage{' widened, out of sample' if c['widened'] else ''}",
                      value, ">=", WIDEN_BELOW)
    report.target("predict's EXTRAPOLATION_FACTOR less the fit on every benchmark",
                  EXTRAPOLATION_FACTOR - shipped_fit, ">=", 0.0)
    report.notes.append(
        f"refused (more than the predictor's {MAX_FACTOR:g}x outside the batches it is given): "
        + (", ".join(f"{x.kind} {x.benchmark} {x.batch}" for x in bt.refused) or "none"))
    report.raw = {"summary": s, "calibration": cal, "lobo_factors": factors,
                  "full_factor": shipped_fit}
    report.finish(args.out)


if __name__ == "__main__":
    main()
