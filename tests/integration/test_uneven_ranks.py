"""Any number of physical workers P for a world size V: a worker plays V // P virtual ranks or
one more (the first V mod P workers), and the updates are those of ``simulate``.

* The assignment (scalesweep.trainables.sharding.virtual_ranks) by hand, and its invariants.
* The weighting, without any process group: each worker's accumulated ("local") gradient is
  computed by the loop's own passes in a world of rank p of P, where nothing is reduced. It
  must be (P / V) * the sum of its virtual ranks' mean gradients g_v (g_v read off a P = V
  world, where each worker plays one rank and local_v = g_v), and the mean over the P workers,
  which DDP's all-reduce takes, must be simulate's gradient; the noise-scale probe's sums too.
* Real DDP without Ray: P = 3 processes in a gloo group over 127.0.0.1 (file:// rendezvous,
  so no port can be taken) train V = 4, 5 and 7 (2-1-1, 2-2-1, 3-2-2 ranks), fused and not,
  and resume a simulate checkpoint; simulate resumes theirs. float64, to 1e-9 relative.
* slow, real Ray Train workers: V = 6 on P = 4 (2-2-1-1 ranks; fuse off, and accum 2 with
  fused passes) and a batch ramp V = 4 -> 8: losses, noise scale and the final parameters equal
  simulate's to 1e-9 relative. The workers train them in the Ray Train run of 4 workers that
  this session's DDP tests share (tests/support/ddp_groups.py); an odd P is the gloo group's
  above (the same loop, without Ray).

Why 1e-9: as in tests/integration/test_equivalence_ddp.py, the backends differ only in the order in which
float gradients are summed (simulate adds V*A micro-batch gradients into one ``.grad``; a
worker adds its own, gloo sums the P partial sums, DDP divides by P), ~1e-16 per update in
float64; a wrong weight (a worker's share counted as V/P ranks, or divided by v_p) moves the
losses by percents.
"""

from __future__ import annotations

import contextlib
import json
import math
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from scalesweep.trainables import loop
from scalesweep.trainables.config import RampStage, TrialConfig
from scalesweep.trainables.precision import PARAM_DTYPES
from scalesweep.trainables.sharding import virtual_rank_counts, virtual_ranks
from scalesweep.trainables.world import LocalWorld
from tests.support import ddp_groups, gloo_group

RTOL = 1e-9
MLP = {"train_size": 512, "dev_size": 96}
ADAM = ({"type": "adam", "lr": 3e-3}, {"type": "warmuplr", "warmup_steps": 5})
ADAM_ONECYCLE = (
    {"type": "adam", "lr": 1e-3},
    {"type": "onecycle", "cycle_min_lr": 1e-4, "cycle_max_lr": 5e-3, "cycle_first_step_size": 8},
)
SGD = ({"type": "sgd", "lr": 0.05, "momentum": 0.9}, {"type": "warmuplr", "warmup_steps": 4})
#: a gloo group that has not finished by then is hung (a worker waiting on a peer that died)
def _config(world: int, physical: int, **overrides: Any) -> TrialConfig:
    optimizer, scheduler = overrides.pop("recipe", ADAM)
    base: dict[str, Any] = {
        "name": f"uneven-v{world}-p{physical}", "workload": "mlp_regression",
        "workload_options": MLP, "world_size": world, "physical_workers": physical,
        "backend": "ddp" if physical > 1 else "simulate", "per_worker_batch": 8,
        "accum_grad": 1, "optimizer": optimizer, "scheduler": scheduler,
        "grad_clip": 1.0 if optimizer["type"] == "sgd" else None, "total_updates": 20,
        "eval_every": 4, "dtype": "float64",
    }  # fmt: skip
    return TrialConfig(**{**base, **overrides})


# -- the assignment ----------------------------------------------------------------------------


def test_assignment_by_hand() -> None:
    assert virtual_rank_counts(16, 3) == (6, 5, 5)
    assert [virtual_ranks(16, 3, p) for p in range(3)] == [range(0, 6), range(6, 11), range(11, 16)]
    assert virtual_rank_counts(4, 3) == (2, 1, 1)
    assert [list(virtual_ranks(4, 3, p)) for p in range(3)] == [[0, 1], [2], [3]]
    assert virtual_rank_counts(6, 4) == (2, 2, 1, 1)
    assert [list(virtual_ranks(6, 4, p)) for p in range(4)] == [[0, 1], [2, 3], [4], [5]]
    assert virtual_rank_counts(7, 7) == (1,) * 7
    assert virtual_rank_counts(5, 1) == (5,)
    config = _config(16, 3)
    assert config.virtual_rank_counts == (6, 5, 5)
    assert config.virtual_per_physical == 6  # the busiest worker's share: it sets the pace
    assert _config(16, 4).virtual_per_physical == 4


@pytest.mark.parametrize("world", range(1, 21))
def test_assignment_covers_every_rank_once_in_order(world: int) -> None:
    for physical in range(1, world + 1):
        blocks = [virtual_ranks(world, physical, p) for p in range(physical)]
        counts = virtual_rank_counts(world, physical)
        # contiguous blocks that, in physical rank order, are the virtual ranks in order
        assert [v for block in blocks for v in block] == list(range(world))
        assert [len(b) for b in blocks] == list(counts)
        # the first V mod P workers play one rank more than the others
        q, r = divmod(world, physical)
        assert counts == (q + 1,) * r + (q,) * (physical - r)
        if not r:  # dividing P: the assignment the loop always made
            assert blocks == [range(p * q, (p + 1) * q) for p in range(physical)]


def test_assignment_refuses_idle_workers_and_bad_ranks() -> None:
    with pytest.raises(ValueError, match=r"physical_workers\(5\) must be at most world_size\(4\)"):
        virtual_rank_counts(4, 5)
    with pytest.raises(ValueError, match="at least 1"):
        virtual_rank_counts(4, 0)
    with pytest.raises(ValueError, match="rank must be in"):
        virtual_ranks(4, 3, 3)
    with pytest.raises(ValueError, match=r"physical_workers\(5\) must be at most world_size\(4\)"):
        loop.train(_config(4, 1), _Worker(0, 5), on_report=lambda m, d: None)


# -- the planner -------------------------------------------------------------------------------


def _plan(*sets: str, cpus: float = 64) -> Any:
    from scalesweep.orchestrator.plan.cluster import ClusterInfo
    from scalesweep.orchestrator.plan.rows import make_plan
    from scalesweep.orchestrator.spec.load import load_sweep

    smoke = str(Path(__file__).resolve().parents[2] / "sweeps" / "smoke.yaml")
    cluster = ClusterInfo(cpus=cpus, gpus=0, memory_gb=512, where="a test box")
    return make_plan(load_sweep(smoke, ["backend=ddp", "target={metric: dev_loss, value: 0.1}",
                                        "baseline=null", "reference={world_size: 2}", *sets]),
                     cluster)


def test_plan_runs_any_workers_up_to_the_world_size_and_shows_the_shares() -> None:
    from scalesweep.orchestrator.plan.table import format_plan

    plan = _plan("physical_workers=3", "axes.world_size=[4, 16]", "axes.scaling_rule=[none]",
                 "training.per_worker_batch=4", "training.accum_grad=2")
    by_ws = {r.world_size: r for r in plan.rows}
    assert by_ws[16].physical_workers == 3 and by_ws[16].trial.virtual_rank_counts == (6, 5, 5)
    assert by_ws[16].feasible
    (note,) = [n for n in by_ws[16].notes if n.startswith("physical_workers")]
    assert note == ("physical_workers 3 of world_size 16: the first plays 6 virtual ranks, the "
                    "other 2 play 5")
    # 2, 1, 1: each update waits for 2 ranks, which 2 workers would do as fast
    (note,) = [n for n in by_ws[4].notes if n.startswith("physical_workers")]
    assert "the first plays 2 virtual ranks, the other 2 play 1" in note
    assert "as fast as with 2 workers" in note
    table = format_plan(plan)
    # P x micro-batches per worker and update: the first V mod P workers' share, then the rest's
    assert "3x12/10" in table and "3x4/2" in table


@pytest.mark.parametrize(("world", "cpus", "workers", "counts"), [
    (16, 64, 16, (1,) * 16),  # room for one worker per virtual rank
    (16, 12, 8, (2,) * 8),  # 12 workers would still wait for 2 ranks: 8 do it with fewer CPUs
    (16, 6, 6, (3, 3, 3, 3, 2, 2)),  # 3 ranks per update, where the divisor 4 would wait for 4
    (16, 5, 4, (4,) * 4),  # 5 workers would wait for 4 ranks too
    (4, 2, 2, (2, 2)),
    (3, 2, 2, (2, 1)),  # the divisor 1 would play all 3 in turn
])  # fmt: skip
def test_auto_workers_are_the_fewest_for_the_fastest_update(world: int, cpus: float, workers: int,
                                                            counts: tuple[int, ...]) -> None:
    (row,) = _plan(f"axes.world_size=[{world}]", "axes.scaling_rule=[none]",
                   "training.per_worker_batch=2", cpus=cpus).rows
    assert (row.physical_workers, row.trial.virtual_rank_counts) == (workers, counts)
    assert row.feasible


def test_more_workers_than_virtual_ranks_is_refused_by_name() -> None:
    from scalesweep.orchestrator.spec.errors import InputError

    with pytest.raises(InputError) as info:
        _plan("physical_workers=3", "axes.world_size=[2, 4]")
    (problem,) = info.value.problems
    assert (problem.path, problem.value) == ("physical_workers", 3)
    assert "physical_workers(3) > axes.world_size[0](2): a worker would play no virtual rank" in problem.rule


# -- the weighting, no process group -----------------------------------------------------------


class _Worker(LocalWorld):
    """Physical rank ``rank`` of ``size``, with nothing reduced: the loop's passes leave this
    worker's local gradient in ``.grad``, as DDP's comm hook would see it."""

    def __init__(self, rank: int, size: int) -> None:
        super().__init__()
        self._rank, self._size = rank, size

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def size(self) -> int:
        return self._size


@contextlib.contextmanager
def _float64() -> Iterator[None]:
    previous = torch.get_default_dtype()
    torch.set_default_dtype(PARAM_DTYPES["float64"])
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def _local(config: TrialConfig, rank: int, size: int, update: int, fused: bool) -> tuple[
        list[torch.Tensor], float, float]:
    """Worker ``rank`` of ``size``: (its local gradient, summed loss, its probe's sum of squares
    of its virtual ranks' gradient increments; NaN for a fused pass, which has no probe)."""
    trial = loop._Trial(config, _Worker(rank, size), lambda m, d: None, None)
    trial.optimizer.zero_grad(set_to_none=True)
    local = torch.zeros(2, dtype=torch.float64)
    if fused:
        trial._fused_passes(trial.model, update, local)
        local[1] = math.nan
    else:
        trial._virtual_rank_passes(trial.model, update, local, probe=True)
    grads = [p.grad.detach().clone() for p in trial.model.parameters() if p.grad is not None]
    return grads, float(local[0]), float(local[1])


def _close(a: list[torch.Tensor], b: list[torch.Tensor], rtol: float = 1e-12) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert float((x - y).abs().max()) <= rtol * float(y.abs().max()), float((x - y).abs().max())


@pytest.mark.parametrize(("world", "physical", "accum"), [(4, 3, 1), (7, 3, 2), (6, 4, 1), (16, 3, 1)])
@pytest.mark.parametrize("fused", [False, True])
def test_each_workers_share_is_weighted_so_the_mean_over_workers_is_simulates(
        world: int, physical: int, accum: int, fused: bool) -> None:
    # batch 4: V = 16 still makes 8 updates an epoch of the 512 samples
    config = _config(world, physical, accum_grad=accum, per_worker_batch=4,
                     fuse="auto" if fused else "off", fuse_max_samples=5)
    update = 5
    with _float64():
        whole, whole_loss, whole_sq = _local(config, 0, 1, update, fused)  # simulate: P = 1
        # g_v: each virtual rank's mean gradient, from P = V where every worker plays one rank
        # and its weight P / global_batch = V / (V b) = 1 / b makes local_v = g_v
        g = [_local(config, v, world, update, fused=False)[0] for v in range(world)]
        workers = [_local(config, p, physical, update, fused) for p in range(physical)]
    for p, (grads, _, _) in enumerate(workers):
        # local_p = (P / V) * sum of its ranks' g_v: its v_p ranks, no other factor
        mine = virtual_ranks(world, physical, p)
        expected = [physical / world * sum(g[v][i] for v in mine) for i in range(len(grads))]
        _close(grads, expected)
    # DDP's all-reduce: the mean over the P workers, the mean over the global batch
    mean = [sum(w[0][i] for w in workers) / physical for i in range(len(whole))]
    _close(mean, whole)
    assert sum(w[1] for w in workers) == pytest.approx(whole_loss, rel=1e-12)
    if not fused:
        # the noise scale's small-batch norm: (V / P^2) * the increments' squares summed over
        # every worker, whatever each one's share, is simulate's (V / 1) * its own sum
        uneven = world / physical**2 * sum(w[2] for w in workers)
        assert uneven == pytest.approx(world * whole_sq, rel=1e-12)
        assert uneven == pytest.approx(sum(float(torch.cat([t.flatten() for t in gv]).square().sum())
                                           for gv in g) / world, rel=1e-12)


# -- real DDP without Ray: a gloo group of 3 processes -----------------------------------------


def _gloo_job(rank: int, jobs: list[dict[str, Any]], out: str) -> None:
    """One rank of the group: trains every job in turn, writes its reports (and, rank 0, the
    final model) under ``out``."""
    from scalesweep.trainables.world import DistributedWorld

    world = DistributedWorld("cpu")
    results: dict[str, list[dict[str, Any]]] = {}
    for job in jobs:
        trial = TrialConfig.model_validate(job["trial"])
        results[trial.name] = _train(trial, world, job.get("resume_from"), Path(out))
    Path(out, f"rank{rank}.json").write_text(json.dumps(results))


def _train(trial: TrialConfig, world: Any, resume_from: str | None, out: Path) -> list[dict[str, Any]]:
    """Reports; the final parameters go to ``out/<name>.pt`` and each checkpoint of a run to
    ``out/<name>-<update>`` (rank 0 only, where the loop writes them)."""
    reports: list[dict[str, Any]] = []

    def on_report(metrics: dict[str, Any], checkpoint_dir: str | None) -> None:
        reports.append(metrics)
        if checkpoint_dir is not None:
            shutil.copytree(checkpoint_dir, out / f"{trial.name}-{metrics['update']}")
            if metrics["status"] != "running":
                state = torch.load(Path(checkpoint_dir) / "state.pt", weights_only=True)
                torch.save(state["model"], out / f"{trial.name}.pt")

    loop.train(trial, world, on_report=on_report, resume_from=resume_from)
    return reports


def _simulate(trial: TrialConfig, out: Path, resume_from: str | None = None) -> list[dict[str, Any]]:
    sim = trial.model_copy(update={"backend": "simulate", "physical_workers": 1,
                                   "name": f"{trial.name}-sim"})
    return _train(sim, LocalWorld(), resume_from, out)


def _assert_same(ddp: list[dict[str, Any]], sim: list[dict[str, Any]]) -> float:
    """Same reports to RTOL (losses, noise scale), the same schedule; the largest deviation."""
    assert [m["update"] for m in ddp] == [m["update"] for m in sim]
    worst = 0.0
    for d, s in zip(ddp, sim, strict=True):
        for key in [k for k in s if k == "train_loss" or k.startswith("dev_") or k == "noise_scale"]:
            # NaN on both sides before a fused trial's first noise measurement (update 4)
            assert d[key] == pytest.approx(s[key], rel=RTOL, nan_ok=True), (key, d["update"])
            if s[key] == s[key]:
                worst = max(worst, abs(d[key] - s[key]) / abs(s[key]))
        for key in ("samples_seen", "epoch", "lr", "status"):
            assert d[key] == s[key]
    return worst


def _assert_same_parameters(a: Path, b: Path) -> float:
    """Every parameter tensor within RTOL of the other's largest entry; the largest deviation."""
    x, y = torch.load(a, weights_only=True), torch.load(b, weights_only=True)
    assert x.keys() == y.keys()
    worst = 0.0
    for key in y:
        deviation = float((x[key] - y[key]).abs().max()) / float(y[key].abs().max())
        assert deviation <= RTOL, key
        worst = max(worst, deviation)
    return worst


def _run_group(size: int, jobs: list[dict[str, Any]], out: Path) -> list[dict[str, Any]]:
    """Run a gloo group of ``size`` spawned processes; every rank's reports."""
    gloo_group.run(size, _gloo_job, (jobs, str(out)), out)
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(size)]


def test_a_gloo_group_of_three_makes_simulates_updates_for_uneven_shares(tmp_path: Path) -> None:
    """P = 3 real DDP processes (no Ray) against simulate, for three uneven splits; a
    checkpoint moves from simulate to P = 3 and from P = 3 to simulate."""
    trials = [
        _config(4, 3, fuse="off"),  # 2, 1, 1 ranks
        _config(5, 3, accum_grad=2, fuse="auto", fuse_max_samples=12,  # 2, 2, 1: fused passes
                recipe=ADAM_ONECYCLE, name="uneven-v5-p3-fused"),
        _config(7, 3, recipe=SGD, fuse="off", checkpoint_every=10),  # 3, 2, 2; SGD + clipping
    ]
    # a checkpoint simulate makes at update 10, for the group to resume from
    resumed = trials[2].model_copy(update={"name": "uneven-v7-p3-resumed"})
    sim_of = {t.name: _simulate(t, tmp_path) for t in trials}
    from_simulate = str(tmp_path / f"{trials[2].name}-sim-10")
    assert Path(from_simulate, "state.pt").exists()
    jobs = [{"trial": t.model_dump(mode="json")} for t in trials]
    jobs.append({"trial": resumed.model_dump(mode="json"), "resume_from": from_simulate})

    started = time.perf_counter()
    by_rank = _run_group(3, jobs, tmp_path)
    print(f"\ngloo P=3: {len(jobs)} trials in {time.perf_counter() - started:.1f} s")
    untimed = [{k: [{n: x for n, x in m.items() if n != "wall_s"} for m in v] for k, v in r.items()}
               for r in by_rank]  # fmt: skip
    assert untimed[1] == untimed[0] and untimed[2] == untimed[0]  # every rank reports the same
    ddp = by_rank[0]
    for trial in trials:
        worst = _assert_same(ddp[trial.name], sim_of[trial.name])
        params = _assert_same_parameters(tmp_path / f"{trial.name}.pt", tmp_path / f"{trial.name}-sim.pt")
        print(f"{trial.name} {trial.virtual_rank_counts}: max relative deviation {worst:.1e}, "
              f"parameters {params:.1e}")
    # simulate's checkpoint resumed on 3 workers: the rest of simulate's own run
    tail = [m for m in sim_of[trials[2].name] if m["update"] > 10]
    _assert_same(ddp[resumed.name], tail)
    _assert_same_parameters(tmp_path / f"{resumed.name}.pt", tmp_path / f"{trials[2].name}-sim.pt")
    # the group's checkpoint at update 10 resumed in simulate: the same again
    back = _simulate(trials[2].model_copy(update={"name": "uneven-v7-back"}), tmp_path,
                     resume_from=str(tmp_path / f"{trials[2].name}-10"))
    _assert_same(back, tail)
    _assert_same_parameters(tmp_path / "uneven-v7-back-sim.pt", tmp_path / f"{trials[2].name}-sim.pt")


# -- slow: real Ray Train workers --------------------------------------------------------------


def _ray_worker(config: dict[str, Any]) -> None:
    """Train every trial in turn in this worker group; each rank writes what it reported."""
    import ray.train
    import ray.train.torch

    from scalesweep.trainables.world import DistributedWorld

    rank = ray.train.get_context().get_world_rank()
    world = DistributedWorld(ray.train.torch.get_device())
    out: dict[str, list[dict[str, Any]]] = {}
    for dumped in config["trials"]:
        trial = TrialConfig.model_validate(dumped)
        out[trial.name] = _train(trial, world, None, Path(config["out"]))
    Path(config["out"], f"rank{rank}.json").write_text(json.dumps(out))


#: Ray Train's cases: 256 samples, so that 12 updates still take the ramp past its first epoch
RAY_MLP = {"train_size": 256, "dev_size": 48}


#: Ray Train's workers: P = 4 (an odd P is the gloo group's, above: Ray Train adds nothing
#: that depends on P's parity, and its own run of 3 workers cost ~25 CPU-s of start-up)
RAY_PHYSICAL = 4
RAY_TRIALS = [
    _config(6, 4, fuse="off", recipe=SGD, total_updates=12, workload_options=RAY_MLP),  # 2, 2, 1, 1
    # 2, 2, 1, 1 ranks, fused: the 2-rank workers run their 32 samples of an update in 3
    # passes, the others their 16 in 2 (the noise scale's updates, every 4th, per rank)
    _config(6, 4, fuse="auto", fuse_max_samples=12, accum_grad=2, total_updates=12,
            name="uneven-v6-p4-a2-fused", workload_options=RAY_MLP),
    # a batch ramp through Ray Train: V = 4 (each worker one rank) for an epoch (8
    # updates), then V = 8 (two each), half the lr on a half-speed clock first
    _config(8, 4, fuse="auto", total_updates=12, name="ramp-v4-v8-p4", workload_options=RAY_MLP,
            batch_ramp=(RampStage(world_size=4, epochs=1, lr_multiplier=0.5, clock=0.5,
                                  eval_every=4),)),
]  # fmt: skip
ddp_groups.register(RAY_PHYSICAL, f"uneven-p{RAY_PHYSICAL}", _ray_worker,
                    {"trials": [t.model_dump(mode="json") for t in RAY_TRIALS]})


@pytest.mark.slow
def test_ray_train_workers_make_simulates_updates_for_uneven_shares(
        ray_cluster: None, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    out = ddp_groups.outputs(request, RAY_PHYSICAL, f"uneven-p{RAY_PHYSICAL}")
    by_rank = [json.loads((out / f"rank{r}.json").read_text()) for r in range(RAY_PHYSICAL)]
    untimed = [{k: [{n: x for n, x in m.items() if n != "wall_s"} for m in v] for k, v in r.items()}
               for r in by_rank]  # fmt: skip
    assert all(other == untimed[0] for other in untimed[1:])
    assert any(t.fuse == "auto" and len(set(t.virtual_rank_counts)) > 1 for t in RAY_TRIALS)
    for trial in RAY_TRIALS:
        sim = _simulate(trial, tmp_path)
        worst = _assert_same(by_rank[0][trial.name], sim)
        assert any(m["noise_scale"] == m["noise_scale"] for m in sim)  # it was measured
        params = _assert_same_parameters(out / f"{trial.name}.pt", tmp_path / f"{trial.name}-sim.pt")
        print(f"{trial.name} {trial.virtual_rank_counts} fuse {trial.fuse}: max relative deviation "
              f"{worst:.1e}, parameters {params:.1e}")
