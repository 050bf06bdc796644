"""Orchestration overhead: what a sweep costs beyond its trials' own training loops.

Three measurements, all in one Ray cluster, variants interleaved and repeated:

1. Simulate sweeps of 4 and of 12 ``mlp_regression`` trials (world size 2, a few updates each,
   default resources: 2 trials at a time on 2 cores) through ``scalesweep run``
   (``scalesweep.orchestrator.launch.run.run_sweep``, MLflow on sqlite): sweep wall time against the
   sum of the
   trials' loop times, and the marginal cost of one more trial, (wall(12) - wall(4)) / 8, in
   which Ray, Tune and MLflow start-up cancel. Beside it, the same for a bare Tune function
   trainable that does nothing (same concurrency, actors reused).
2. ddp sweeps of 1 and of 3 ``mlp_regression`` trials at world size P (P gloo workers each):
   sweep wall against summed loop time, per-trial overhead (wall minus loop), and the marginal
   trial, (wall(3) - wall(1)) / 2 minus its loop time.
3. The bare Ray baselines for one ddp trial: a ``TorchTrainer`` with P workers and an empty
   loop (``fit()`` wall), the same inside one Tune trial (our trial driver's pattern, the
   driver holding no CPU), and a bare Tune function trainable.

Anchors: Ray's release tests hold Ray Train within 1.15x of vanilla torch DDP, and Tune with 8
Train trials within 1.35x of one Train run.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import ray.cloudpickle

from benchmarks._common import (
    PHASES,
    Column,
    Report,
    Table,
    median,
    parse_args,
    quiet,
    ratio,
    sandbox,
    say,
    spread,
    sqlite_uri,
    start_ray,
    sweep_run,
    trial_spans,
    write_yaml,
)

NAME = "overhead"
#: the DDP demo model; its loop time is small, so what is measured is mostly orchestration
LRS = [round(0.01 + 0.005 * i, 4) for i in range(12)]

# The bare baselines' functions travel by value: Ray workers import the project, not benchmarks/.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


def sweep_file(
    tmp: Path, backend: str, trials: int, world: int, updates: int, cpus_per_worker: float, tag: str
) -> Path:
    return write_yaml(
        tmp / f"{tag}.yaml",
        {
            "name": f"bench-overhead-{tag}",
            "workload": {"name": "mlp_regression"},
            "reference": {"world_size": world},
            "target": {"metric": "dev_loss", "value": 0.05},
            "backend": backend,
            "optimizer": {"type": "sgd", "lr": 0.05, "momentum": 0.9},
            "training": {"per_worker_batch": 16, "epochs": 100, "max_updates": updates},
            "resources": {"cpus_per_worker": cpus_per_worker},
            "axes": {"world_size": [world], "optimizer.lr": LRS[:trials]},
        },
    )


# -- bare Ray baselines ------------------------------------------------------------------------


def _empty(config: dict[str, Any]) -> None:
    return None


def _plain_ddp_loop(config: dict[str, Any]) -> None:
    """What a Ray Train user writes without scalesweep: the same model, optimizer and number of
    updates as the benchmark's ddp trials, each worker on its own slice of the data, DDP via
    ``prepare_model``, one dev evaluation and one report at the end."""
    import ray.train
    import ray.train.torch
    import torch

    from scalesweep.trainables import workloads

    ctx = ray.train.get_context()
    rank, size = ctx.get_world_rank(), ctx.get_world_size()
    w = workloads.make("mlp_regression", {})
    torch.manual_seed(0)
    model = ray.train.torch.prepare_model(w.build_model())
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    n = w.train_size()
    for u in range(int(config["updates"])):
        start = (u * size + rank) * 16
        batch = w.train_batch([(start + i) % n for i in range(16)])
        opt.zero_grad()
        w.loss(model, batch).mean().backward()
        opt.step()
    dev = 0.0
    if rank == 0:
        with torch.no_grad():
            dev = sum(float(w.evaluate(model, b)["loss"].sum()) for b in w.dev_batches(256)) / w.dev_size()
    ray.train.report({"dev_loss": dev})


def _torch_trainer(
    workers: int, cpus_per_worker: float, storage: str, name: str, updates: int | None = None
) -> Any:
    from ray.train.torch import TorchConfig
    from ray.train.v2.api.config import RunConfig, ScalingConfig
    from ray.train.v2.torch.torch_trainer import TorchTrainer

    return TorchTrainer(
        _empty if updates is None else _plain_ddp_loop,
        train_loop_config=None if updates is None else {"updates": updates},
        scaling_config=ScalingConfig(num_workers=workers, resources_per_worker={"CPU": cpus_per_worker}),
        torch_config=TorchConfig(backend="gloo"),
        run_config=RunConfig(name=name, storage_path=storage),
    )


def _tune_torch_trainer(config: dict[str, Any]) -> None:
    _torch_trainer(
        config["workers"], config["cpus_per_worker"], config["storage"], config["name"], config.get("updates")
    ).fit()


def bare_torch_trainer(workers: int, cpus_per_worker: float, storage: Path, name: str) -> float:
    t0 = time.perf_counter()
    _torch_trainer(workers, cpus_per_worker, str(storage), name).fit()
    return time.perf_counter() - t0


def bare_tune(
    storage: Path, name: str, trials: int = 1, inner: dict[str, Any] | None = None, log: Path | None = None
) -> float:
    """A Tune experiment of ``trials`` function trials; each is empty, or (``inner``) runs a bare
    TorchTrainer while holding no CPU itself, as our ddp trial driver does."""
    from ray import tune

    if inner is None:
        trainable: Any = _empty
        space: dict[str, Any] = {"i": tune.grid_search(list(range(trials)))}
    else:
        from scalesweep.trainables.trial_driver import DRIVER_MEMORY_BYTES

        trainable = tune.with_resources(
            _tune_torch_trainer, tune.PlacementGroupFactory([{"CPU": 0, "memory": DRIVER_MEMORY_BYTES}])
        )
        space = {**inner, "name": tune.grid_search([f"{name}-{i}" for i in range(trials)])}
    tuner = tune.Tuner(
        trainable,
        param_space=space,
        tune_config=tune.TuneConfig(
            reuse_actors=True, max_concurrent_trials=os.cpu_count() if inner is None else 1
        ),
        run_config=tune.RunConfig(name=name, storage_path=str(storage), verbose=0),
    )
    with quiet(log) if log else contextlib.nullcontext():
        t0 = time.perf_counter()
        tuner.fit()
        return time.perf_counter() - t0


# -- the benchmark ---------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(__doc__, argv)
    quick = args.quick
    cores = os.cpu_count() or 1
    repeats = args.repeats or (1 if quick else 3)
    # quick: the fewest that fill every table (two simulate sizes for the marginal trial)
    small, large = (1, 2) if quick else (4, 12)
    updates = 2 if quick else 20
    workers = 1 if quick else 4
    ddp_sizes = (1,) if quick else (1, 3)
    cpw = cores / workers
    report = Report(
        NAME,
        quick,
        settings={
            "repeats": repeats,
            "simulate_sweep_sizes": [small, large],
            "updates_per_trial": updates,
            "ddp_workers": workers,
            "ddp_cpus_per_worker": cpw,
            "ddp_sweep_sizes": list(ddp_sizes),
        },
    )
    sim: list[dict[str, Any]] = []
    ddp: list[dict[str, Any]] = []
    bare: list[dict[str, Any]] = []
    with sandbox(NAME) as tmp:
        uri = sqlite_uri(tmp / "mlflow.db")
        log = tmp / "sweeps.log"
        start_ray()
        try:
            # warm-up, not measured: first imports, MLflow's schema creation, Tune's first experiment
            if not quick:
                say(f"{NAME}: warm-up sweep")
                sweep_run(sweep_file(tmp, "simulate", 1, 2, 2, 1.0, "warmup"), [], uri, log)
                bare_tune(tmp / "bare", "warmup", log=log)
            for rep in range(repeats):
                for n in (small, large):
                    say(f"{NAME}: repeat {rep + 1}/{repeats}: simulate sweep of {n}, bare Tune of {n}")
                    wall, outcome, phases = sweep_run(
                        sweep_file(tmp, "simulate", n, 2, updates, 1.0, f"sim{n}-r{rep}"), [], uri, log
                    )
                    loop = sum(t["train_seconds"] for t in outcome.trials)
                    sim.append({"rep": rep, "n": n, "wall": wall, "loop": loop, **phases})
                    bare.append(
                        {
                            "rep": rep,
                            "kind": f"tune{n}",
                            "wall": bare_tune(tmp / "bare", f"tune{n}-r{rep}", n, log=log),
                        }
                    )
                say(f"{NAME}: repeat {rep + 1}/{repeats}: bare TorchTrainer, Tune+TorchTrainer, Tune, ddp")
                with quiet(log):
                    tt = bare_torch_trainer(workers, cpw, tmp / "bare", f"tt-r{rep}")
                bare.append({"rep": rep, "kind": "tt", "wall": tt})
                inner = {"workers": workers, "cpus_per_worker": cpw, "storage": str(tmp / "bare")}
                # quick: not the empty TorchTrainer in a Tune trial: the same path as the one
                # with a loop below, and as the bare TorchTrainer above (one Ray Train run less)
                if not quick:
                    bare.append(
                        {
                            "rep": rep,
                            "kind": "tune_tt",
                            "wall": bare_tune(tmp / "bare", f"tunett-r{rep}", 1, inner, log=log),
                        }
                    )
                bare.append(
                    {
                        "rep": rep,
                        "kind": "tune_tt_loop",
                        "wall": bare_tune(
                            tmp / "bare", f"tunettloop-r{rep}", 1, {**inner, "updates": updates}, log=log
                        ),
                    }
                )
                if small != 1:  # (quick: the simulate pair's bare Tune of 1 is this experiment)
                    wall = bare_tune(tmp / "bare", f"tune1-r{rep}", log=log)
                    bare.append({"rep": rep, "kind": "tune1", "wall": wall})
                for n in ddp_sizes:
                    wall, outcome, phases = sweep_run(
                        sweep_file(tmp, "ddp", n, workers, updates, cpw, f"ddp{n}-r{rep}"), [], uri, log
                    )
                    spans = trial_spans(uri, outcome)
                    loops = [t["train_seconds"] for t in outcome.trials]
                    ddp.append(
                        {
                            "rep": rep,
                            "n": n,
                            "wall": wall,
                            "loop": sum(loops),
                            **phases,
                            "span_minus_loop": median(
                                [spans[t["name"]] - t["train_seconds"] for t in outcome.trials]
                            ),
                        }
                    )
                    say(f"  ddp sweep of {n}: {wall:.1f} s, loops {sum(loops):.2f} s")
        finally:
            ray.shutdown()

    def med(rows: list[dict[str, Any]], key: str, **match: Any) -> float:
        return median([r[key] for r in rows if all(r[k] == v for k, v in match.items())])

    def per_rep(fn: Any) -> list[float]:
        return [fn(r) for r in range(repeats)]

    def one(rows: list[dict[str, Any]], rep: int, **match: Any) -> dict[str, Any]:
        return next(r for r in rows if r["rep"] == rep and all(r[k] == v for k, v in match.items()))

    def sweep_row(what: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
        """A sweep's wall against its trials' loops, medians over the repeats in ``rows``."""
        return {
            "what": what,
            "wall": median([r["wall"] for r in rows]),
            "loop": median([r["loop"] for r in rows]),
            "over": median([r["wall"] - r["loop"] for r in rows]),
            "x": median([ratio(r["wall"], r["loop"]) for r in rows]),
            "range": spread([r["wall"] for r in rows]),
        }

    # 1. simulate sweeps
    t1 = Table(
        f"Simulate sweeps of mlp_regression (V=2, {updates} updates a trial, 2 at a time), "
        f"median of {repeats}",
        [
            Column("what", "sweep", "text"),
            Column("wall", "sweep wall s"),
            Column("loop", "sum of trial loops s"),
            Column("over", "wall - loops s", "number"),
            Column("x", "wall / loops"),
            Column("range", "wall range", "text"),
        ],
    )
    for n in (small, large):
        t1.rows.append(sweep_row(f"scalesweep, {n} trials", [r for r in sim if r["n"] == n]))
    for n in (small, large):
        t1.rows.append(
            {
                "what": f"bare Tune, {n} empty trials",
                "wall": med(bare, "wall", kind=f"tune{n}"),
                "range": spread([r["wall"] for r in bare if r["kind"] == f"tune{n}"]),
            }
        )
    k = large - small
    marginal = median(per_rep(lambda r: (one(sim, r, n=large)["wall"] - one(sim, r, n=small)["wall"]) / k))
    marginal_loop = median(
        per_rep(lambda r: (one(sim, r, n=large)["loop"] - one(sim, r, n=small)["loop"]) / k)
    )
    marginal_bare = median(
        per_rep(
            lambda r: (
                (one(bare, r, kind=f"tune{large}")["wall"] - one(bare, r, kind=f"tune{small}")["wall"]) / k
            )
        )
    )
    t1m = Table(
        f"Marginal cost of one more simulate trial: (wall({large}) - wall({small})) / {k}, "
        f"per repeat, median",
        [Column("what", "", "text"), Column("s", "s per added trial", "number")],
    )
    t1m.rows += [
        {"what": "scalesweep sweep wall", "s": marginal},
        {"what": "  of which the trial's own loop (sum, 2 run at a time)", "s": marginal_loop},
        {"what": "bare Tune, empty trials", "s": marginal_bare},
    ]
    report.target("marginal wall per added simulate trial, s", marginal, "<=", 1.0)

    # 2./3. ddp against the bare baselines
    t2 = Table(
        f"One ddp trial (P={workers} gloo workers, {cpw:g} CPU each) against bare Ray, median of {repeats}",
        [
            Column("what", "", "text"),
            Column("wall", "wall s"),
            Column("loop", "loop s", "number"),
            Column("over", "overhead s (wall - loop)"),
            Column("vs_tt", "overhead / bare TorchTrainer"),
            Column("range", "wall range", "text"),
        ],
    )
    tt = med(bare, "wall", kind="tt")
    for kind, label in (
        ("tune1", "bare Tune function trainable (empty)"),
        ("tt", f"bare TorchTrainer, {workers} workers, empty loop"),
        *([] if quick else [("tune_tt", "bare Tune trial running that TorchTrainer")]),
        ("tune_tt_loop", f"bare Tune trial running a TorchTrainer with a plain DDP loop ({updates} updates)"),
    ):
        w = med(bare, "wall", kind=kind)
        t2.rows.append(
            {
                "what": label,
                "wall": w,
                "loop": 0.0,
                "over": w,
                "vs_tt": ratio(w, tt),
                "range": spread([r["wall"] for r in bare if r["kind"] == kind]),
            }
        )
    d1 = [r for r in ddp if r["n"] == 1]
    over1 = median([r["wall"] - r["loop"] for r in d1])
    t2.rows.append(
        {
            "what": "scalesweep sweep of 1 ddp trial (plan, MLflow, Tune, Train, summary)",
            "wall": med(ddp, "wall", n=1),
            "loop": med(ddp, "loop", n=1),
            "over": over1,
            "vs_tt": median(
                [ratio(r["wall"] - r["loop"], one(bare, r["rep"], kind="tt")["wall"]) for r in d1]
            ),
            "range": spread([r["wall"] for r in d1]),
        }
    )
    span = median([r["span_minus_loop"] for r in d1])
    t2.rows.append(
        {
            "what": "  its trial alone (MLflow child run open - loop)",
            "wall": span + med(ddp, "loop", n=1),
            "loop": med(ddp, "loop", n=1),
            "over": span,
            "vs_tt": median(
                [ratio(r["span_minus_loop"], one(bare, r["rep"], kind="tt")["wall"]) for r in d1]
            ),
        }
    )
    targets = [("ddp trial alone: overhead / bare TorchTrainer", t2.rows[-1]["vs_tt"])]
    if len(ddp_sizes) > 1:
        n2 = ddp_sizes[-1]

        def marginal_ddp(rep: int) -> float:
            a, b = one(ddp, rep, n=1), one(ddp, rep, n=n2)
            return ((b["wall"] - a["wall"]) - (b["loop"] - a["loop"])) / (n2 - 1)

        m = median(per_rep(marginal_ddp))
        t2.rows.append(
            {
                "what": f"scalesweep marginal ddp trial, ((wall({n2}) - wall(1)) - loops) / {n2 - 1}",
                "over": m,
                "vs_tt": median(per_rep(lambda r: ratio(marginal_ddp(r), one(bare, r, kind="tt")["wall"]))),
            }
        )
        dn = [r for r in ddp if r["n"] == n2]
        t1.rows.append(sweep_row(f"scalesweep ddp, {n2} trials (P={workers})", dn))
        targets.append(("marginal ddp trial in a sweep: overhead / bare TorchTrainer", t2.rows[-1]["vs_tt"]))
    t1.rows.append(sweep_row(f"scalesweep ddp, 1 trial (P={workers})", d1))
    for what, value in targets:
        report.target(what, value, "<=", 1.1)
    # Like for like: the empty-loop baseline builds no model and no optimizer, and torch's first
    # optimizer alone imports torch._dynamo (about 1 CPU second per worker); so also compare
    # with the same work written as plain Ray Train (loops included on both sides: ~0.4 s).
    t2b = Table(
        f"Like for like: our ddp trial against the same {updates} updates as plain Ray Train "
        f"(Tune trial + TorchTrainer + plain DDP loop), whole trials, median of {repeats}",
        [Column("what", "", "text"), Column("x", "ours / plain Ray Train")],
    )
    t2b.rows.append({
        "what": "our trial alone (MLflow child run open to close)",
        "x": median([ratio(r["span_minus_loop"] + r["loop"], one(bare, r["rep"], kind="tune_tt_loop")["wall"])
                     for r in d1]),
    })  # fmt: skip
    if len(ddp_sizes) > 1:
        t2b.rows.append({
            "what": f"our marginal trial, (wall({n2}) - wall(1)) / {n2 - 1}",
            "x": median(per_rep(lambda r: ratio(
                (one(ddp, r, n=n2)["wall"] - one(ddp, r, n=1)["wall"]) / (n2 - 1),
                one(bare, r, kind="tune_tt_loop")["wall"]))),
        })  # fmt: skip
    t3 = Table(
        f"Where a sweep's wall time goes (s, median of {repeats}; from wrappers around the runner's steps)",
        [
            Column("what", "sweep", "text"),
            *[Column(p, p.replace("_", " "), "number") for p in PHASES],
            Column("other", "other", "number"),
            Column("wall", "wall"),
        ],
    )
    for label, rows in [
        (f"simulate, {n} trials", [r for r in sim if r["n"] == n]) for n in (small, large)
    ] + [(f"ddp, {n} trial(s)", [r for r in ddp if r["n"] == n]) for n in ddp_sizes]:
        t3.rows.append(
            {
                "what": label,
                **{p: median([r[p] for r in rows]) for p in PHASES},
                "other": median([r["wall"] - sum(r[p] for p in PHASES) for r in rows]),
                "wall": median([r["wall"] for r in rows]),
            }
        )
    report.tables += [t1, t1m, t2, t2b, t3]
    report.raw = {"simulate": sim, "ddp": ddp, "bare": bare}
    report.notes.append(
        "Trials train mlp_regression for a few updates, so 'wall / loops' is nearly all "
        "orchestration; 'wall - loops' is the absolute overhead."
    )
    report.finish(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
