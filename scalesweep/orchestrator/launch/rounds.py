"""A sweep's trials in rounds: one round for a fixed number of seeds; with adaptive seeds,
more rounds while arms are undecided (:mod:`scalesweep.orchestrator.plan.adaptive` says which
trials each round adds, from the decisions the finished trials give)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scalesweep.orchestrator.launch import curtail_stopper, tune
from scalesweep.orchestrator.plan import adaptive
from scalesweep.orchestrator.plan.rows import Plan, PlanRow
from scalesweep.orchestrator.tracking.callback import SweepCallback
from scalesweep.orchestrator.tracking.summary import arm_summaries
from scalesweep.orchestrator.tracking.tracker import SweepTracker


@dataclass
class Rounds:
    plan: Plan
    sweep_dir: Path
    tracker: SweepTracker
    child_for: Callable[[str], str]
    curves: dict[str, list[dict[str, Any]]]
    #: trials a killed driver already finished (name -> status): not run again
    done: dict[str, str]
    #: the trials this sweep runs, round after round (an adaptive sweep runs part of its plan)
    in_play: list[PlanRow] = field(default_factory=list)
    callback: SweepCallback | None = None
    #: ``curtail: true``: the stopper of every round, which remembers where it stopped trials
    stopper: curtail_stopper.CurtailStopper | None = None
    #: set by the first Ctrl-C: no further round starts, and trials it stops are not failures
    interrupted: bool = False
    #: whether a Tune experiment of this sweep has started
    launched: bool = False

    def interrupt(self) -> None:
        self.interrupted = True
        if self.callback is not None:
            self.callback.interrupted = True

    def run(self) -> SweepCallback | None:
        """Every round until no arm wants more seeds (or a Ctrl-C); the callback of them all."""
        self.in_play = adaptive.first_round(self.plan)
        while not self.interrupted:
            ran = set(self.done) | set(self.callback.status if self.callback else {})
            todo = [r for r in self.in_play if r.name not in ran]
            self._launch(todo)
            if self.interrupted:
                break
            more = adaptive.next_round(self.plan, self.in_play, self.decisions())
            if not more:
                return self.callback
            arms = sorted({r.arm for r in more})
            print(f"adaptive seeds: {len(more)} more trial(s) for {len(arms)} arm(s) not yet decided "
                  f"(and their baseline): {', '.join(arms)}", flush=True)
            self.in_play.extend(more)
        return self.callback

    def _launch(self, todo: list[PlanRow]) -> None:
        """One round as one Tune experiment; with ``curtail``, its baseline trials first, then
        the rest under the stopper that reads their finished curves."""
        parts: list[tuple[list[PlanRow], Any]] = [(todo, None)]
        if self.plan.sweep.spec.curtail:
            bases, rest = curtail_stopper.split_round(self.plan, todo)
            if self.stopper is None:
                self.stopper = curtail_stopper.CurtailStopper(self.plan, self.curves, self.ended)
            parts = [(bases, None), (rest, self.stopper)]
        if self.callback is None:  # made here, so that a round that raises still leaves it
            self.callback = SweepCallback(self.tracker, self.child_for, self.curves, total=0)
        for rows, stopper in parts:
            if self.interrupted and self.launched:
                continue  # a Ctrl-C during the baselines: the rest wait for resume
            self.launched = True
            # through the module: what tune.launch is when the round starts (a wrapper the
            # benchmarks time it with, for one)
            self.callback = tune.launch(self.plan, rows, self.sweep_dir, self.tracker, self.child_for,
                                        self.curves, self.callback, interrupted=lambda: self.interrupted,
                                        stopper=stopper)

    def ended(self, name: str) -> bool:
        """Whether a trial has its final status (this driver's or a killed one's)."""
        status = self.done.get(name) or (self.callback.status.get(name) if self.callback else None)
        return status in ("completed", "diverged", "stopped", "failed")

    def decisions(self) -> dict[str, str]:
        return {a.arm: a.answer for a in arm_summaries(self.plan, self.curves, self.in_play)}
