"""`predict` backtested on data no one here made: MLPerf Training's reference convergence points.

Each MLPerf benchmark's RCP file gives, per global batch size, the epochs (or samples) to
converge of several reference runs, with hyperparameters tuned at that batch
(benchmarks/data/mlperf_rcps/, the newest version of each benchmark; SOURCE.md says from where).
For every interior batch size of every benchmark, the batch is held out and predicted from the
others by :func:`scalesweep.science.stats.predict.predict` (90 % interval); a hit is the
held-out runs' median inside the interval. Beside it, MLPerf's own way to fill a batch size it
has no reference for: a straight line, in the raw batch, between the two neighbouring batch
sizes (mlperf_logging/rcp_checker), here between their medians. That gives a point, no interval.

Pure arithmetic on shipped files: seconds, the same figures on every machine.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path

from benchmarks._common import ROOT, Column, Report, Table, parse_args

NAME = "predict_backtest"
DATA = ROOT / "benchmarks" / "data" / "mlperf_rcps"
CONFIDENCE = 0.90


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
    benchmark: str
    batch: int
    observed: float  # the held-out runs' median
    predicted: float
    ci: tuple[float, float]
    neighbours: float  # MLPerf's line between the neighbouring batch sizes' medians

    @property
    def hit(self) -> bool:
        return self.ci[0] <= self.observed <= self.ci[1]

    @property
    def error(self) -> float:
        return self.predicted / self.observed - 1.0

    @property
    def neighbours_error(self) -> float:
        return self.neighbours / self.observed - 1.0


def backtest(data_dir: Path = DATA, draws: int = 500) -> list[HeldOut]:
    from scalesweep.science.stats.predict import BatchPoint, predict

    out = []
    for path in sorted(data_dir.glob("*/rcps_*.json")):
        name = path.stem.removeprefix("rcps_")
        runs = load_rcps(path)
        batches = list(runs)
        for i in range(1, len(batches) - 1):
            held = batches[i]
            others = [BatchPoint(b, tuple(runs[b])) for b in batches if b != held]
            p = predict(others, held, confidence=CONFIDENCE, draws=draws)
            below, above = batches[i - 1], batches[i + 1]
            m_lo, m_hi = statistics.median(runs[below]), statistics.median(runs[above])
            line = m_lo + (m_hi - m_lo) * (held - below) / (above - below)
            out.append(HeldOut(name, held, statistics.median(runs[held]), p.median, p.ci, line))
    return out


def summary(rows: list[HeldOut]) -> dict[str, float]:
    errs = [abs(r.error) for r in rows]
    near = [abs(r.neighbours_error) for r in rows]
    return {"n": len(rows), "hit_rate": sum(r.hit for r in rows) / len(rows),
            "median_abs_error": statistics.median(errs), "max_abs_error": max(errs),
            "neighbours_median_abs_error": statistics.median(near),
            "neighbours_max_abs_error": max(near),
            "median_half_width": statistics.median((r.ci[1] / r.ci[0]) ** 0.5 - 1 for r in rows)}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(__doc__, argv)
    rows = backtest(draws=200 if args.quick else 500)
    s = summary(rows)
    report = Report(NAME, quick=args.quick, settings={"data": str(DATA.relative_to(ROOT)),
                                                       "confidence": CONFIDENCE})
    report.tables.append(Table(
        f"every interior batch size of {len({r.benchmark for r in rows})} MLPerf benchmarks held "
        "out and predicted from the rest",
        [Column("what", "what", "text"), Column("value", "value", "number", ".3g")],
        [{"what": "held-out batch sizes", "value": s["n"]},
         {"what": f"hit rate of the {CONFIDENCE:.0%} interval", "value": s["hit_rate"]},
         {"what": "median half-width of the interval (relative)", "value": s["median_half_width"]},
         {"what": "predict: median abs error of the point", "value": s["median_abs_error"]},
         {"what": "predict: max abs error", "value": s["max_abs_error"]},
         {"what": "MLPerf neighbour line: median abs error", "value": s["neighbours_median_abs_error"]},
         {"what": "MLPerf neighbour line: max abs error", "value": s["neighbours_max_abs_error"]}]))
    report.tables.append(Table(
        "per held-out batch (values in the file's unit: epochs or samples)",
        [Column("benchmark", "benchmark", "text"), Column("batch", "batch", "number", "g"),
         Column("observed", "observed median", "number", ".4g"),
         Column("predicted", "predicted", "number", ".4g"), Column("ci", "interval", "text"),
         Column("hit", "hit", "text"), Column("err", "error", "number", "+.3f"),
         Column("nb", "neighbour line error", "number", "+.3f")],
        [{"benchmark": r.benchmark, "batch": r.batch, "observed": r.observed, "predicted": r.predicted,
          "ci": f"[{r.ci[0]:.4g}, {r.ci[1]:.4g}]", "hit": "yes" if r.hit else "no",
          "err": r.error, "nb": r.neighbours_error} for r in rows]))
    report.target(f"hit rate of the {CONFIDENCE:.0%} interval", s["hit_rate"], ">=", 0.85)
    report.raw = {"summary": s}
    report.finish(args.out)


if __name__ == "__main__":
    main()
