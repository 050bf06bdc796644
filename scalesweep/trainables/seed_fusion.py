"""Fused seeds (issue 51, item 1; ``resources.seeds_per_trial``, run by
:func:`scalesweep.trainables.trial_driver.train_fused`): one process trains
K seeds of one arm at once, each seed making exactly the updates, dropout masks, data order
and evaluations of its solo trial (:mod:`scalesweep.trainables.loop`, simulate, P = 1).

Why it can be exact. Within an arm the seeds share everything but ``seed``, and the seed
enters a trial in three places only: torch's RNG before ``build_model`` (the initial
parameters), the sampler's shuffle (:class:`~scalesweep.trainables.sharding.Sharding`) and the
per-pass reseeding (:func:`~scalesweep.trainables.stepping.reseed_pass`) that fixes dropout
masks. So: each seed's model is built as its solo trial builds it and the K are stacked
(``torch.func.stack_module_state``); each seed keeps its own sharding; and one pass runs the
seeds' micro-batches of the same (virtual rank, micro-batch) slot through ``vmap`` over the
stacked parameters. The optimizers allowed (Adam, AdamW, SGD) act element-wise and the lr and
betas are the same for every seed of an arm, so one optimizer over the stacked tensors makes
each seed's step; gradient clipping, which reads a global norm, is done per seed here.

What breaks exactness and how it is met:

* Dropout under ``vmap`` would draw one mask for the K seeds from the global RNG. Instead a
  torch-function mode (:class:`_SeedDraws`) takes over ``F.dropout`` and the dropout of
  ``F.scaled_dot_product_attention``, and draws each seed's mask from its own
  ``torch.Generator``, set to the state the solo trial's reseeding gives torch's RNG, with
  the shape the tensor has in the solo trial: a mask's bits depend on its shape (not only on
  the generator), and a fused batch is padded to the longest of the K seeds' batches, so a
  seed's mask is drawn at its solo length and padded. Any other draw inside ``vmap`` fails
  (``randomness="error"``) rather than silently differing.
* Padding: the seeds' batches of one slot differ in length; they are padded alike (a
  :class:`Padder` per workload). A sample's loss ignores padding in a ``fusable`` workload,
  which is also what fused virtual ranks rely on.
* A seed that stops (target reached, diverged, or ``should_stop``) leaves the stack: its slice
  is removed from the parameters and from the optimizer state; the others are untouched.

The noise scale (V > 1) is measured as the loop measures it, per seed: at every update, or
every ``NOISE_EVERY``-th with fused passes, where that update runs its virtual-rank passes;
each seed's sum over virtual ranks of its gradient increments' squared norms and its whole
gradient's, before clipping. As in the loop, an update reads nothing on the host: every seed's
losses and a probe's norms stay on the device until the next report or ``DIVERGENCE_EVERY``-th
update, are read there in one copy and folded in update order, so a divergence is seen where
the loop sees it, whichever update in between diverged.

Checkpoints: at the loop's cadence, each reporting seed's solo checkpoint (the loop's format:
its parameters, its slice of the optimizer state, its progress), so the loop resumes a seed
alone from it, and ``train_seeds(resume_from=...)`` goes on with K seeds fused from theirs when
all are after the same update: a fused trial that Tune retries does
(:func:`~scalesweep.trainables.trial_driver.train_fused`, which also carries each seed's newest
checkpoint into every later one).

Not covered yet (see the issue): float16's GradScaler (one scale for K seeds would skip every
seed's update when one overflows), batch-size ramps, ``objective`` scores, P > 1, GPUs.
"""

from __future__ import annotations

import contextlib
import math
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.func import functional_call, stack_module_state, vmap
from torch.nn import functional as F
from torch.overrides import TorchFunctionMode

from scalesweep.mlflow_names import STATUS_TAG, TRAIN_SECONDS_METRIC
from scalesweep.science import schedules
from scalesweep.science.noise_scale import EMA_DECAY, NoiseScale
from scalesweep.science.stats.convergence import EvalPoint, first_crossing
from scalesweep.trainables import checkpointing, fusion, stepping
from scalesweep.trainables import workloads as workload_registry
from scalesweep.trainables.config import TrialConfig
from scalesweep.trainables.loop import DIVERGENCE_EVERY, EVAL_BATCH, NOISE_EVERY
from scalesweep.trainables.precision import PARAM_DTYPES
from scalesweep.trainables.sharding import Sharding
from scalesweep.trainables.stepping import build_optimizer
from scalesweep.trainables.workloads.base import Workload

__all__ = ["Padder", "SeedOutcome", "padder_for", "train_seeds"]

#: ``on_report(seed, metrics, checkpoint_dir)``: a seed's report, as its solo trial's
#: ``on_report`` gets it; ``checkpoint_dir`` (or None) comes with the last report of an update
#: that checkpoints: a directory holding, per seed that reported a checkpoint then, its solo
#: trial's checkpoint under the seed's name (it exists only during the call)
SeedReportFn = Callable[[int, dict[str, Any], str | None], None]
#: ``should_stop(seed, metrics) -> bool``: after a seed's report, end that seed (what a Tune
#: scheduler's early stop does to a solo trial)
StopFn = Callable[[int, Mapping[str, Any]], bool]

_Params = dict[str, torch.Tensor]


# -- padding the seeds' batches alike ---------------------------------------------------------


class Padder:
    """Stacks the K seeds' batches of one slot into one batch with a leading seed dimension.

    ``solo_sizes`` says, per seed, which padded sizes inside the model stand for that seed's
    own (solo) size: {fused size: solo size}; ``mask_dims`` which dims of a dropout mask of a
    given rank are the padded ones. This default suits batches that are tensors, or tuples of
    tensors, of equal shapes across seeds (no padding)."""

    #: rank of a dropout mask -> its dims that padding lengthens
    mask_dims: Mapping[int, tuple[int, ...]] = {}

    def stack(self, batches: Sequence[Any]) -> tuple[Any, list[dict[int, int]]]:
        return _stack_same(batches), [{} for _ in batches]


def _stack_same(batches: Sequence[Any]) -> Any:
    first = batches[0]
    if isinstance(first, torch.Tensor):
        if any(b.shape != first.shape for b in batches):
            raise ValueError("the seeds' batches differ in shape: this workload needs a Padder")
        return torch.stack(list(batches))
    if isinstance(first, tuple):
        fields = [_stack_same([b[i] for b in batches]) for i in range(len(first))]
        return type(first)(*fields) if hasattr(first, "_fields") else tuple(fields)
    raise TypeError(f"cannot stack batches of type {type(first).__name__}: this workload needs a Padder")


class _SpeechPadder(Padder):
    """mini_asr: frames and tokens padded to the longest of the seeds; inside the model the
    padded length is the subsampled one, T' (every dropout sits after the subsampling)."""

    # [B, T', d] after the embedding, in the FFNs and the convolution module; [B, H, T', T']
    # for the attention probabilities
    mask_dims: Mapping[int, tuple[int, ...]] = {3: (1,), 4: (2, 3)}

    def stack(self, batches: Sequence[Any]) -> tuple[Any, list[dict[int, int]]]:
        from scalesweep.trainables.workloads.mini_asr import SpeechBatch, subsampled_length

        frames = max(int(b.feats.shape[1]) for b in batches)
        tokens = max(int(b.tokens.shape[1]) for b in batches)
        feats = torch.stack([F.pad(b.feats, (0, 0, 0, frames - b.feats.shape[1])) for b in batches])
        # padded tokens are the blank, as the workload pads them; CTC reads token_lens only
        toks = torch.stack([F.pad(b.tokens, (0, tokens - b.tokens.shape[1])) for b in batches])
        stacked = SpeechBatch(feats, torch.stack([b.feat_lens for b in batches]), toks,
                              torch.stack([b.token_lens for b in batches]))
        fused = int(subsampled_length(frames))
        return stacked, [{fused: int(subsampled_length(int(b.feats.shape[1])))} for b in batches]


def padder_for(workload: Workload) -> Padder:
    """The built-in workloads' padders; a workload may offer its own as ``seed_padder``."""
    own = getattr(workload, "seed_padder", None)
    if isinstance(own, Padder):
        return own
    if type(workload).__name__ == "MiniASR":
        return _SpeechPadder()
    return Padder()


# -- per-seed random draws inside vmap --------------------------------------------------------


@dataclass
class _DrawContext:
    generators: list[torch.Generator]
    solo_sizes: list[dict[int, int]]
    mask_dims: Mapping[int, tuple[int, ...]]


_ACTIVE: list[_DrawContext] = []  # the context of the pass being run (one at a time)


@torch.library.custom_op("scalesweep_seed_fusion::keep_mask", mutates_args=())
def _keep_mask(like: torch.Tensor, keep: float) -> torch.Tensor:
    # called only under vmap (the rule below); outside it there is no seed to draw for
    raise RuntimeError("seed_fusion's keep_mask runs only under vmap over the seeds")


def _keep_mask_vmap(info: Any, in_dims: tuple[int | None, None], like: torch.Tensor,
                    keep: float) -> tuple[torch.Tensor, int]:
    """Each seed's Bernoulli(keep) mask drawn as its solo trial draws it: from its generator, at
    its solo shape (the bits depend on the shape), then zero-padded to the fused shape."""
    ctx = _ACTIVE[-1]
    if len(ctx.generators) != info.batch_size:
        # a pass the loop does not reseed (fused virtual ranks: the workload promised no draws)
        raise RuntimeError("seed fusion: a dropout in a pass that has no per-seed generators")
    if in_dims[0] is None:
        like = like.expand(info.batch_size, *like.shape)
    else:
        like = like.movedim(in_dims[0], 0)
    shape = tuple(like.shape[1:])
    dims = ctx.mask_dims.get(len(shape), ())
    out = torch.zeros_like(like)
    for k, (gen, sizes) in enumerate(zip(ctx.generators, ctx.solo_sizes, strict=True)):
        solo = list(shape)
        for d in dims:
            if sizes and shape[d] not in sizes:
                raise ValueError(f"a dropout mask of shape {shape} is not padded along dim {d} as "
                                 "the padder says: the solo shape is unknown")
            solo[d] = sizes.get(shape[d], shape[d])
        # outside vmap's randomness check, which must stay "error" for any other draw but
        # would refuse this one too, though it draws from the seed's own generator
        with _outside_vmap():
            mask = torch.empty(solo, dtype=like.dtype, device=like.device).bernoulli_(keep, generator=gen)
        out[k][tuple(slice(0, n) for n in solo)] = mask
    return out, 0


torch.library.register_vmap(_keep_mask, _keep_mask_vmap)


def _outside_vmap() -> contextlib.AbstractContextManager[Any]:
    # the dispatch key whose kernels check vmap's randomness flag
    keys = torch._C.DispatchKeySet(torch._C.DispatchKey.FuncTorchVmapMode)
    guard: contextlib.AbstractContextManager[Any] = torch._C._ExcludeDispatchKeyGuard(keys)
    return guard


def _dropout(x: torch.Tensor, p: float) -> torch.Tensor:
    # as ATen's CPU dropout: nothing drawn at p = 0; noise = bernoulli(1 - p) / (1 - p), then x * noise
    if p == 0:
        return x
    if p == 1:
        return x * 0.0
    noise = _keep_mask(x.detach(), 1.0 - p).div(1.0 - p)
    return x * noise


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None,
               dropout_p: float, scale: float | None) -> torch.Tensor:
    """SDPA's math form, its dropout on the attention probabilities as ATen's math kernel does
    (one Bernoulli mask of shape [.., L, S])."""
    factor = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    scores = (q @ k.transpose(-2, -1)) * factor
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        else:
            scores = scores + attn_mask
    probs = torch.softmax(scores, dim=-1)
    return _dropout(probs, dropout_p) @ v


class _SeedDraws(TorchFunctionMode):
    """Routes the dropouts of a vmapped pass to per-seed draws (module doc)."""

    def __torch_function__(self, func: Any, types: Any, args: Sequence[Any] = (),
                           kwargs: Mapping[str, Any] | None = None) -> Any:
        kwargs = dict(kwargs or {})
        if func is F.dropout:
            x, p, training, inplace = _bind(args, kwargs, ("input", 0.5), ("p", 0.5),
                                            ("training", True), ("inplace", False))
            if not training or p == 0:
                return x
            if inplace:
                raise NotImplementedError("seed fusion: in-place dropout")
            return _dropout(x, float(p))
        if func is F.scaled_dot_product_attention:
            q, k, v, mask, p, causal, scale = _bind(
                args, kwargs, ("query", None), ("key", None), ("value", None), ("attn_mask", None),
                ("dropout_p", 0.0), ("is_causal", False), ("scale", None))
            # every call, dropout or not: vmap has no batching rule for CPU's flash kernel and
            # would loop over the seeds; the math form batches them
            if causal or kwargs.get("enable_gqa"):
                if p > 0:
                    raise NotImplementedError("seed fusion: causal or GQA attention with dropout")
            else:
                return _attention(q, k, v, mask, float(p), scale)
        elif func in (F.alpha_dropout, F.feature_alpha_dropout, F.dropout1d, F.dropout2d, F.dropout3d):
            raise NotImplementedError(f"seed fusion: {func.__name__} is not drawn per seed yet")
        return func(*args, **kwargs)


def _bind(args: Sequence[Any], kwargs: Mapping[str, Any], *names: tuple[str, Any]) -> list[Any]:
    return [args[i] if i < len(args) else kwargs.get(name, default)
            for i, (name, default) in enumerate(names)]


# -- the model over stacked parameters --------------------------------------------------------


class _Functional(nn.Module):
    """``base`` run with other parameters (a seed's, or all seeds' inside vmap), for the
    workload's ``loss``/``evaluate``, which take a module."""

    def __init__(self, base: nn.Module, params: _Params) -> None:
        super().__init__()
        self.base, self.params = base, params

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return functional_call(self.base, self.params, args, kwargs)


@dataclass
class _Seed:
    """One seed's own state: its trial config, sharding, and what its solo trial's Progress holds."""

    config: TrialConfig
    sharding: Sharding
    generator: torch.Generator = field(default_factory=torch.Generator)
    loss_sum: float = 0.0
    loss_count: int = 0
    target_evals: list[EvalPoint] = field(default_factory=list)
    last_report: dict[str, Any] = field(default_factory=dict)
    status: str = "running"
    noise: NoiseScale | None = None
    #: an update since the last read point diverged (the loop sees it at that read)
    diverged: bool = False


@dataclass(frozen=True)
class _PendingUpdate:
    """One update's values, left on the device until the next read point (as the loop's)."""

    losses: torch.Tensor  # [K] each live seed's summed loss
    norms: tuple[torch.Tensor, torch.Tensor] | None  # [K] each: a noise probe's squared norms
    global_batch: int
    world_size: int


@dataclass
class SeedOutcome:
    """A seed's final metrics (as its solo ``train`` returns them) and its final parameters."""

    metrics: dict[str, Any]
    state_dict: dict[str, torch.Tensor]


def train_seeds(
    config: TrialConfig,
    seeds: Sequence[int],
    *,
    on_report: SeedReportFn,
    should_stop: StopFn | None = None,
    workload: Workload | None = None,
    names: Mapping[int, str] | None = None,
    resume_from: Mapping[int, str | Path] | None = None,
) -> dict[int, SeedOutcome]:
    """Train ``seeds`` of the arm ``config`` describes (its own ``seed`` is ignored) in one
    process, each as its solo trial would; returns each seed's outcome. ``names``: each seed's
    trial name (its checkpoint's directory and config), else ``config``'s name;
    ``resume_from``: every seed's checkpoint (its solo trial's or its fused one's), all after
    the same update: the seeds go on from there, fused (a seed that had ended reports nothing)."""
    _check(config, seeds)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(PARAM_DTYPES[config.dtype])
    try:
        return _FusedSeeds(config, seeds, on_report, should_stop, workload, names or {},
                           resume_from).run()
    finally:
        torch.set_default_dtype(previous)


def _check(config: TrialConfig, seeds: Sequence[int]) -> None:
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be distinct and at least one, but got {list(seeds)}")
    unsupported = {
        "physical_workers > 1": config.physical_workers > 1, "a batch-size ramp": bool(config.batch_ramp),
        "an objective": config.objective is not None, "a GPU": config.use_gpu,
        f"dtype {config.dtype}": config.dtype not in ("float32", "float64"),
        "a user's train_loop": config.train_loop is not None,
    }  # fmt: skip
    found = [name for name, bad in unsupported.items() if bad]
    if found:
        raise NotImplementedError(f"seed fusion does not support {', '.join(found)} yet")


class _FusedSeeds:
    def __init__(self, config: TrialConfig, seeds: Sequence[int], on_report: SeedReportFn,
                 should_stop: StopFn | None, workload: Workload | None, names: Mapping[int, str],
                 resume_from: Mapping[int, str | Path] | None = None) -> None:
        self.config, self.on_report, self.should_stop = config, on_report, should_stop
        #: a checkpoint's directory per seed: its trial's name, else its seed
        self.dirnames = {seed: names.get(seed, f"s{seed}") for seed in seeds}
        self.workload = workload or workload_registry.make(config.workload, config.workload_options)
        self.padder = padder_for(self.workload)
        self.data = config.data_plan(self.workload.train_size())
        self.segment = self.data.segments[0]
        self.fused_passes = fusion.fuses(config, self.workload)
        self.pass_budget = fusion.pass_budget(config, torch.device("cpu"))
        self.metric_names = sorted(self.workload.metrics)
        self.device = torch.device("cpu")
        self.noise_every = NOISE_EVERY if self.fused_passes else 1
        self.seeds: dict[int, _Seed] = {}
        models = []
        for seed in seeds:
            cfg = config.model_copy(update={"seed": seed, "name": names.get(seed, config.name)})
            noise = None
            if config.world_size > 1:  # as the loop's: V = 1 has no small batch
                noise = NoiseScale(b_small=config.per_worker_batch * config.accum_grad,
                                   b_big=config.global_batch, decay=float(EMA_DECAY**self.noise_every))
            self.seeds[seed] = _Seed(cfg, Sharding(self.workload.train_size(), config.world_size,
                                                   config.per_worker_batch, config.accum_grad, seed),
                                     noise=noise)
            torch.manual_seed(seed)  # as the solo trial, right before its build_model
            models.append(self.workload.build_model())
        if any(b.numel() for m in models for b in m.buffers(recurse=True)
               if any(b is v for v in m.state_dict().values())):
            # persistent buffers (BatchNorm statistics) would have to be stacked and updated
            # per seed; none of the fusable workloads has one
            raise NotImplementedError("seed fusion: a model with persistent buffers")
        self.start, self.wall_s = 0, 0.0  # the update and the clock the run goes on from
        states = self._resume(models, resume_from) if resume_from is not None else None
        self.base = models[0]  # runs every seed's parameters (its own buffers are constants)
        params, _ = stack_module_state(models)
        stacked_state = None
        if states is not None:
            stacked_state = {name: {key: torch.stack([st[name][key] for st in states])
                                    if isinstance(v, torch.Tensor) and v.shape == params[name].shape[1:]
                                    else v for key, v in states[0][name].items()}
                             for name in params if name in states[0]}
        self._set_params(params, stacked_state)
        self.schedule = schedules.build(config.scheduler, config.optimizer.lr)

    def _resume(self, models: list[nn.Module], resume_from: Mapping[int, str | Path]
                ) -> list[dict[str, dict[str, Any]]]:
        """Load each seed's checkpoint into its model, its progress into its state; returns each
        seed's optimizer state by parameter name. A seed that had ended is dropped."""
        if set(resume_from) != set(self.seeds):
            raise ValueError(f"resume_from must give every seed's checkpoint: {sorted(self.seeds)}")
        states, updates, ended = [], set(), []
        for model, (seed, s) in zip(models, self.seeds.items(), strict=True):
            optimizer = build_optimizer(model.parameters(), self.config.optimizer)
            progress = checkpointing.load(resume_from[seed], config=s.config, model=model,
                                          optimizer=optimizer, data_position=self.data.done)
            updates.add(progress.update)
            by_param: dict[torch.Tensor, str] = {p: name for name, p in model.named_parameters()}
            states.append({by_param[p]: dict(st) for p, st in optimizer.state.items()})
            s.status, s.last_report = progress.status, dict(progress.last_report)
            s.target_evals = [EvalPoint(**e) for e in progress.target_evals]
            if s.noise is not None and progress.noise_scale:
                s.noise = NoiseScale.from_state(progress.noise_scale).with_decay(s.noise.decay)
            self.wall_s = max(self.wall_s, progress.wall_s)
            if progress.status != "running":
                ended.append(seed)
        if len(updates) != 1:
            raise ValueError(f"the seeds' checkpoints are after different updates {sorted(updates)}: "
                             "fused seeds go on in step")
        self.start = updates.pop()
        keep = [i for i, seed in enumerate(self.seeds) if seed not in ended]
        for seed in ended:  # finished before the restart: nothing to do, as the loop
            del self.seeds[seed]
        if not keep:
            raise ValueError("every seed had ended: nothing to resume")
        models[:] = [models[i] for i in keep]
        return [states[i] for i in keep]

    @property
    def live(self) -> list[int]:
        return list(self.seeds)  # in stack order: a stopped seed is deleted from both

    def _set_params(self, params: _Params, state: Mapping[str, dict[str, Any]] | None) -> None:
        self.params = params
        self.optimizer = build_optimizer(iter(params.values()), self.config.optimizer)  # type: ignore[arg-type]
        if state is not None:
            for name, p in params.items():
                if name in state:
                    self.optimizer.state[p] = state[name]

    # -- the run -----------------------------------------------------------------------------

    def run(self) -> dict[int, SeedOutcome]:
        outcomes: dict[int, SeedOutcome] = {}
        started = time.perf_counter() - self.wall_s
        last_checkpoint = time.perf_counter()
        pending: list[_PendingUpdate] = []
        for update in range(self.start + 1, self.config.total_updates + 1):
            lr, momentum = self._set_hyperparameters(update)
            pending.append(self._update(update))
            at_eval = self.data.eval_due(update)
            since = time.perf_counter() - last_checkpoint
            checkpoint = checkpointing.due(self.config, update, since, at_eval)
            if not (at_eval or checkpoint or update % DIVERGENCE_EVERY == 0):  # the loop's read points
                continue
            self._fold(pending)  # the one host read since the last read point
            pending.clear()
            reports: list[tuple[int, dict[str, Any], bool]] = []  # seed, metrics, with a checkpoint
            for seed in self.live:
                s = self.seeds[seed]
                diverged = s.diverged
                if not (at_eval or checkpoint or diverged):
                    continue
                metrics = self._metrics(s, update, lr, momentum, time.perf_counter() - started)
                status = "running"
                if diverged or not math.isfinite(metrics["dev_loss"]):
                    status = "diverged"
                elif self._reached_target(s):
                    status = "stopped"
                elif update == self.config.total_updates:
                    status = "completed"
                metrics[STATUS_TAG] = s.status = status
                s.last_report = metrics
                s.loss_sum, s.loss_count = 0.0, 0
                reports.append((seed, metrics, checkpoint or diverged or status != "running"))
            finished = self._report(reports, update, time.perf_counter() - started)
            if any(saved for _, _, saved in reports):
                last_checkpoint = time.perf_counter()
            for seed in finished:
                outcomes[seed] = self._outcome(seed, time.perf_counter() - started)
                self._drop(seed)
            if not self.seeds:
                break
        return outcomes

    def _report(self, reports: list[tuple[int, dict[str, Any], bool]], update: int,
                wall_s: float) -> list[int]:
        """The update's reports, the checkpoints of those that take one in a directory that
        comes with the last; returns the seeds that end here."""
        saving = [seed for seed, _, saved in reports if saved]
        directory = tempfile.mkdtemp(prefix="scalesweep-seeds-ckpt-") if saving else None
        finished = []
        try:
            for seed in saving:
                assert directory is not None
                self._save(seed, update, wall_s, f"{directory}/{self.dirnames[seed]}")
            for i, (seed, metrics, _) in enumerate(reports):
                self.on_report(seed, dict(metrics), directory if i == len(reports) - 1 else None)
                s = self.seeds[seed]
                if s.status == "running" and self.should_stop is not None and self.should_stop(seed, metrics):
                    s.status = "stopped"
                if s.status != "running":
                    finished.append(seed)
        finally:
            if directory is not None:
                shutil.rmtree(directory, ignore_errors=True)
        return finished

    def _save(self, seed: int, update: int, wall_s: float, directory: str) -> None:
        """``seed``'s checkpoint as its solo trial writes it after ``update``: its parameters in
        a model of its own, an optimizer over them holding its slice of the state, its progress;
        the loop resumes a solo trial from it."""
        s, k = self.seeds[seed], self.live.index(seed)
        model = self.base  # its own parameters are never read (functional_call), so they may hold the seed's
        with torch.no_grad():
            for name, p in model.named_parameters():
                p.copy_(self.params[name][k])
        optimizer = build_optimizer(model.parameters(), self.config.optimizer)
        for key, value in self.optimizer.param_groups[0].items():
            if key != "params":
                optimizer.param_groups[0][key] = value
        for name, p in model.named_parameters():
            stacked = self.params[name]
            optimizer.state[p] = {key: (v[k].clone() if v.shape == stacked.shape else v.clone())
                                  if isinstance(v, torch.Tensor) else v
                                  for key, v in self.optimizer.state.get(stacked, {}).items()}
        epoch, in_epoch = self.data.done(update)
        progress = checkpointing.Progress(
            update=update, epoch=epoch, update_in_epoch=in_epoch, wall_s=wall_s, status=s.status,
            last_report=dict(s.last_report), noise_scale={} if s.noise is None else s.noise.state(),
            target_evals=[asdict(e) for e in s.target_evals])
        Path(directory).mkdir()
        checkpointing.save(directory, config=s.config, model=model, optimizer=optimizer, progress=progress)

    def _outcome(self, seed: int, wall_s: float) -> SeedOutcome:
        k = self.live.index(seed)
        state = {name: p[k].detach().clone() for name, p in self.params.items()}
        return SeedOutcome({**self.seeds[seed].last_report, TRAIN_SECONDS_METRIC: wall_s}, state)

    def _drop(self, seed: int) -> None:
        """Take ``seed`` out of the stack: the others' parameters and optimizer state are
        copied as they are, so their next steps are those they would have made anyway."""
        k = self.live.index(seed)
        del self.seeds[seed]
        keep = [i for i in range(len(self.seeds) + 1) if i != k]
        params: _Params = {}
        state: dict[str, dict[str, Any]] = {}
        for name, p in self.params.items():
            params[name] = p.detach()[keep].clone().requires_grad_(True)
            old = self.optimizer.state.get(p, {})
            # per-element state (moments, momentum buffers) has the parameter's shape; Adam's
            # step count is one scalar, the same for every seed
            state[name] = {key: v[keep].clone() if isinstance(v, torch.Tensor) and v.shape == p.shape
                           else v for key, v in old.items()}
        if self.seeds:
            self._set_params(params, state)

    def _set_hyperparameters(self, update: int) -> tuple[float, float | None]:
        # as the loop's: the same for every seed of the arm
        position = self.data.position(update)
        lr = float(self.schedule.lr(position)) * self.segment.lr_multiplier
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        return lr, stepping.set_betas(self.optimizer, self.schedule.betas(position))

    def _fold(self, pending: Sequence[_PendingUpdate]) -> None:
        """The updates since the last read point, read in one copy and folded into each seed
        in update order, with the float arithmetic of a read at every update (so a seed's
        train loss, divergence and noise scale are its solo trial's)."""
        if not pending:
            return
        probes = [p.norms for p in pending if p.norms is not None]
        values = torch.cat([p.losses for p in pending] + [t for n in probes for t in n]).tolist()
        k = len(self.live)
        rows = iter(values[i * k:(i + 1) * k] for i in range(len(values) // k))
        losses = [next(rows) for _ in pending]
        for p, row in zip(pending, losses, strict=True):
            norms = (next(rows), next(rows)) if p.norms is not None else None
            for i, seed in enumerate(self.live):
                s = self.seeds[seed]
                s.loss_sum += row[i]
                s.loss_count += p.global_batch
                s.diverged = s.diverged or self._diverged(s, row[i] / p.global_batch)
                if norms is not None and s.noise is not None:
                    # P = 1: mean_v |g_v|^2 is V times the sum of the increments' squares (loop)
                    small_sq, big_sq = norms
                    s.noise.update(g_small_sq=small_sq[i] * p.world_size, g_big_sq=big_sq[i],
                                   b_big=p.global_batch)

    def _update(self, update: int) -> _PendingUpdate:
        """One optimizer update of every live seed; returns, on the device, each one's summed
        loss and, on an update that measures the noise scale, each one's (sum over virtual
        ranks of the squared norms of their gradient increments, squared norm of the whole
        gradient)."""
        self.optimizer.zero_grad(set_to_none=True)
        losses = torch.zeros(len(self.seeds), dtype=torch.float64, device=self.device)
        weight = 1.0 / self.segment.global_batch  # P = 1: the plain mean over the global batch
        probe = self.config.world_size > 1 and update % self.noise_every == 0
        small_sq = torch.zeros(len(self.seeds), dtype=torch.float64, device=self.device)
        before: dict[str, torch.Tensor] = {}  # each parameter's gradient where the last virtual rank left it
        for batches, draw, ends_rank in self._passes(update, fused=self.fused_passes and not probe):
            stacked, sizes = self.padder.stack(batches)
            per_sample = self._loss(stacked, sizes if draw else None)
            (per_sample.sum() * weight).backward()
            losses += per_sample.detach().double().sum(dim=1)
            if probe and ends_rank:
                small_sq += self._increments_sq(before)
        norms = None
        if probe:  # before clipping: the noise scale is a property of the gradients
            big_sq = self._sq_norms({name: p.grad for name, p in self.params.items() if p.grad is not None})
            norms = small_sq, big_sq
        if self.config.grad_clip is not None:
            self._clip(self.config.grad_clip)
        self.optimizer.step()
        return _PendingUpdate(losses, norms, self.segment.global_batch, self.segment.world_size)

    def _increments_sq(self, before: dict[str, torch.Tensor]) -> torch.Tensor:
        """Per seed, the squared norm of what the virtual rank just ended added to the
        gradient; ``before`` then holds the gradient as it leaves it."""
        with torch.no_grad():
            grads = {name: p.grad for name, p in self.params.items() if p.grad is not None}
            increments = {name: g - before[name] if name in before else g for name, g in grads.items()}
            before.update({name: g.clone() for name, g in grads.items()})
            return self._sq_norms(increments)

    @staticmethod
    def _sq_norms(tensors: Mapping[str, torch.Tensor | None]) -> torch.Tensor:
        """Per seed (the leading dim), the sum of squares of every element, in float64."""
        per_tensor = [torch.linalg.vector_norm(t.flatten(1), dim=1, dtype=torch.float64)
                      for t in tensors.values() if t is not None]
        return torch.stack(per_tensor).square().sum(dim=0)

    def _passes(self, update: int, *, fused: bool) -> Iterator[tuple[list[Any], bool, bool]]:
        """Each slot's batches, one per seed; whether the pass may draw (then every seed's
        generator is set as its solo trial's reseeding sets torch's RNG); whether it is a
        virtual rank's last pass."""
        vranks = range(self.segment.world_size)
        per_seed = [stepping.micro_batches(self.seeds[s].sharding, vranks, update) for s in self.live]
        if fused:  # as the loop's fused passes, seed by seed; a fusable loss draws nothing
            plans = []
            for mbs in per_seed:
                indices = [i for mb in mbs for i in mb.indices]
                plans.append(fusion.plan_passes(indices, self.pass_budget,
                                                fusion.sample_lengths(self.workload, indices)))
            for group in zip(*plans, strict=True):
                yield [self.workload.train_batch(g) for g in group], False, False
            return
        for slot in zip(*per_seed, strict=True):
            for seed, mb in zip(self.live, slot, strict=True):
                s = self.seeds[seed]
                stepping.reseed_pass(self.device, s.config.seed, update, mb)
                s.generator.set_state(torch.default_generator.get_state())
            mb = slot[0]  # every seed's slot is the same (virtual rank, micro-batch)
            yield ([self.workload.train_batch(m.indices) for m in slot], True,
                   mb.last or mb.index == self.config.accum_grad - 1)

    def _loss(self, stacked: Any, sizes: list[dict[int, int]] | None) -> torch.Tensor:
        """Per-sample losses [K, n] of one vmapped pass over the stacked parameters."""
        workload, base = self.workload, self.base

        def one(params: _Params, batch: Any) -> torch.Tensor:
            return workload.loss(_Functional(base, params), batch)

        # a pass that may not draw gets no generators: a dropout there fails in _keep_mask_vmap
        _ACTIVE.append(_DrawContext([self.seeds[s].generator for s in self.live] if sizes else [],
                                    sizes or [], self.padder.mask_dims))
        try:
            with _SeedDraws():
                out: torch.Tensor = vmap(one, randomness="error")(self.params, stacked)
        finally:
            _ACTIVE.pop()
        return out

    def _clip(self, max_norm: float) -> None:
        """clip_grad_norm_ per seed: each seed's global norm over its own slices."""
        grads = [p.grad for p in self.params.values() if p.grad is not None]
        if not grads:
            return
        sq = torch.stack([g.flatten(1).norm(dim=1) for g in grads]).square().sum(dim=0)
        coef = torch.clamp(max_norm / (sq.sqrt() + 1e-6), max=1.0)
        for g in grads:
            g.mul_(coef.view(-1, *([1] * (g.dim() - 1))).to(g.dtype))

    # -- evaluation and reports --------------------------------------------------------------

    def _evaluate(self, s: _Seed, update: int) -> dict[str, float]:
        """As the loop's, seed by seed: evaluate() may run Python on the outputs (greedy CTC
        decoding), which vmap cannot."""
        k = self.live.index(s.config.seed)
        stepping.reseed_eval(self.device, s.config.seed, update)
        model = _Functional(self.base, {n: p[k] for n, p in self.params.items()})
        values = torch.zeros(len(self.metric_names), dtype=torch.float64)
        count = 0
        self.base.eval()
        try:
            with torch.no_grad():
                for batch in self.workload.dev_batches(EVAL_BATCH):
                    out = self.workload.evaluate(model, batch)
                    for i, name in enumerate(self.metric_names):
                        values[i] += out[name].detach().double().sum()
                    count += len(out["loss"])
        finally:
            self.base.train()
        values /= count
        return {stepping.dev_key(n): float(v) for n, v in zip(self.metric_names, values, strict=True)}

    def _metrics(self, s: _Seed, update: int, lr: float, momentum: float | None,
                 wall_s: float) -> dict[str, Any]:
        metrics: dict[str, Any] = {
            **stepping.report_keys(update, samples_seen=self.data.samples(update),
                                   epoch=self.data.epoch(update)),
            "global_batch": self.segment.global_batch,
            "wall_s": wall_s,  # the K seeds' shared clock
            "train_loss": s.loss_sum / s.loss_count,
            **self._evaluate(s, update),
            "lr": lr,
        }
        if momentum is not None:
            metrics["momentum"] = momentum
        if s.noise is not None:
            metrics["noise_scale"] = s.noise.value
        metric = self.config.target_metric
        if metric is not None and metric in metrics:
            s.target_evals.append(EvalPoint(update=float(update), samples_seen=float(metrics["samples_seen"]),
                                            epoch=float(metrics["epoch"]), wall_s=wall_s,
                                            value=float(metrics[metric])))
        return metrics

    def _diverged(self, s: _Seed, loss: float) -> bool:
        threshold = self.config.divergence_threshold
        return not math.isfinite(loss) or (threshold is not None and loss > threshold)

    def _reached_target(self, s: _Seed) -> bool:
        target = self.config.stop_at_target
        if target is None or not s.target_evals:
            return False
        return first_crossing(s.target_evals, target.value, target.mode, target.smoothing) is not None
