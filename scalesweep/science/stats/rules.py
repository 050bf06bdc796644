"""The rules that judge a study: the confidence every interval is read at, the equivalence
margin, the levels of time to quality (and which of them is the headline target), the
metric's direction and smoothing, and an adaptive design's most seeds.

One record, :class:`StudyRules`, built once from the sweep at plan time
(:func:`scalesweep.orchestrator.plan.rules.study_rules`), logged on the study's parent run as
one JSON param (:meth:`StudyRules.to_param`) and read back into the same record
(:meth:`StudyRules.from_param`), so that ``run`` and every display of a finished study judge
by the same numbers. The headline target and the notes on how it was set are data (the
baseline's curves decide them), filled in with :func:`dataclasses.replace` when arms are
summarised. Pure: no torch, no Ray, no MLflow.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, cast

from scalesweep.science.stats.convergence import Mode
from scalesweep.science.stats.decisions import DEFAULT_MARGIN
from scalesweep.science.stats.replicates import CONFIDENCE

#: the fields the parent run's param carries: what the sweep fixes before any trial runs
LOGGED = ("confidence", "last_confidence", "margin", "levels", "mode", "smoothing", "headline_level",
          "max_seeds")
#: what a study logged before the levels became a fixed sequence carries instead: Holm's
#: confidences (read and ignored) and no headline level
_OLDER = {"confidence", "margin", "levels", "mode", "smoothing", "family", "max_seeds"}


@dataclass(frozen=True)
class StudyRules:
    """How arms are judged: the confidence each interval is read at (the design's per-look
    one), the equivalence margin, and the levels of time to quality."""

    confidence: float = CONFIDENCE
    #: an adaptive design's last look reads its intervals at this confidence instead
    #: (:class:`scalesweep.science.stats.sequential.Design`); None: ``confidence`` throughout
    last_confidence: float | None = None
    margin: float = DEFAULT_MARGIN
    levels: tuple[float, ...] = ()
    mode: Mode = "min"
    smoothing: float = 0.0
    #: the headline target (the pooled first-look one; each pair's own is cross-fitted), for
    #: the conditioning check on the baseline arm; None: unknown
    target: float | None = None
    #: the level of target.levels that is the headline target (``relative_to_baseline``), which
    #: takes the headline's decision; None: an absolute target, or none of the levels
    headline_level: float | None = None
    #: how the target was set, for the baseline arm to say (left-out seeds and the like)
    notes: tuple[str, ...] = ()
    #: an adaptive design's ``replicates.max``: more seeds than that are never advised (a look
    #: past the planned ones would void the design's error rate); None: a fixed design
    max_seeds: int | None = None

    def confidence_for(self, n: int) -> float:
        """The confidence an interval of n seeds (or pairs) is read at: the last look's from
        the design's most seeds on, else the one of every look before it."""
        if self.last_confidence is not None and self.max_seeds is not None and n >= self.max_seeds:
            return self.last_confidence
        return self.confidence

    def to_param(self) -> str:
        """The fields the sweep fixes (:data:`LOGGED`), as the parent run's JSON param."""
        return json.dumps({name: getattr(self, name) for name in LOGGED}, sort_keys=True)

    @classmethod
    def from_param(cls, raw: str) -> StudyRules:
        """The record :meth:`to_param` wrote; ValueError naming the field when it is not one."""
        try:
            data: Any = json.loads(raw)
        except ValueError as exc:
            raise ValueError(f"study_rules={raw!r}: not JSON ({exc})") from exc
        if not isinstance(data, dict) or set(data) not in (set(LOGGED), _OLDER):
            raise ValueError(f"study_rules={raw!r}: must be a JSON object of exactly {', '.join(LOGGED)}")
        if data["mode"] not in ("min", "max"):
            raise ValueError(f"study_rules.mode={data['mode']!r}: must be min or max")
        headline, last = data.get("headline_level"), data.get("last_confidence")
        return cls(confidence=float(data["confidence"]),
                   last_confidence=None if last is None else float(last), margin=float(data["margin"]),
                   levels=tuple(float(x) for x in data["levels"]), mode=cast(Mode, data["mode"]),
                   smoothing=float(data["smoothing"]),
                   headline_level=None if headline is None else float(headline),
                   max_seeds=None if data["max_seeds"] is None else int(data["max_seeds"]))
