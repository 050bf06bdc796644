"""End a Tune trial whose results come from Ray Train V2 without Ray's end-of-trial deadlock.

In a ddp trial, Ray Train's ``TuneReportCallback`` (in the Train controller actor) puts each
result into this trial's one-slot *inter-actor* queue. The trial's main thread takes it from
there and reports it itself into the one-slot *result* queue, which only that thread empties
(``ray.train._internal.session._TrainSession._get_result_from_queues``, Ray 2.60). Any report
made by the training thread -- ``ray.tune.report`` after ``fit()``, or the duplicate result
Tune's function wrapper reports when the function returns -- can take the result slot between
those two steps; the main thread then blocks on a full queue that only it could empty, and the
trial hangs for ever (seen in CI: a contract-breaking loop's trial never ended).

:func:`hand_over` closes that window: after ``fit()`` this thread reports nothing itself. Its
last result, then Tune's end-of-function marker, go through the inter-actor queue behind
Train's own, in order, and the thread waits for Tune to stop the trial before it leaves.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: how long the training thread waits for Tune to stop its trial after the end marker; past
#: that it returns as Tune's wrapper expects (by then the main thread has emptied both queues)
STOP_WAIT_S = 300.0


def hand_over(final: Mapping[str, Any] | None = None, *, stop_wait_s: float = STOP_WAIT_S) -> None:
    """From a Tune function trainable's training thread, after a Ray Train V2 ``fit()``:
    report ``final`` (if any) after every result Train handed to Tune, then end the trial."""
    from ray.train._internal.session import get_session
    from ray.tune.result import RESULT_DUPLICATE

    session = get_session()
    if session is None:
        raise RuntimeError("hand_over() is called from a Tune trial's training thread")
    handoff = session._get_or_create_inter_actor_queue()
    if final is not None:
        handoff.put(dict(final))
    # Tune's marker for "the function returned": it ends the trial without logging a result
    handoff.put({RESULT_DUPLICATE: True})
    if session.stop_event.wait(stop_wait_s):
        # Tune stopped the trial (or reset the actor for the next one): leave without the
        # wrapper's own end report. SystemExit(0) is Ray's "thread ended without error".
        raise SystemExit(0)
