"""What the framework adapters share: the checks a trial's config must pass before a framework
that plays no virtual ranks can run it, and the record of the lr each update ran with."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from scalesweep import loop_helpers
from scalesweep.errors import ScalesweepError
from scalesweep.trainables import user_loop

#: sends one report; :func:`scalesweep.loop_helpers.report` in a trial
Send = Callable[..., Any]


class AdapterConfigError(ScalesweepError, ValueError):
    """A trial's config that a framework adapter cannot run as planned."""


def with_plan(what: str, defaults: Mapping[str, Any], overrides: Mapping[str, Any],
              planned: Mapping[str, Any], sources: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A framework's arguments: ``defaults``, then the user's ``overrides``, then what the plan
    sets; an override of a planned value is refused by name (it would change what the plan
    counts). ``sources[key]``: why, in place of "the trial's plan sets it (value)": where in
    the sweep file the value lives and what the plan holds there, so that the refusal says
    what to change instead."""
    for key, value in overrides.items():
        if key in planned:
            reason = (sources or {}).get(key) or f"the trial's plan sets it ({planned[key]!r})"
            raise AdapterConfigError(f"{what} {key}={value!r}: must not be given, {reason}")
    return {**defaults, **overrides, **planned}


def require_real_ranks(config: Mapping[str, Any], framework: str) -> None:
    """A framework's data parallelism is one rank per worker: V virtual ranks on P < V workers
    (``physical_workers``) would change the global batch, so they are refused by name."""
    world, workers = int(config["world_size"]), int(config.get("physical_workers") or config["world_size"])
    if workers != world:
        raise AdapterConfigError(
            f"physical_workers={workers}: must equal world_size ({world}) under the {framework} "
            "adapter, which runs one rank per Ray Train worker (virtual ranks need "
            "scalesweep.loop_helpers.VirtualRanks in a loop of your own)")


def require_world(config: Mapping[str, Any], ranks: int, framework: str) -> None:
    """The framework found as many ranks as the trial has: fewer (a process group it did not
    join) would train each worker alone on a smaller global batch than planned."""
    if ranks != int(config["world_size"]):
        raise AdapterConfigError(
            f"{framework} runs on {ranks} rank(s): must be world_size ({config['world_size']}); "
            "run it in the trial's Ray Train workers, whose process group it joins")


class LrRecord:
    """The lr each update ran with, by 1-based update, read off the optimizer just before its
    step (the framework steps the scheduler after it)."""

    def __init__(self) -> None:
        self.by_update: dict[int, float] = {}

    def before_step(self, optimizer: Any, updates_done: int) -> None:
        self.by_update[updates_done + 1] = float(optimizer.param_groups[0]["lr"])

    def at(self, update: int) -> float | None:
        return self.by_update.get(update)



#: each adapter's report callback, as the script must pass it
CALLBACKS = {"hf": "callbacks=[hf.ReportCallback(config)] to the Trainer",
             "lightning": "callbacks=[lightning.ReportCallback(config)] to the pl.Trainer"}


def uses(adapter: str) -> None:
    """The trial's loop builds its arguments with ``adapter`` (for the hint of a loop that
    never reports); nothing outside a trial."""
    run = user_loop.current()
    if run is not None:
        run.adapter = adapter


def callback_started(adapter: str) -> None:
    """``adapter``'s ReportCallback saw training begin in this trial's loop."""
    run = user_loop.current()
    if run is not None:
        run.callbacks.add(adapter)


def require_callback(scheduler: loop_helpers.PlannedLR, adapter: str) -> None:
    """In a trial, fail it at the scheduler's first step (update 1, before any evaluation)
    when ``adapter``'s ReportCallback did not see training begin: the loop would train to the
    end and report nothing. Outside a trial (tests, a script run alone) nothing is checked."""
    uses(adapter)

    def check(updates: int) -> None:
        run = user_loop.current()
        if updates < 1 or run is None:
            return
        scheduler.after_step = None  # once
        if adapter not in run.callbacks:
            user_loop.fail_trial(
                f"trains with the {adapter} adapter's optimizers but without its report "
                f"callback (found at update 1, before any evaluation): pass {CALLBACKS[adapter]}, "
                "which reports every evaluation")

    scheduler.after_step = check
