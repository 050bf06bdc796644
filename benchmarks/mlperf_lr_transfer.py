"""`recommend`'s lr and warmup rules backtested on hyperparameters no one here tuned: MLPerf
Training's reference convergence points (docs/beyond.md, "Recommend").

Each RCP entry is a global batch size with the hyperparameters a submitter tuned there to
converge in the fewest epochs, which is the objective `recommend` predicts for
(benchmarks/data/mlperf_rcps/, one file per benchmark, as `predict_backtest` reads them). So
every benchmark with three or more batch sizes gives cases of `recommend`'s shape: the lr is
known at a reference batch B_ref and at N (a study at N tuned against its reference), and the
lr at a larger M is predicted, then compared with the tuned lr at M. The cases: B_ref and N two
neighbouring batch sizes, M each larger one. Predictions of lr_M / lr_N, each a rule a user
could follow:

* **none**, **sqrt**, **linear**: the named rules, 1, sqrt(M/N) and M/N;
* **power law**: the exponent the two tuned lrs show, carried on: (M/N)^a, a = log(lr_N/lr_ref)
  / log(N/B_ref) (the naive extrapolation);
* **model from the lr** (`recommend`'s main path, :mod:`scalesweep.science.recommend.recipe`):
  the optimizer family's model (the surge for Adam-style optimizers, McCandlish's law for SGD;
  :mod:`scalesweep.science.recommend.lr_models`) solved for b_noise through lr_N / lr_ref at N,
  read at M (an N factor beyond the model's range is carried as the model's end, as
  `recommend` does);
* **model from the epochs** (`recommend` with a noise scale and no lr evidence): the same model
  with b_noise = B_crit of the line E(B) = E_min (1 + B/B_crit) through the median epochs at
  B_ref and N (McCandlish et al. 2018 find B_crit near the noise scale), where the line rises.

The error of a rule is |log(predicted / tuned)|; a √2 grid step (`solve`'s resolution) is
log √2 = 0.347. Every benchmark counts once: a rule's figure is the median over benchmarks of
that benchmark's median error, beside the pooled share of cases within half a grid step and
within one.

Warmup (a second table): held in samples (`recommend`'s default, Goyal et al. 2017) against
held in updates, where a file states its warmup in steps, epochs or samples of a unit that is
plain, and both warmups are above 0.

What this cannot show: the tuned lrs are one submitter's choice at a resolution of their own
(several benchmarks keep one lr over many batch sizes), so the truth is itself noisy; no
interval of `recommend` is tested (no paired arms at N exist here); the optimizer family of a
file without an optimizer key is the reference implementation's, named in ``FAMILIES``.

Pure arithmetic on shipped files: seconds, the same figures on every machine.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks._common import ROOT, Column, Report, Table, parse_args
from benchmarks.predict_backtest import DATA
from scalesweep.science.prediction.epochs import fit_line
from scalesweep.science.recommend.lr_models import LrModel, factor_between, noise_for_factor

NAME = "mlperf_lr_transfer"
#: half a √2 grid step and one, in log lr
HALF_STEP, ONE_STEP = math.log(2.0) / 4.0, math.log(2.0) / 2.0
#: benchmark -> (lr model, the optimizer and where it is stated)
FAMILIES: dict[str, tuple[LrModel, str]] = {
    "bert": ("surge", "LAMB (the file's opt_lamb_* keys): Adam's update, normalised per layer"),
    "deepseekv3_671b": ("surge", "AdamW (the reference implementation)"),
    "dlrm": ("sgd", "SGD (the file's sgd_opt_base_learning_rate)"),
    "dlrm_dcnv2": ("surge", "Adagrad (the file's opt_name): per-coordinate normalised, like RMSprop"),
    "flux1": ("surge", "AdamW (the file's opt_adamw_* keys)"),
    "gpt3": ("surge", "Adam (the reference implementation)"),
    "gpt_oss_20b": ("surge", "AdamW (the reference implementation)"),
    "llama2_70b_lora": ("surge", "AdamW (the reference implementation)"),
    "llama31_405b": ("surge", "AdamW (the reference implementation)"),
    "llama31_8b": ("surge", "AdamW (the reference implementation)"),
    "maskrcnn": ("sgd", "SGD with momentum (the reference implementation)"),
    "qwen35_397b_grpo": ("surge", "AdamW (the reference implementation)"),
    "resnet": ("sgd", "LARS (the file's optimizer key): SGD with momentum, normalised per layer"),
    "retinanet": ("surge", "Adam (mlcommons/training single_stage_detector/ssd/train.py)"),
    "rgat": ("surge", "Adam (the reference implementation)"),
    "rnnt": ("surge", "LAMB (the file's opt_lamb_* keys)"),
    "stable_diffusion": ("surge", "AdamW (the file's opt_adamw_* keys)"),
    "unet3d": ("sgd", "SGD with momentum (the file's opt_momentum)"),
}
RULES = ("none", "sqrt", "linear", "power law", "model from the lr", "model from the epochs")
#: warmup keys -> how a value becomes samples (up to one constant per benchmark): steps x batch,
#: epochs and samples as they are
WARMUP_KEYS = {"opt_learning_rate_warmup_steps": "steps", "opt_learning_rate_warmup_epochs": "epochs",
               "opt_learning_rate_warmup_samples": "samples"}
#: files whose warmup unit does not read as its key says (unet3d's "epochs" of 168000): left out
WARMUP_UNCLEAR = ("unet3d",)


@dataclass(frozen=True)
class Point:
    """One batch size of one benchmark: its tuned lr, warmup in samples (None: none stated, or
    0) and median epochs to converge."""

    batch: int
    lr: float
    warmup_samples: float | None
    epochs: float


def points(path: Path) -> list[Point]:
    """The file's batch sizes, smallest first (the first entry of a batch size repeated)."""
    seen: dict[int, Point] = {}
    for entry in json.loads(path.read_text()).values():
        batch, hp = int(entry["BS"]), entry.get("Hyperparams", {})
        if batch in seen or "opt_base_learning_rate" not in hp:
            continue
        values = next(v for k, v in entry.items() if "converge" in k.lower())
        warm = None
        for key, unit in WARMUP_KEYS.items():
            if key in hp and float(hp[key]) > 0:
                warm = float(hp[key]) * (batch if unit == "steps" else 1)
        seen[batch] = Point(batch, float(hp["opt_base_learning_rate"]), warm,
                            statistics.median(float(v) for v in values))
    return [seen[b] for b in sorted(seen)]


def _model_factor(model: LrModel, m: float, ref: float, x: float) -> float:
    return factor_between(model, m, ref, (x, x))[0]


def predictions(model: LrModel, ref: Point, n: Point, m: Point) -> dict[str, float | None]:
    """Each rule's lr_M / lr_N (None: the rule says nothing here)."""
    k = m.batch / n.batch
    a = math.log(n.lr / ref.lr) / math.log(n.batch / ref.batch)
    x = noise_for_factor(model, n.batch, ref.batch, n.lr / ref.lr)
    from_lr = _model_factor(model, m.batch, ref.batch, x) / (n.lr / ref.lr)
    line = fit_line([ref.batch, n.batch], [ref.epochs, n.epochs])
    from_epochs = None
    if line.slope > 0 and line.e_min > 0:
        b = line.b_crit
        from_epochs = (_model_factor(model, m.batch, ref.batch, b)
                       / _model_factor(model, n.batch, ref.batch, b))
    return {"none": 1.0, "sqrt": math.sqrt(k), "linear": k, "power law": k ** a,
            "model from the lr": from_lr, "model from the epochs": from_epochs}


@dataclass(frozen=True)
class Case:
    benchmark: str
    ref: int
    n: int
    m: int
    tuned: float  # lr_M / lr_N as tuned
    predicted: dict[str, float | None]

    def error(self, rule: str) -> float | None:
        p = self.predicted[rule]
        return None if p is None else abs(math.log(p / self.tuned))


def cases(benchmark: str, pts: Sequence[Point]) -> Iterator[Case]:
    model = FAMILIES[benchmark][0]
    for i in range(len(pts) - 2):
        ref, n = pts[i], pts[i + 1]
        for m in pts[i + 2:]:
            yield Case(benchmark, ref.batch, n.batch, m.batch, m.lr / n.lr, predictions(model, ref, n, m))


def all_cases() -> tuple[list[Case], dict[str, list[Point]]]:
    by_bench = {p.stem.removeprefix("rcps_"): points(p) for p in sorted(DATA.glob("*/rcps_*.json"))}
    out = [c for b, pts in sorted(by_bench.items()) if len(pts) >= 3 for c in cases(b, pts)]
    return out, by_bench


def rule_rows(cs: Sequence[Case]) -> list[dict[str, object]]:
    """Per rule: the median over benchmarks of each benchmark's median error, the shares within
    half a grid step and one, and on how many benchmarks the rule is best (ties count for each)."""
    benches = sorted({c.benchmark for c in cs})
    med: dict[str, dict[str, float]] = {r: {} for r in RULES}
    for b in benches:
        for r in RULES:
            errs = [e for c in cs if c.benchmark == b and (e := c.error(r)) is not None]
            if errs:
                med[r][b] = statistics.median(errs)
    rows: list[dict[str, object]] = []
    for r in RULES:
        errs = [e for c in cs if (e := c.error(r)) is not None]
        best = sum(1 for b in benches if b in med[r]
                   and med[r][b] <= min(med[q][b] for q in RULES if b in med[q]) + 1e-12)
        rows.append({"rule": r, "benchmarks": len(med[r]), "cases": len(errs),
                     "median_error": statistics.median(med[r].values()),
                     "median_factor": math.exp(statistics.median(med[r].values())),
                     "within_half_step": sum(e <= HALF_STEP for e in errs) / len(errs),
                     "within_one_step": sum(e <= ONE_STEP for e in errs) / len(errs),
                     "best_on": best})
    return rows


def bench_rows(cs: Sequence[Case]) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for b in sorted({c.benchmark for c in cs}):
        mine = [c for c in cs if c.benchmark == b]
        row: dict[str, object] = {"benchmark": b, "model": FAMILIES[b][0], "optimizer": FAMILIES[b][1],
                                  "cases": len(mine)}
        for r in RULES:
            errs = [e for c in mine if (e := c.error(r)) is not None]
            row[r] = math.exp(statistics.median(errs)) if errs else None
        rows.append(row)
    return rows


@dataclass(frozen=True)
class WarmupCase:
    benchmark: str
    n: int
    m: int
    tuned: float  # warmup samples at M over N's
    k: float  # M / N

    def error(self, rule: str) -> float:
        """|log error| of holding the warmup in samples (ratio 1) or in updates (ratio k)."""
        return abs(math.log((1.0 if rule == "samples" else self.k) / self.tuned))


def warmup_cases(by_bench: dict[str, list[Point]]) -> list[WarmupCase]:
    out: list[WarmupCase] = []
    for b, pts in sorted(by_bench.items()):
        if b in WARMUP_UNCLEAR:
            continue
        warm = [p for p in pts if p.warmup_samples is not None]
        for i, n in enumerate(warm):
            for m in warm[i + 1:]:
                assert n.warmup_samples is not None and m.warmup_samples is not None
                out.append(WarmupCase(b, n.batch, m.batch, m.warmup_samples / n.warmup_samples,
                                      m.batch / n.batch))
    return out


def warmup_rows(ws: Sequence[WarmupCase]) -> list[dict[str, object]]:
    benches = sorted({w.benchmark for w in ws})
    rows: list[dict[str, object]] = []
    for rule, what in (("samples", "held in samples (recommend's default, Goyal et al.)"),
                       ("updates", "held in updates (the fixed warmup rule)")):
        med = [statistics.median(w.error(rule) for w in ws if w.benchmark == b) for b in benches]
        rows.append({"rule": what, "benchmarks": len(benches), "cases": len(ws),
                     "median_factor": math.exp(statistics.median(med)),
                     "within_half_step": sum(w.error(rule) <= HALF_STEP for w in ws) / len(ws),
                     "closer_on": sum(1 for b in benches if statistics.median(
                         w.error(rule) for w in ws if w.benchmark == b) <= statistics.median(
                         w.error("updates" if rule == "samples" else "samples")
                         for w in ws if w.benchmark == b))})
    return rows


def main(argv: list[str] | None = None) -> None:
    args = parse_args(__doc__, argv)
    cs, by_bench = all_cases()
    ws = warmup_cases(by_bench)
    report = Report(NAME, quick=args.quick, settings={
        "data": str(DATA.relative_to(ROOT)), "half_step": HALF_STEP, "one_step": ONE_STEP})
    rules = rule_rows(cs)
    n_bench = len({c.benchmark for c in cs})
    report.tables.append(Table(
        f"lr at M from the tuned lrs at B_ref and N, {len(cs)} cases over {n_bench} MLPerf "
        "benchmarks: error of lr_M/lr_N against the tuned one (factor: exp of the median over "
        "benchmarks of each benchmark's median |log error|)",
        [Column("rule", "rule", "text"), Column("benchmarks", "benchmarks", "number", "d"),
         Column("cases", "cases", "number", "d"),
         Column("median_factor", "median error (factor)", "number", ".3g"),
         Column("within_half_step", "within half a √2 step", "number", ".2f"),
         Column("within_one_step", "within one √2 step", "number", ".2f"),
         Column("best_on", "best on (benchmarks)", "number", "d")], rules))
    report.tables.append(Table(
        "per benchmark: each rule's median error as a factor (1 = exact)",
        [Column("benchmark", "benchmark", "text"), Column("model", "model", "text"),
         Column("cases", "cases", "number", "d"),
         *[Column(r, r, "number", ".3g") for r in RULES], Column("optimizer", "optimizer", "text")],
        bench_rows(cs)))
    report.tables.append(Table(
        f"warmup at M from N's, {len(ws)} pairs over {len({w.benchmark for w in ws})} benchmarks "
        "(warmups above 0 in a plain unit)",
        [Column("rule", "rule", "text"), Column("benchmarks", "benchmarks", "number", "d"),
         Column("cases", "cases", "number", "d"),
         Column("median_factor", "median error (factor)", "number", ".3g"),
         Column("within_half_step", "within half a √2 step", "number", ".2f"),
         Column("closer_on", "closer on (benchmarks)", "number", "d")], warmup_rows(ws)))
    by = {r["rule"]: r for r in rules}
    named = min(float(str(by[r]["median_error"])) for r in ("none", "sqrt", "linear"))
    report.target("model from the lr: median error less the best named rule's (log)",
                  float(str(by["model from the lr"]["median_error"])) - named, "<=", 0.0)
    report.notes.append("benchmarks with fewer than 3 batch sizes carrying an lr are left out: "
                        + (", ".join(b for b, p in sorted(by_bench.items()) if len(p) < 3) or "none"))
    report.notes.append("the optimizer of each benchmark, and where it is stated, is in the "
                        "per-benchmark table; a file without an optimizer key is taken at its "
                        "reference implementation's")
    report.raw = {"cases": [c.__dict__ for c in cs], "warmup": [w.__dict__ for w in ws]}
    report.finish(args.out)


if __name__ == "__main__":
    main()
