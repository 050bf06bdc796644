"""The sweep file's schema. Validation happens here, once, where YAML becomes objects.

Shape checks (types, ranges, unknown keys) come from pydantic in strict mode, so ``"4"`` is not
a world size and ``true`` is not a number; the cross-field rules live in
``scalesweep.orchestrator.spec.load``.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from scalesweep.science.stats.decisions import DEFAULT_MARGIN
from scalesweep.science.stats.levels import DEFAULT_LEVELS, check_levels
from scalesweep.science.stats.plateau import DEFAULT_LAST_SHARE, DEFAULT_MIN_IMPROVEMENT
from scalesweep.trainables.config import Dtype

# allow_inf_nan=False: `.inf` epochs or lr are not numbers a user means
STRICT = ConfigDict(strict=True, extra="forbid", frozen=True, allow_inf_nan=False)

Backend = Literal["ddp", "simulate", "auto"]
ScalingRule = Literal["none", "linear", "sqrt", "sqrt_adam"]
WarmupRuleName = Literal["fixed", "scaled", "proportional"]
OptimizerRule = Literal["none", "beta2_halflife", "weight_decay_linear"]
#: the axes every study has; any other axis is a dotted path into optimizer/scheduler, or
#: training.batch_ramp (the one training setting that is an axis)
FIXED_AXES = ("world_size", "warmup_rule", "scaling_rule", "seed")
#: typed axes a study has only where its file gives them: left out, a trial's axes (its
#: names, params and plan) are what they were before the axis existed
RULE_AXES = ("optimizer_rule",)
FREE_AXIS_SECTIONS = ("optimizer", "scheduler")
TRAINING_AXES = ("training.batch_ramp",)
DISTRIBUTIONS = ("uniform", "loguniform", "randint")


class WorkloadSpec(BaseModel):
    """A workload of the protocol (``name``: built-in or ``package.module:function`` making a
    ``Workload``), or the user's own Ray Train loop (``train_loop``: ``package.module:function``,
    run as ``train_loop_per_worker``; docs/workloads.md, "Your own Ray Train loop")."""

    model_config = STRICT
    name: str | None = Field(default=None, min_length=1)
    #: a protocol workload's options; a train_loop's reach its config as ``options``
    options: dict[str, Any] = Field(default_factory=dict)
    train_loop: str | None = Field(default=None, min_length=1)
    #: a train_loop's training-set size: plan counts updates per epoch from it
    train_size: int | None = Field(default=None, ge=1)
    #: a train_loop's dev metrics (reported as dev_<name>) and which way is better
    metrics: dict[str, Literal["min", "max"]] | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> WorkloadSpec:
        if (self.name is None) == (self.train_loop is None):
            raise ValueError("give exactly one of name (a workload of the protocol) or "
                             "train_loop (your own Ray Train loop, 'package.module:function')")
        if self.name is not None:
            loop_only = [k for k in ("train_size", "metrics") if getattr(self, k) is not None]
            if loop_only:
                raise ValueError(f"{' and '.join(loop_only)} belong to a train_loop; a workload "
                                 "of the protocol states its own (train_size(), metrics)")
        return self

    @property
    def label(self) -> str:
        """What names the workload in plans, params and messages: its name or loop path."""
        return self.name if self.name is not None else str(self.train_loop)


class TrainingSpec(BaseModel):
    """Loop settings; anything left out comes from the recipe, then the workload's defaults."""

    model_config = STRICT
    per_worker_batch: int | None = Field(default=None, ge=1)
    accum_grad: int | None = Field(default=None, ge=1)
    epochs: float | None = Field(default=None, gt=0)
    max_updates: int | None = Field(default=None, ge=1)
    eval_every: int | None = Field(default=None, ge=1)  # updates
    eval_every_epochs: float | None = Field(default=None, gt=0)
    grad_clip: float | None = Field(default=None, gt=0)
    #: updates between checkpoints; 0 = only at the end; null (default) = on a wall-time
    #: cadence: at the first eval at least ``checkpoint_every_s`` after the last checkpoint
    checkpoint_every: int | None = Field(default=None, ge=0)
    checkpoint_every_s: float = Field(default=60.0, gt=0)
    dtype: Dtype = "float32"  # the loop's list: one place says which precisions exist
    #: auto: a fusable workload's micro-batches of an update run in a few passes grouped by
    #: length (the same gradient, faster); off: one pass per micro-batch (scalesweep.trainables.fusion)
    fuse: Literal["auto", "off"] = "auto"
    #: most samples per fused pass; null = from the device (CPU 64, GPU per_worker_batch)
    fuse_max_samples: int | None = Field(default=None, ge=1)
    divergence_threshold: float | None = Field(default=None, gt=0)
    #: a global batch that grows: "4:1,8:1" = 4 virtual ranks for 1 epoch, then 8 for 1, then
    #: the trial's world size (scalesweep.science.batch_ramp); also an axis
    #: (training.batch_ramp: [none, "4:1,8:1"])
    batch_ramp: str | None = None

    @field_validator("fuse", mode="before")
    @classmethod
    def _yaml_off(cls, v: Any) -> Any:
        # YAML 1.1 reads a bare `off` (and `on`) as a boolean
        return {False: "off", True: "auto"}.get(v, v) if isinstance(v, bool) else v

    @model_validator(mode="after")
    def _one_eval_cadence(self) -> TrainingSpec:
        if self.eval_every is not None and self.eval_every_epochs is not None:
            raise ValueError("give eval_every (updates) or eval_every_epochs, not both")
        return self


class ReferenceSpec(BaseModel):
    """Where base lr and warmup were tuned: a world size or a global batch."""

    model_config = STRICT
    world_size: int | None = Field(default=None, ge=1)
    global_batch: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _exactly_one(self) -> ReferenceSpec:
        if (self.world_size is None) == (self.global_batch is None):
            raise ValueError("give exactly one of world_size or global_batch")
        return self


class TargetSpec(BaseModel):
    """The dev-metric value that counts as converged: absolute, or relative to the baseline's best."""

    model_config = STRICT
    metric: str = "dev_loss"
    value: float | None = None
    relative_to_baseline: float | None = Field(default=None, ge=0)
    smoothing: float = Field(default=0.0, ge=0, lt=1)
    #: d: a paired epochs ratio whose interval lies in [1/(1+d), 1+d] is "equivalent"
    #: (docs/design.md §4, "Decisions")
    equivalence_margin: float = Field(default=DEFAULT_MARGIN, gt=0, lt=1)
    #: time to quality: the ratio at each target best · (1 + level) of the baseline arm
    levels: list[float] = Field(default_factory=lambda: list(DEFAULT_LEVELS), min_length=1)

    @field_validator("levels")
    @classmethod
    def _levels(cls, levels: list[float]) -> list[float]:
        check_levels(levels)
        return levels

    @model_validator(mode="before")
    @classmethod
    def _no_per_seed(cls, data: Any) -> Any:
        if isinstance(data, dict) and "per_seed" in data:
            raise ValueError(f"per_seed: {data['per_seed']!r} is no longer accepted: a baseline seed "
                             "must not set its own pair's target; relative targets are cross-fitted "
                             "from the baseline's other seeds (docs/design.md §4, 'Target')")
        return data

    @model_validator(mode="after")
    def _exactly_one(self) -> TargetSpec:
        if (self.value is None) == (self.relative_to_baseline is None):
            raise ValueError("give exactly one of value or relative_to_baseline")
        return self


#: search.scheduler, the old name of search.trial_scheduler: accepted for one release, with
#: TRIAL_SCHEDULER_RENAMED logged at load (issue 49: `scheduler` is the lr schedule's name)
OLD_TRIAL_SCHEDULER_KEY = "scheduler"
TRIAL_SCHEDULER_RENAMED = ("search.scheduler is deprecated and will be refused in the next "
                           "release: use search.trial_scheduler (Tune's trial scheduler, fifo or "
                           "asha); `scheduler` is the lr schedule's section")


class SearchSpec(BaseModel):
    model_config = STRICT
    type: Literal["grid", "random"] = "grid"
    samples: int | None = Field(default=None, ge=1)
    seed: int = 0
    #: Tune's trial scheduler; asha: its early stopping for large searches
    trial_scheduler: Literal["fifo", "asha"] = "fifo"

    @model_validator(mode="before")
    @classmethod
    def _old_trial_scheduler_key(cls, data: Any) -> Any:
        if not isinstance(data, dict) or OLD_TRIAL_SCHEDULER_KEY not in data:
            return data
        if "trial_scheduler" in data:
            raise ValueError("give trial_scheduler only: scheduler is its deprecated name")
        # load_sweep logs TRIAL_SCHEDULER_RENAMED, once per load
        out = {k: v for k, v in data.items() if k != OLD_TRIAL_SCHEDULER_KEY}
        return {**out, "trial_scheduler": data[OLD_TRIAL_SCHEDULER_KEY]}

    @model_validator(mode="after")
    def _samples_for_random(self) -> SearchSpec:
        if self.type == "random" and self.samples is None:
            raise ValueError("random search needs samples (how many trials to draw)")
        if self.type == "grid" and self.samples is not None:
            raise ValueError("samples is for random search; grid runs every combination")
        return self


class ElasticSpec(BaseModel):
    """A ddp trial that goes on with fewer workers when some are lost (Ray Train V2 elastic
    scaling); its updates depend on V only, so they are the ones it would have made anyway."""

    model_config = STRICT
    min_workers: int = Field(ge=1)


class ResourcesSpec(BaseModel):
    model_config = STRICT
    cpus_per_worker: float = Field(default=1.0, gt=0)
    gpus_per_worker: float = Field(default=0.0, ge=0)
    max_concurrent_trials: int | None = Field(default=None, ge=1)
    #: GiB of memory each worker (a simulate trial's process, each ddp worker) reserves from Ray
    #: and may hold; past it the trial fails naming memory. None: no reservation, no limit
    memory_per_worker: float | None = Field(default=None, gt=0)
    elastic: ElasticSpec | None = None
    #: an arm's seeds of one round trained together in one trial process, at most this many
    #: (scalesweep.trainables.seed_fusion; docs/design.md, "Fused seeds"); 1: one seed each
    seeds_per_trial: int = Field(default=1, ge=1)


class Axes(BaseModel):
    """The grid. Fixed axes are typed; any other key is ``optimizer.<field>`` or
    ``scheduler.<field>`` with a list of values (or, for random search, a distribution)."""

    model_config = ConfigDict(strict=True, extra="allow", frozen=True, allow_inf_nan=False)
    world_size: list[int] = Field(min_length=1)
    warmup_rule: list[WarmupRuleName | int] = Field(default=["fixed"], min_length=1)
    #: a rule's name, or a number > 0: the lr factor itself (what `solve` found, to verify)
    scaling_rule: list[ScalingRule | float] = Field(default=["none"], min_length=1)
    seed: list[int] = Field(default=[0], min_length=1)
    #: Adam's beta2 or AdamW's weight decay scaled with the batch, beside the lr rule
    #: (scalesweep.science.scaling.optimizer_hyperparameters); None: not an axis (none)
    optimizer_rule: list[OptimizerRule] | None = Field(default=None, min_length=1)

    @field_validator("world_size")
    @classmethod
    def _positive_unique(cls, v: list[int]) -> list[int]:
        bad = [x for x in v if x < 1]
        if bad:
            raise ValueError(f"world sizes must be at least 1, but got {bad}")
        if len(set(v)) != len(v):
            raise ValueError("world sizes must not repeat")
        return v

    @field_validator("warmup_rule")
    @classmethod
    def _explicit_warmups(cls, v: list[str | int]) -> list[str | int]:
        bad = [x for x in v if isinstance(x, int) and x < 0]
        if bad:
            raise ValueError(f"explicit warmups are update counts >= 0, but got {bad}")
        return v

    @field_validator("scaling_rule", mode="before")
    @classmethod
    def _factors(cls, v: Any) -> Any:
        if not isinstance(v, list):
            return v
        bad = [x for x in v if isinstance(x, int | float) and not isinstance(x, bool)
               and not (math.isfinite(x) and x > 0)]
        if bad:
            raise ValueError(f"an explicit lr factor must be a number > 0, but got {bad}")
        # strict mode takes no int for a float: an explicit factor of 2 is 2.0
        return [float(x) if isinstance(x, int) and not isinstance(x, bool) else x for x in v]

    def free_axes(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class ProjectionSpec(BaseModel):
    """Measured seconds per epoch of the real job per world size, so the report can project
    every trial's epochs to target onto that cluster's wall clock."""

    model_config = STRICT
    #: world size (an integer key) -> seconds per epoch measured there
    seconds_per_epoch: dict[Annotated[int, Field(ge=1)], Annotated[float, Field(gt=0)]] = Field(
        min_length=1)
    label: str = Field(min_length=1)  # where the timings come from, shown beside the projection


class ReferenceJobSpec(BaseModel):
    """The real job a study stands in for, so `plan` can set the study's regime (warmup share,
    updates, lr at the end, samples) beside the job's (docs/design.md §4.3, "Regime"). What the
    recipe holds (batch, accumulation, epochs, warmup) is taken from it; given here as well,
    it must agree."""

    model_config = STRICT
    label: str = Field(min_length=1)
    #: training samples of the real job (utterances, sequences, images)
    dataset_size: int = Field(ge=1)
    #: the study's world size (an integer key) -> GPUs of the real job it stands for
    gpus: dict[Annotated[int, Field(ge=1)], Annotated[int, Field(ge=1)]] = Field(min_length=1)
    epochs: float | None = Field(default=None, gt=0)
    per_gpu_batch: int | None = Field(default=None, ge=1)
    accum_grad: int | None = Field(default=None, ge=1)
    #: the job's warmup at its reference (the study's warmup rules are applied to it)
    warmup_steps: int | None = Field(default=None, ge=0)


class PlateauSpec(BaseModel):
    """Has the baseline plateaued (docs/study.md, "Has the baseline plateaued")? The last
    ``last_share`` of the run must improve the baseline arm's best ``metric`` by less than
    ``min_improvement`` of it; ``run`` and the report say whether it did."""

    model_config = STRICT
    #: a metric the workload logs; None: the target's
    metric: str | None = Field(default=None, min_length=1)
    last_share: float = Field(default=DEFAULT_LAST_SHARE, gt=0, lt=1)
    min_improvement: float = Field(default=DEFAULT_MIN_IMPROVEMENT, gt=0, lt=1)


class ReplicatesSpec(BaseModel):
    """Seeds added where they decide (docs/design.md §4, "Adaptive seeds"): every arm runs
    ``min`` seeds, then arms still not resolved against the baseline (and the baseline) get
    ``step`` more at a time, up to ``max``. The seeds are ``first_seed``, ``first_seed`` + 1, ...:
    another block of seeds is another independent draw of the whole study."""

    model_config = STRICT
    min: int = Field(ge=2)
    max: int = Field(ge=2)
    step: int = Field(default=1, ge=1)
    first_seed: int = Field(default=0, ge=0)

    @model_validator(mode="after")
    def _ordered(self) -> ReplicatesSpec:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) must be at most max ({self.max})")
        return self


class SweepSpec(BaseModel):
    model_config = STRICT
    name: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
    description: str | None = None
    #: the parent run id of the study whose prediction this sweep checks (``predict --verify``
    #: writes it): its parent run is tagged, and ``predict --experiment`` passes it over
    verifies: str | None = Field(default=None, pattern=r"^[0-9a-f]{32}$")
    #: the search parent run of the ``solve`` whose candidates this sweep verifies (``solve``
    #: writes it into verify.yaml): every run of it, a rerun with new seeds too, is tagged, and
    #: its report shows the search
    solve_search: str | None = Field(default=None, pattern=r"^[0-9a-f]{32}$")
    workload: WorkloadSpec
    recipe: str | None = None
    training: TrainingSpec = TrainingSpec()
    optimizer: dict[str, Any] | None = None
    scheduler: dict[str, Any] | None = None
    reference: ReferenceSpec | None = None
    target: TargetSpec
    baseline: dict[str, Any] | None = None
    backend: Backend = "simulate"
    physical_workers: int | Literal["auto"] = "auto"
    search: SearchSpec = SearchSpec()
    axes: Axes
    exclude: list[dict[str, Any]] = Field(default_factory=list)
    resources: ResourcesSpec = ResourcesSpec()
    stop_at_target: bool = False
    max_failures: int = Field(default=2, ge=0)
    storage_path: str | None = None
    projection: ProjectionSpec | None = None
    replicates: ReplicatesSpec | None = None
    reference_job: ReferenceJobSpec | None = None
    plateau: PlateauSpec = PlateauSpec()
    #: stop each trial once no later eval can change a decision (scalesweep/science/stats/curtail.py)
    curtail: bool = False

    @field_validator("physical_workers")
    @classmethod
    def _positive(cls, v: int | str) -> int | str:
        if isinstance(v, int) and v < 1:
            raise ValueError(f"must be at least 1 or 'auto', but got {v}")
        return v
