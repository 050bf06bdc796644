"""The training loop of one trial, the same code on every backend.

Each physical worker plays a block of virtual ranks, V/P of them when P divides V, else
``V // P`` or one more (:func:`scalesweep.trainables.sharding.virtual_ranks`; V = 16 on P = 3
plays 6, 5, 5): for every optimizer update it runs, for each of its virtual ranks and each of
``accum_grad`` micro-batches, a forward and backward pass, all under DDP's ``no_sync`` except
the very last, so each update all-reduces once. Which samples each virtual rank sees
(:mod:`scalesweep.trainables.sharding`) and the seed torch's RNG gets before each micro-batch
(their order and keys are :mod:`scalesweep.trainables.stepping`'s, which users' loops step by
too, through :mod:`scalesweep.loop_helpers`) depend on V and the update only, so P = 1
(``simulate``), P = V (``ddp``) and hybrids, even or uneven, make the same updates up to the
order in which float gradients are summed. The weight
of each sample's loss (``_Trial.loss_weight``) is what makes the all-reduced gradient the mean
over the global batch for any split of the virtual ranks.

Reports (``on_report``) happen at every ``eval_every``-th update, at every checkpoint and at
the end; each carries a full dev evaluation, because Tune refuses results that lack the
metric it optimises and a checkpoint reaches Ray only through a report.

With V > 1 each report also carries ``noise_scale``, the gradient noise scale B_simple
(:mod:`scalesweep.science.noise_scale`) at that update, measured for free: the small batches are the
V per-virtual-rank gradients (B_small = per_worker_batch * accum_grad samples each), the big
one the all-reduced gradient (the global batch). A virtual rank's gradient is what its
micro-batches added to the accumulated ``.grad``; the last virtual rank of a process is read
just before the all-reduce (:meth:`World.before_reduce`). Its cost: one copy of the gradients
(none when each process plays one virtual rank), a few vector norms per virtual rank, and one
float more in the all-reduce that already sums the loss (no extra collective).

Fused updates (:mod:`scalesweep.trainables.fusion`): when the workload is ``fusable`` and ``fuse`` is
"auto", a process runs its micro-batches of an update in a few passes grouped by length instead
of one per virtual rank (mini_asr at V = 16: 1.38x the loop's updates per second, 1.70x on the
updates that do not measure the noise scale; benchmarks/README.md). The gradient is the same
sum; but the per-virtual-rank gradients the noise scale needs no longer exist. So the noise
scale is then measured at every :data:`NOISE_EVERY`-th update only, which runs per virtual rank
as before (exactly the same measurement), and its moving average decays by ``EMA_DECAY **
NOISE_EVERY`` per measurement, which keeps its memory at ~20 updates. Why every k-th update
rather than at each eval: the average then has the same time profile as before and enough
points in it whatever the eval cadence (evals can be 60 updates apart, a whole memory span and
more). What it costs: one update in NOISE_EVERY runs at the unfused speed and pays the probe's
copies (mini_asr V = 16: 46 % of the fused gain; every 8th would keep ~1.56x of 1.70x), and the
average holds ~NOISE_EVERY times fewer estimates, so it is noisier (its variance ~NOISE_EVERY
times larger). ``fuse: off`` measures at every update, reproducing the unfused numbers exactly.
The cadence depends on the trial, never on P, so simulate, ddp and hybrids still report the
same noise scale.

Mixed precision (:mod:`scalesweep.trainables.precision`, ``dtype: bfloat16 | float16``): forward and loss
(training and evaluation) run under ``torch.autocast``; parameters, gradients and optimizer
state stay float32. Under float16 the backward runs on the loss times the GradScaler's scale,
so every gradient the loop reads must be divided by it first: the all-reduced one by
``Precision.unscale`` right after the last backward, before its norm feeds the noise scale and
before clipping; the per-virtual-rank ones, which the probe reads mid-accumulation (where an
in-place unscale would mix scaled and unscaled gradients), by the probe itself (the scale is a
power of two, so the result is exactly what unscaling would give). An update the scaler skips
(inf/nan gradients) changes neither the parameters nor the noise scale's averages; it still
counts as an update (data, lr schedule), as in torch's own GradScaler recipe, and the reports
carry the cumulative ``skipped_updates``.

Host syncs. Every value the host reads from the device (``.item()``, ``float(t)``, ``.cpu()``,
``.tolist()``, a branch on a tensor) waits until the device has run everything queued before
it; one per update keeps a GPU loop in lockstep with its host. So an update reads nothing: its
summed training loss and a probe's norms stay on the device (``_Trial.pending``) and are read
in one copy at every report and at every :data:`DIVERGENCE_EVERY`-th update
(``_Trial._read_pending``), then folded in update order with the same float64 arithmetic as
when each was read at once: the reports, the noise scale and the parameters are bit for bit
what they were. The evaluation sums its metrics on the device and reads them once. What
remains per update: float16's GradScaler (torch's ``step`` reads its inf/nan flag, and the
loop reads the scale once to count skipped steps); a workload's own reads in ``loss``.
Divergence (a non-finite or above-threshold mean training loss) is therefore seen at the first
read after it, at most ``DIVERGENCE_EVERY - 1`` updates late, and the trial ends there: its
last report is at that update (the update the parameters and the dev metrics are of), with
status ``diverged``, a checkpoint, and the training loss of every update since the previous
report, the diverged ones included. The read points depend on the update number and the
report cadence only, so every backend and P stops a diverged trial at the same update.
"""

from __future__ import annotations

import contextlib
import math
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from scalesweep.mlflow_names import STATUS_TAG, STEP_KEY, TRAIN_SECONDS_METRIC
from scalesweep.science import schedules
from scalesweep.science.batch_ramp import Segment
from scalesweep.science.noise_scale import EMA_DECAY, NoiseScale
from scalesweep.science.solve import OBJECTIVE_METRIC, score
from scalesweep.science.stats.convergence import EvalPoint, first_crossing
from scalesweep.trainables import checkpointing, fusion, stepping
from scalesweep.trainables import workloads as workload_registry
from scalesweep.trainables.checkpointing import Progress
from scalesweep.trainables.config import TrialConfig
from scalesweep.trainables.memory_limit import MemoryLimit
from scalesweep.trainables.precision import PARAM_DTYPES, Precision
from scalesweep.trainables.sharding import Sharding, virtual_ranks
from scalesweep.trainables.stepping import build_optimizer
from scalesweep.trainables.workloads.base import Workload
from scalesweep.trainables.world import World

#: dev samples per evaluation batch: fixed, so every backend sums the dev set the same way.
EVAL_BATCH = 256
#: a fused trial measures the noise scale at every NOISE_EVERY-th update (module doc)
NOISE_EVERY = 4
#: the loop reads its updates' device values at every report and at every DIVERGENCE_EVERY-th
#: update (module doc, "Host syncs"): the most updates a diverged trial runs past its divergence
#: when reports are further apart
DIVERGENCE_EVERY = 16

#: ``on_report(metrics, checkpoint_dir)``: the directory exists only during the call and only
#: on physical rank 0 (None elsewhere); persist it before returning.
ReportFn = Callable[[dict[str, Any], str | None], None]


def train(
    config: TrialConfig,
    world: World,
    *,
    on_report: ReportFn,
    resume_from: str | Path | None = None,
    workload: Workload | None = None,
) -> dict[str, Any]:
    """Run (or continue) one trial; returns the final metrics plus ``train_seconds``.

    ``workload``: the trial's workload, already made (e.g. once per ddp trial and shared by
    its workers); by default the loop makes it from ``config``."""
    if world.size > config.smallest_world_size:
        raise ValueError(
            f"physical_workers({world.size}) must be at most world_size"
            f"({config.smallest_world_size}{' in the batch ramp' if config.batch_ramp else ''}): "
            "a worker would play no virtual rank"
        )
    previous = torch.get_default_dtype()
    torch.set_default_dtype(PARAM_DTYPES[config.dtype])
    try:
        return _Trial(config, world, on_report, workload).run(resume_from)
    finally:
        torch.set_default_dtype(previous)


class _Trial:
    def __init__(
        self, config: TrialConfig, world: World, on_report: ReportFn, workload: Workload | None
    ) -> None:
        self.config, self.world, self.on_report = config, world, on_report
        self.workload: Workload = workload or workload_registry.make(config.workload, config.workload_options)
        # Which V, epoch, lr multiplier and schedule position each update has: one segment at
        # world_size, or a batch-size ramp's stages first (scalesweep.science.batch_ramp).
        # _use sets the segment's sharding, virtual ranks and loss weight below.
        self.data = config.data_plan(self.workload.train_size())
        self._use(self.data.segments[0])
        # The one weight that makes the all-reduced gradient the mean over the global batch, for
        # any P and any split of the V ranks into the v_p. Every sample's loss is weighted
        # w = P / global_batch (global_batch = V b, b = per_worker_batch * accum_grad samples per
        # virtual rank), so worker p accumulates
        #     local_p = w * sum of its v_p b samples' gradients = (P / V) * sum_{v in p} g_v,
        # g_v being virtual rank v's mean gradient over its b samples. DDP's all-reduce takes the
        # mean over the P workers:
        #     (1/P) * sum_p local_p = (1/P) (P/V) sum_p sum_{v in p} g_v = (1/V) sum_{v=0}^{V-1} g_v,
        # the mean over all V ranks, i.e. over the global batch, whatever the v_p: w is per
        # sample, so a worker with more ranks contributes more terms, not a different factor
        # (P = 1: the plain mean). Unequal v_p change nothing else; see also _update's noise scale.
        # With a batch-size ramp, global_batch is the segment's.
        self.metric_names = sorted(self.workload.metrics)
        self.fused = fusion.fuses(config, self.workload)
        self.pass_budget = fusion.pass_budget(config, world.device)
        self.noise_every = NOISE_EVERY if self.fused else 1
        self.precision = Precision(config.dtype, world.device)
        self.memory = MemoryLimit(config.memory_per_worker_gb, config.name)

        # a workload that keeps its data on the device makes its batches there (base.py)
        self.placed = _place(self.workload, world.device)
        torch.manual_seed(config.seed)
        self.model = self.workload.build_model().to(world.device)
        self.optimizer = build_optimizer(self.model.parameters(), config.optimizer)
        self.schedule = schedules.build(config.scheduler, config.optimizer.lr)
        self.progress = Progress()
        self.pending = _Pending()
        # V = 1 has no small batch to compare the global one with
        self.noise: NoiseScale | None = None
        if config.world_size > 1:
            b_small = config.per_worker_batch * config.accum_grad
            # b_big: the final batch; a ramp's smaller stages pass theirs with each measurement
            self.noise = NoiseScale(b_small=b_small, b_big=config.global_batch, decay=self._noise_decay)
            self.probe = _GradProbe()

    # -- the run ---------------------------------------------------------------------------

    def run(self, resume_from: str | Path | None) -> dict[str, Any]:
        if resume_from is not None:
            self.progress = checkpointing.load(
                resume_from,
                config=self.config,
                model=self.model,
                optimizer=self.optimizer,
                data_position=self.data.done,
                map_location=self.world.device,
                precision=self.precision,
            )
            if self.progress.status != "running":  # finished before the restart: nothing to do
                return self._final(self.progress.last_report)
            if not self.progress.target_evals:
                # a checkpoint from before target_evals were kept: a candidate that has not
                # crossed (it would have stopped) needs only its last eval, unsmoothed
                self.progress.target_evals = [asdict(p) for p in
                                              self._target_points(self.progress.last_report)]
            if self.noise is not None and self.progress.noise_scale:
                # re-based if the checkpoint was made under another cadence (fuse changed)
                restored = NoiseScale.from_state(self.progress.noise_scale)
                self.noise = restored.with_decay(self._noise_decay)
        # Wrap after loading: DDP broadcasts rank 0's parameters when it wraps.
        ddp = self.world.wrap(self.model)
        ddp.train()
        started = time.perf_counter() - self.progress.wall_s
        last_checkpoint = time.perf_counter()
        metrics: dict[str, Any] = dict(self.progress.last_report)
        for update in range(self.progress.update + 1, self.config.total_updates + 1):
            if update > self.segment.last_update:  # a ramp's next stage
                self._use(self.data.segment(update))
            lr, momentum = self._set_hyperparameters(update)
            self._update(ddp, update)
            self.memory.check()  # the update's gradients and optimizer state are held by now
            p = self.progress
            p.update = update
            p.epoch, p.update_in_epoch = self.data.done(update)
            p.train_loss_count += self.segment.global_batch
            # Each rank reads its own clock, which may disagree; harmless, since the wall-time
            # cadence only picks among evals, which every rank reports anyway, and only rank
            # 0's choice matters: only rank 0 writes a checkpoint.
            since = time.perf_counter() - last_checkpoint
            at_eval = self.data.eval_due(update)
            checkpoint = checkpointing.due(self.config, update, since, at_eval)
            diverged = False
            if at_eval or checkpoint or update % DIVERGENCE_EVERY == 0:
                diverged = self._read_pending()  # the one host sync between evals
                checkpoint = checkpoint or diverged
            if not (at_eval or checkpoint):
                continue
            p.wall_s = time.perf_counter() - started
            metrics = self._metrics(update, lr, momentum)
            status = "running"
            if diverged or not math.isfinite(metrics["dev_loss"]):
                status = "diverged"
            elif self._reached_target(metrics):
                status = "stopped"
            elif update == self.config.total_updates:
                status = "completed"
            metrics[STATUS_TAG] = p.status = status
            p.last_report = metrics
            p.train_loss_sum, p.train_loss_count = 0.0, 0
            self._report(metrics, checkpoint=checkpoint or status != "running")
            if checkpoint:
                last_checkpoint = time.perf_counter()
            if status != "running":
                break
        self.progress.wall_s = time.perf_counter() - started
        return self._final(metrics)

    def _use(self, segment: Segment) -> None:
        """Make ``segment`` current: its world size V's sharding, this process's virtual ranks
        of V and the loss weight (nothing changes within a segment)."""
        cfg, world = self.config, self.world
        self.segment = segment
        self.sharding = Sharding(self.workload.train_size(), segment.world_size,
                                 cfg.per_worker_batch, cfg.accum_grad, cfg.seed,
                                 first_update=segment.first_update, first_epoch=segment.first_epoch)
        # v_p of the V virtual ranks, v_p = V // P or one more; which ones never changes a
        # rank's samples, only which process computes them
        self.virtual_ranks = virtual_ranks(segment.world_size, world.size, world.rank)
        self.loss_weight = world.size / segment.global_batch

    @property
    def _noise_decay(self) -> float:
        """Per measurement, so that the average forgets at the same rate per update."""
        return float(EMA_DECAY**self.noise_every)

    def _set_hyperparameters(self, update: int) -> tuple[float, float | None]:
        # The schedule is a pure function of the update about to be made; setting the groups
        # directly (no LambdaLR) leaves the update count as the only scheduler state.
        # A batch-size ramp's earlier stages: the schedule at the stage's clock, the lr times
        # the stage's multiplier (both 1 update / 1x without a ramp, where position == update)
        position = self.data.position(update)
        lr = float(self.schedule.lr(position)) * self.segment.lr_multiplier
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        # the (beta1, beta2) a schedule sets is its family's (OneCycle holds beta2 at 0.99)
        return lr, stepping.set_betas(self.optimizer, self.schedule.betas(position))

    def _update(self, ddp: torch.nn.Module, update: int) -> None:
        """One optimizer update. Its summed per-sample loss over the global batch (and a
        probe's norms) stay on the device in ``self.pending`` until :meth:`_read_pending`."""
        cfg = self.config
        self.optimizer.zero_grad(set_to_none=True)
        # [summed loss, sum over this process's virtual ranks of |their .grad increment|^2]
        local = torch.zeros(2, dtype=torch.float64, device=self.world.device)
        # a stage of one virtual rank has no small batch to compare the global one with
        probe = self.noise is not None and self.segment.world_size > 1 and update % self.noise_every == 0
        if self.fused and not probe:
            self._fused_passes(ddp, update, local)
        else:
            self._virtual_rank_passes(ddp, update, local, probe)
        # float16: true gradients from here on (the noise scale's norm and clipping need them)
        self.precision.unscale(self.optimizer)
        if probe:
            # before clipping: the noise scale is a property of the gradients, not of the step
            big_sq = _sum_sq((p.grad for p in self.model.parameters() if p.grad is not None),
                             self.world.device)
        if cfg.grad_clip is not None:
            # On the all-reduced gradient: identical on every rank, as in the recipe.
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.grad_clip)
        # False only when float16's scaler found inf/nan: every rank finds the same (all-reduced)
        stepped = self.precision.step(self.optimizer)
        total = self.world.all_reduce_sum(local)  # stays on the device until _read_pending
        self.pending.losses.append(_PendingLoss(total[0], self.segment.global_batch))
        if probe and stepped and self.noise is not None:  # a skipped update's norms are inf/nan
            self.pending.norms.append(_PendingNorms(total[1], big_sq, self.segment.world_size,
                                                    self.world.size, self.segment.global_batch))

    def _read_pending(self) -> bool:
        """Read the device values of the updates since the last read, in one device-to-host
        copy, and fold them into the training-loss sum and the noise scale in update order,
        with the same float arithmetic the loop did after each update; returns whether one of
        those updates diverged (its mean training loss non-finite or above the threshold).

        Why not after every update: reading a device value waits for the device to finish
        all queued work, so a loop that reads one per update can never run ahead of the GPU.
        The cost is latency: a divergence is seen at the next report or DIVERGENCE_EVERY-th
        update, whichever comes first, and the trial ends there (module doc)."""
        losses, norms = self.pending.take()
        if not losses and not norms:
            return False
        values = torch.stack([x.loss for x in losses]
                             + [t for n in norms for t in (n.small_sq, n.big_sq)]).tolist()
        p, diverged = self.progress, False
        for x, loss in zip(losses, values, strict=False):
            p.train_loss_sum += loss
            diverged = diverged or self._diverged(loss / x.global_batch)
        if self.noise is not None and norms:
            pairs = values[len(losses):]
            for i, n in enumerate(norms):
                # Virtual rank v's increment is (P / V) g_v, its mean-gradient g_v times the loss
                # weight P / global_batch times its B_small samples; so mean_v |g_v|^2 is
                # (V / P^2) times the sum of the increments' squares over all V virtual ranks
                # (every rank counted once whichever worker plays it, so uneven v_p need
                # nothing else).
                self.noise.update(g_small_sq=pairs[2 * i] * n.world_size / n.workers**2,
                                  g_big_sq=pairs[2 * i + 1], b_big=n.global_batch)
            self.progress.noise_scale = self.noise.state()
        return diverged

    def _virtual_rank_passes(
        self, ddp: torch.nn.Module, update: int, local: torch.Tensor, probe: bool
    ) -> None:
        """One pass per (virtual rank, micro-batch), as real DDP ranks run them; with ``probe``
        each virtual rank's gradient feeds the noise-scale probe (into ``local[1]``)."""
        cfg = self.config
        if probe:
            self.probe.start(self.precision.grad_factor)
        for mb in stepping.micro_batches(self.sharding, self.virtual_ranks, update):
            batch = self._batch(mb.indices)
            stepping.reseed_pass(self.world.device, cfg.seed, update, mb)
            last = mb.last  # only the last backward all-reduces
            with self.world.before_reduce(ddp, self.probe.observe_last) if probe and last \
                    else contextlib.nullcontext():  # fmt: skip
                local[0] += self._backward(ddp, batch, reduce=last)
            if probe and not last and mb.index == cfg.accum_grad - 1:  # virtual rank complete
                self.probe.observe([(p, p.grad) for p in self.model.parameters() if p.grad is not None])
        if probe and self.probe.sum_sq is not None:
            local[1] = self.probe.sum_sq

    def _fused_passes(self, ddp: torch.nn.Module, update: int, local: torch.Tensor) -> None:
        """All of this process's samples of the update in as few passes as the budget allows,
        grouped by length. No reseeding: a fusable workload's loss draws nothing."""
        indices = [i for mb in stepping.micro_batches(self.sharding, self.virtual_ranks, update)
                   for i in mb.indices]
        lengths = fusion.sample_lengths(self.workload, indices)
        passes = fusion.plan_passes(indices, self.pass_budget, lengths)
        for i, group in enumerate(passes):
            local[0] += self._backward(ddp, self._batch(group), reduce=i == len(passes) - 1)

    def _batch(self, indices: Sequence[int]) -> Any:
        return self._on_device(self.workload.train_batch(indices))

    def _on_device(self, batch: Any) -> Any:
        return batch if self.placed else _to_device(batch, self.world.device)

    def _backward(self, ddp: torch.nn.Module, batch: Any, *, reduce: bool) -> torch.Tensor:
        """Forward and backward of a batch, each sample weighted by P / global_batch; only a
        ``reduce`` pass all-reduces. Returns its summed loss (float64, detached)."""
        with contextlib.nullcontext() if reduce else self.world.no_sync(ddp):
            with self.precision.autocast():  # forward and loss only; backward follows the forward's dtypes
                per_sample = self.precision.master(self.workload.loss(ddp, batch))
            self.precision.backward(per_sample.sum() * self.loss_weight)
        return per_sample.detach().double().sum()

    # -- evaluation and reports ------------------------------------------------------------

    def _evaluate(self) -> dict[str, float]:
        """Mean of each metric over the whole dev set, in a fixed batch order on rank 0."""
        # summed on the device and read once: a read per batch would wait for each batch
        values = torch.zeros(len(self.metric_names), dtype=torch.float64, device=self.world.device)
        if self.world.rank == 0:
            # evaluate draws nothing by contract; seeded anyway so a workload that does still
            # draws the same numbers on every backend
            stepping.reseed_eval(self.world.device, self.config.seed, self.progress.update)
            model = self.world.unwrap(self.model)
            model.eval()
            count = 0
            with torch.no_grad():
                for batch in self.workload.dev_batches(EVAL_BATCH):
                    # the model as it trains; the sums below are float64 whatever the dtype
                    with self.precision.autocast():
                        out = self.workload.evaluate(model, self._on_device(batch))
                    for i, name in enumerate(self.metric_names):
                        values[i] += out[name].detach().double().sum()
                    count += len(out["loss"])
            model.train()
            values /= count
        # The other ranks wait here for rank 0's numbers, so every rank takes the same
        # decisions (stop, diverge) from the same values.
        values = self.world.broadcast(values, src=0).cpu()
        return {stepping.dev_key(n): float(v) for n, v in zip(self.metric_names, values, strict=True)}

    def _metrics(self, update: int, lr: float, momentum: float | None) -> dict[str, Any]:
        # every update's training loss and noise-scale norms are in by now (run reads them at
        # every report), so the report below describes all updates up to this one
        p = self.progress
        metrics: dict[str, Any] = {
            **stepping.report_keys(update, samples_seen=self.data.samples(update),
                                   epoch=self.data.epoch(update)),
            "global_batch": self.segment.global_batch,
            "wall_s": p.wall_s,
            "train_loss": p.train_loss_sum / p.train_loss_count,
            **self._evaluate(),
            "lr": lr,
        }
        if momentum is not None:
            metrics["momentum"] = momentum
        if self.noise is not None:
            metrics["noise_scale"] = self.noise.value
        metrics.update(self.precision.metrics())  # float16: skipped_updates
        self.progress.target_evals += [asdict(p) for p in self._target_points(metrics)]
        objective = self.config.objective
        if objective is not None:
            metrics[OBJECTIVE_METRIC] = score(self.target_curve, objective.target, objective.mode,
                                              objective.baseline_epochs, objective.smoothing).value
        return metrics

    @property
    def target_curve(self) -> list[EvalPoint]:
        """The evals of the target metric (stop_at_target's, a solve candidate's objective's),
        kept in the checkpoint: a smoothed crossing and a candidate's score read all of them."""
        return [EvalPoint(**e) for e in self.progress.target_evals]

    def _target_points(self, report: Mapping[str, Any]) -> list[EvalPoint]:
        metric = self.config.target_metric
        if metric is None or metric not in report or "epoch" not in report:
            return []
        return [EvalPoint(update=float(report[STEP_KEY]), samples_seen=float(report["samples_seen"]),
                          epoch=float(report["epoch"]), wall_s=float(report.get("wall_s", 0.0)),
                          value=float(report[metric]))]

    def _report(self, metrics: dict[str, Any], *, checkpoint: bool) -> None:
        if not checkpoint or self.world.rank != 0:
            self.on_report(dict(metrics), None)
            return
        directory = tempfile.mkdtemp(prefix="scalesweep-ckpt-")
        try:
            checkpointing.save(
                directory,
                config=self.config,
                model=self.world.unwrap(self.model),
                optimizer=self.optimizer,
                progress=self.progress,
                precision=self.precision.state_dict(),
            )
            self.on_report(dict(metrics), directory)
        finally:
            shutil.rmtree(directory, ignore_errors=True)

    def _diverged(self, loss: float) -> bool:
        threshold = self.config.divergence_threshold
        return not math.isfinite(loss) or (threshold is not None and loss > threshold)

    def _reached_target(self, metrics: Mapping[str, Any]) -> bool:
        target = self.config.stop_at_target
        if target is None or target.metric not in metrics:
            return False
        return first_crossing(self.target_curve, target.value, target.mode, target.smoothing) is not None

    def _final(self, metrics: Mapping[str, Any]) -> dict[str, Any]:
        return {**metrics, TRAIN_SECONDS_METRIC: self.progress.wall_s}


@dataclass(frozen=True)
class _PendingLoss:
    """An update's summed per-sample training loss, on the device, and its global batch."""

    loss: torch.Tensor  # 0-dim float64
    global_batch: int


@dataclass(frozen=True)
class _PendingNorms:
    """A noise-scale measurement's two squared norms, on the device, and what turns them into
    one (the update's V, P and global batch)."""

    small_sq: torch.Tensor  # 0-dim float64: sum over virtual ranks of |increment|^2
    big_sq: torch.Tensor  # 0-dim float64: |all-reduced gradient|^2
    world_size: int
    workers: int
    global_batch: int


@dataclass
class _Pending:
    """What the updates since the last read left on the device, oldest first."""

    losses: list[_PendingLoss] = field(default_factory=list)
    norms: list[_PendingNorms] = field(default_factory=list)

    def take(self) -> tuple[list[_PendingLoss], list[_PendingNorms]]:
        taken = self.losses, self.norms
        self.losses, self.norms = [], []
        return taken


class _GradProbe:
    """Sum over virtual ranks of |the increment each adds to the accumulated gradient|^2.

    Keeps one copy of the gradients (the accumulated gradient as the previous virtual rank
    left it); a virtual rank's increment is the gradient as it leaves it minus that copy. Runs
    at every virtual-rank boundary of every measured update, so it uses torch's multi-tensor (foreach)
    ops: one call over all parameters instead of a handful of small ops per tensor (mini_asr,
    70 tensors, V = 4: 6.0 -> 3.8 ms per update in the loop, see benchmarks/README.md).
    """

    def __init__(self) -> None:
        self.copy: dict[torch.Tensor, torch.Tensor] = {}  # parameter -> its earlier .grad
        self.valid: set[torch.Tensor] = set()  # parameters whose copy is of this update
        # None until the first rank's increments: it then lives on their device (a zero made
        # on the host and copied there would cost a blocking copy per update)
        self.sum_sq: torch.Tensor | None = None
        self.factor_sq = 1.0

    def start(self, grad_factor: float = 1.0) -> None:
        """A new update: every accumulated gradient starts at zero. ``grad_factor`` turns the
        gradients it will see into true ones (float16: 1 / the loss scale, a power of two, so
        squaring and multiplying the float64 sums by it is exact: the probe measures the
        unscaled gradients, as if each had been unscaled before it was read)."""
        self.valid.clear()
        self.sum_sq = None
        self.factor_sq = grad_factor**2

    def observe(self, grads: Sequence[tuple[torch.Tensor, torch.Tensor]], keep: bool = True) -> None:
        """``grads``: (parameter, accumulated gradient) pairs, all where one virtual rank ends;
        ``keep``: copy them for the next virtual rank of this process (there is one)."""
        if not grads:
            return
        with torch.no_grad():
            fresh = [g for p, g in grads if p not in self.valid]  # no earlier rank touched them
            seen = [(self.copy[p], g) for p, g in grads if p in self.valid]
            increments = fresh
            if seen:
                increments = fresh + list(torch._foreach_sub([g for _, g in seen], [c for c, _ in seen]))
            increments_sq = _sum_sq(increments)
            if self.factor_sq != 1.0:  # float16's loss scale; float32/float64 run as before
                increments_sq = increments_sq * self.factor_sq
            self.sum_sq = increments_sq if self.sum_sq is None else self.sum_sq + increments_sq
            if keep:
                for p, g in grads:
                    if p not in self.copy:
                        self.copy[p] = torch.empty_like(g)
                torch._foreach_copy_([self.copy[p] for p, _ in grads], [g for _, g in grads])
                self.valid.update(p for p, _ in grads)

    def observe_last(self, grads: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """The process's last virtual rank: nothing follows, so nothing is copied (one virtual
        rank per process, P = V, needs no copy at all)."""
        self.observe(grads, keep=False)


def _sum_sq(tensors: Iterable[torch.Tensor], device: torch.device | None = None) -> torch.Tensor:
    """Sum of squares of every element, accumulated in float64 (one foreach norm per call);
    none: a zero on ``device``."""
    tensors = list(tensors)
    if not tensors:
        return torch.zeros((), dtype=torch.float64, device=device)
    norms = torch._foreach_norm(tensors, 2, dtype=torch.float64)
    return torch.stack(list(norms)).square().sum()


def _place(workload: Workload, device: torch.device) -> bool:
    """Ask ``workload`` to keep its data on ``device`` (its optional ``place``); whether it did."""
    place = getattr(workload, "place", None)
    if not callable(place):
        return False
    place(device)
    return True


def _to_device(batch: Any, device: torch.device) -> Any:
    if device.type == "cpu":
        return batch
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, Mapping):
        return {k: _to_device(v, device) for k, v in batch.items()}
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # a NamedTuple takes fields
        return type(batch)(*(_to_device(v, device) for v in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(_to_device(v, device) for v in batch)
    return batch
