"""What one trial needs to train: the contract between the orchestrator and the loop.

Everything here is already resolved by the planner (scaling rule applied to the lr fields,
warmup rule applied to the warmup field, totals counted), so the loop does no arithmetic about
the study itself. It travels through Ray to every worker as JSON (``model_dump(mode="json")``,
which Tune configs need); the schedule and the optimizer are a ``ScheduleSpec`` and an
``OptimizerSpec`` both sides of it, their JSON forms ``{"type": ..., **params}`` as before,
restored without being judged again.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PlainSerializer, PlainValidator, model_validator

from scalesweep.science.batch_ramp import DataPlan
from scalesweep.science.optimizers import OptimizerSpec
from scalesweep.science.schedules import ScheduleSpec

Backend = Literal["ddp", "simulate"]
#: float32/float64: the whole trial in that dtype; bfloat16/float16: float32 parameters and
#: optimizer state, forward and loss under torch.autocast (float16 with a GradScaler), see
#: scalesweep.trainables.precision
Dtype = Literal["float32", "float64", "bfloat16", "float16"]


def _schedule_in(value: Any) -> ScheduleSpec:
    # the record itself, or its JSON form back from Ray, a Tune state or a test (not judged
    # again: the planner resolved it)
    if isinstance(value, ScheduleSpec):
        return value
    if isinstance(value, Mapping):
        return ScheduleSpec.from_json(value)
    raise ValueError(f"scheduler must be a ScheduleSpec or its JSON form, but got {value!r}")


#: a trial's schedule: a ScheduleSpec in Python, ``{"type": ..., **params}`` in JSON
ScheduleField = Annotated[ScheduleSpec, PlainValidator(_schedule_in),
                          PlainSerializer(ScheduleSpec.as_dict, return_type=dict[str, Any])]


def _optimizer_in(value: Any) -> OptimizerSpec:
    # as _schedule_in
    if isinstance(value, OptimizerSpec):
        return value
    if isinstance(value, Mapping):
        return OptimizerSpec.from_json(value)
    raise ValueError(f"optimizer must be an OptimizerSpec or its JSON form, but got {value!r}")


#: a trial's optimizer: an OptimizerSpec in Python, ``{"type": ..., "lr": ..., ...}`` in JSON
OptimizerField = Annotated[OptimizerSpec, PlainValidator(_optimizer_in),
                           PlainSerializer(OptimizerSpec.as_dict, return_type=dict[str, Any])]


def loop_schedule(config: Mapping[str, Any]) -> ScheduleSpec:
    """The planned schedule in the ``config`` a user's loop receives: ``scheduler``, the spec's
    JSON form; in a config made before ``scheduler`` was the spec (a sweep resumed from an older
    version, where ``scheduler`` is the name), its ``schedule``. Not judged again."""
    spec = config.get("scheduler")
    return ScheduleSpec.from_json(spec if isinstance(spec, Mapping) else config["schedule"])


class StopAtTarget(BaseModel):
    """End the trial early once ``metric`` reaches ``value`` (``mode`` says which side), read
    as the study reads a crossing: through an EMA of weight ``smoothing`` on the past. A trial
    stopped where only the raw eval crossed would end before its own crossing, and the study
    would count it as never reaching."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    metric: str  # a reported key, e.g. "dev_loss"
    value: float
    mode: Literal["min", "max"] = "min"
    smoothing: float = Field(default=0.0, ge=0, lt=1)


class SearchObjective(BaseModel):
    """A `solve` candidate's score, reported with every eval as ``solve_ratio``
    (scalesweep.science.solve): its epochs to ``target`` over ``baseline_epochs``, the
    baseline's on the paired seed; a bound while the target is not reached."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    metric: str  # a reported key, e.g. "dev_loss"
    target: float
    mode: Literal["min", "max"] = "min"
    baseline_epochs: float = Field(gt=0)
    smoothing: float = Field(default=0.0, ge=0, lt=1)


class RampStage(BaseModel):
    """A stage of a batch-size ramp before the trial's own world size, resolved by the planner
    (scalesweep.science.batch_ramp)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    world_size: int = Field(ge=1)
    epochs: int = Field(ge=1)
    lr_multiplier: float = Field(gt=0)  # on the lr the trial's schedule gives
    clock: float = Field(gt=0)  # schedule position gained per update (warmup_rule scaled: B_s / B)
    eval_every: int = Field(ge=1)  # updates between evaluations in this stage


class TrialConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str  # readable and unique within the sweep, e.g. "ws16-warmup6250-linear-s0"
    workload: str  # built-in name or "package.module:function"
    workload_options: dict[str, Any] = Field(default_factory=dict)
    #: the user's own Ray Train loop ("package.module:function", then also ``workload``):
    #: run as train_loop_per_worker instead of the built-in loop (scalesweep.trainables.user_loop)
    train_loop: str | None = None

    world_size: int = Field(ge=1)  # V: virtual ranks; fixes sharding and the global batch
    #: P: processes, at most world_size; each plays V // P virtual ranks, the first V mod P one
    #: more (scalesweep.trainables.sharding.virtual_ranks)
    physical_workers: int = Field(ge=1)
    #: elastic (ddp): Ray Train may run the trial on as few as this many workers, the loop
    #: taking P from the live group (the updates depend on V only); None = exactly P
    min_workers: int | None = Field(default=None, ge=1)
    #: a global batch that grows: these stages first (world sizes rising below world_size),
    #: then world_size for the rest of total_updates; empty = world_size throughout
    batch_ramp: tuple[RampStage, ...] = ()
    backend: Backend = "simulate"
    use_gpu: bool = False

    per_worker_batch: int = Field(ge=1)  # samples per micro-batch per virtual rank
    accum_grad: int = Field(default=1, ge=1)  # micro-batches per virtual rank per update

    #: science.optimizers.resolve's record; ``lr`` is the trial's, after the lr rule
    optimizer: OptimizerField
    #: the schedule as science.schedules.resolve made it, the rules applied (after ``lr``)
    scheduler: ScheduleField
    grad_clip: float | None = None  # max global grad norm; None = no clipping

    total_updates: int = Field(ge=1)
    eval_every: int = Field(ge=1)  # updates between dev evaluations (and one at the end)
    checkpoint_every: int = Field(default=0, ge=0)  # updates; 0 = only at the end
    #: also checkpoint at the first eval at least this many seconds after the last checkpoint
    #: (None = no wall-time cadence). Checkpoints are not free (a state file, Ray persisting it,
    #: a Tune state snapshot): on a fast loop one per eval cost 9 % of the loop's time.
    checkpoint_every_s: float | None = Field(default=None, gt=0)
    seed: int = 0
    dtype: Dtype = "float32"
    #: "auto": a process runs its micro-batches of an update in as few passes as
    #: ``fuse_max_samples`` allows, grouped by length, when the workload is fusable
    #: (scalesweep.trainables.fusion); "off": one pass per micro-batch, as real DDP ranks do
    fuse: Literal["auto", "off"] = "auto"
    #: most samples per fused pass; None = from the device (scalesweep.trainables.fusion.pass_budget)
    fuse_max_samples: int | None = Field(default=None, ge=1)
    stop_at_target: StopAtTarget | None = None
    #: a `solve` candidate: report its score with every eval
    objective: SearchObjective | None = None
    #: loss above this (or non-finite) ends the trial as "diverged"
    divergence_threshold: float | None = None
    #: GiB each worker (a simulate trial's process, each ddp worker) may hold resident; past it
    #: the trial fails naming memory (scalesweep.trainables.memory_limit). None: no limit
    memory_per_worker_gb: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _one_target_metric(self) -> TrialConfig:
        stop, objective = self.stop_at_target, self.objective
        if stop is not None and objective is not None and stop.metric != objective.metric:
            raise ValueError(f"stop_at_target.metric {stop.metric!r} must be objective.metric "
                             f"{objective.metric!r}: the loop keeps one target metric's evals")
        return self

    @property
    def target_metric(self) -> str | None:
        """The metric whose evals the loop keeps: a candidate's objective's, or the stop's."""
        if self.objective is not None:
            return self.objective.metric
        return None if self.stop_at_target is None else self.stop_at_target.metric

    @property
    def virtual_per_physical(self) -> int:
        """The most virtual ranks one worker plays, ceil(V / P): the slowest worker's share,
        which sets the pace of every update (V / P when P divides V)."""
        return -(-self.world_size // self.physical_workers)

    @property
    def virtual_rank_counts(self) -> tuple[int, ...]:
        """Virtual ranks per physical worker, in physical rank order (V = 16, P = 3: (6, 5, 5))."""
        # imported here: sharding imports torch, which the CLI (through spec.schema) does not
        from scalesweep.trainables.sharding import virtual_rank_counts

        return virtual_rank_counts(self.world_size, self.physical_workers)

    @property
    def global_batch(self) -> int:
        """The final (with a ramp: the largest) global batch."""
        return self.world_size * self.per_worker_batch * self.accum_grad

    @property
    def smallest_world_size(self) -> int:
        """The fewest virtual ranks any update has: the most physical workers a trial can use."""
        return min([self.world_size, *(s.world_size for s in self.batch_ramp)])

    def data_plan(self, dataset_size: int) -> DataPlan:
        """World size, epoch, schedule position and lr multiplier of every update."""
        return DataPlan(
            dataset_size=dataset_size, per_worker_batch=self.per_worker_batch,
            accum_grad=self.accum_grad, world_size=self.world_size,
            total_updates=self.total_updates, eval_every=self.eval_every,
            stages=self.batch_ramp,
            counts_from=self.scheduler.kind.counts_from)


class LoopHandover(BaseModel):
    """What a ``train_loop`` trial's Ray Train side needs beyond its ``TrialConfig``: the
    ``loop_config`` its ``train_loop_per_worker`` receives, and where a resumed trial's reports
    go on from (its training clock, its last report logged)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    loop_config: dict[str, Any]
    wall_offset: float = 0.0
    resumed_report: dict[str, float] | None = None


class TrialJob(BaseModel):
    """What Tune hands one trial (``param_space={"trial_config": job}``, as its JSON form):
    the ``TrialConfig`` and where and with what it runs. The sweep, the solve's search and the
    tests make it; :mod:`scalesweep.trainables.trial_driver` reads it back. Unknown keys are an
    error, so a key the driver reads is a key someone sets."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    trial: TrialConfig
    #: where Ray Train keeps ddp runs and their checkpoints (the sweep's ``train/``; shared
    #: storage on a multi-node cluster); None: Ray's own (``~/ray_results``)
    storage_path: str | None = None
    #: worker-group restarts (ddp) or Tune retries (simulate) from the latest checkpoint
    max_failures: int = Field(default=3, ge=0)
    cpus_per_worker: float = Field(default=1.0, gt=0)
    #: used when the trial uses GPUs
    gpus_per_worker: float = Field(default=1.0, ge=0)
    #: a checkpoint directory to start from when Ray has none of its own for this trial (an
    #: earlier, killed sweep of the same plan)
    resume_from: str | None = None
    loop: LoopHandover | None = None
    #: fused seeds (resources.seeds_per_trial; scalesweep.trainables.seed_fusion): each seed's
    #: own trial, named and seeded as its solo trial; ``trial`` is then the fused trial (the
    #: first seed's settings under the fused trial's name). Empty: ``trial`` alone
    seeds: tuple[TrialConfig, ...] = ()

    @model_validator(mode="after")
    def _seeds_of_one_arm(self) -> TrialJob:
        if self.seeds:
            arm = self.trial.model_copy(update={"name": "", "seed": 0})
            odd = [t.name for t in self.seeds if t.model_copy(update={"name": "", "seed": 0}) != arm]
            if odd or len({t.seed for t in self.seeds}) != len(self.seeds):
                raise ValueError(f"fused seeds must be distinct seeds of the trial's arm, but got {odd}")
        return self

    def to_config(self) -> dict[str, Any]:
        """The JSON form Tune keeps in the trial's config (and its experiment state); a solo
        trial's has no ``seeds`` (as before they existed)."""
        return self.model_dump(mode="json", exclude={"seeds"} if not self.seeds else None)

    @property
    def seed_names(self) -> list[str]:
        """The names of the trials (MLflow runs) this job runs: its seeds', else its own."""
        return [t.name for t in self.seeds] if self.seeds else [self.trial.name]

    @staticmethod
    def name_in(config: Mapping[str, Any]) -> str:
        """The trial's name in a Tune trial's ``config`` (``param_space``'s, as Tune keeps it)."""
        return str(config["trial_config"]["trial"]["name"])

    @staticmethod
    def seed_names_in(config: Mapping[str, Any]) -> list[str]:
        """The names of the trials a Tune trial's ``config`` runs (:attr:`seed_names`)."""
        job = config["trial_config"]
        return [str(t["name"]) for t in job.get("seeds", [])] or [str(job["trial"]["name"])]


#: a fused trial's reports to Tune: which seed's trial (its name) the report is of
SEED_TRIAL_KEY = "seed_trial"
