"""The report's "Predictions against measurements" section: every prediction recorded on a
parent run of the study's experiment, each rule's interval beside the median later observed
at that world size in the experiment (docs/beyond.md, "Predict, then verify")."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

from scalesweep.science.prediction.ledger import running_hit_rate
from scalesweep.science.recommend.record import RecommendLedgerLine
from scalesweep.science.solve_record import Line, SolveLedgerLine


def _cells(x: Line) -> list[str]:
    """Global batch, rule, median, interval, confidence and observed: a solve line's numbers
    are epochs ratios (its rule cell says so), and it has no global batch of its own."""
    if isinstance(x, SolveLedgerLine):
        observed = "pending" if x.outcome is None else x.observed_text()
        return ["-", f"{x.rule} (epochs ratio)", "-" if x.median is None else f"{x.median:.3g}",
                x.interval_text(), f"{x.confidence:.0%}", observed]
    if isinstance(x, RecommendLedgerLine):
        observed = "pending" if x.outcome is None else x.observed_text()
        return [f"{x.global_batch:g}", f"{x.rule} (epochs ratio M/N)", f"{x.median:.3g}",
                x.interval_text(), f"{x.confidence:.0%}", observed]
    s = x.scored
    observed = ("pending" if s.observed is None else "never reached"
                if not math.isfinite(s.observed) else f"{s.observed:.3g}")
    return [f"{x.global_batch:g}", x.rule, f"{x.median:.3g}", f"[{x.ci[0]:.3g}, {x.ci[1]:.3g}]",
            f"{x.confidence:.0%}", observed]


def predictions_html(lines: Sequence[Line]) -> str:
    """The section, or "" when nothing was predicted for this experiment."""
    if not lines:
        return ""
    e = html.escape
    rows = []
    for x in lines:
        seeds = "" if x.outcome is None else str(x.outcome.seeds)
        cells = [x.created[:19].replace("T", " "), str(x.world_size), *_cells(x), seeds]
        rows.append("<tr>" + "".join(f"<td>{e(c)}</td>" for c in cells)
                    + f"<td><b>{e(x.scored.result)}</b></td></tr>")
    last = running_hit_rate([x.scored for x in lines])[-1]
    rate = ("no prediction verified yet" if last.rate is None else
            f"{last.hits} of {last.verified} verified intervals held the observed median "
            f"({last.rate:.0%}; nominal {last.nominal:.0%})")
    solve = ("" if not any(isinstance(x, SolveLedgerLine) for x in lines) else
             " A <code>scalesweep solve</code> answer is a line too: its recipe's paired epochs "
             "ratio to the baseline arm (not epochs), observed in the experiment's runs other "
             "than the verification's, each seed once and none the search or the verification ran "
             "(docs/solve.md).")
    if any(isinstance(x, RecommendLedgerLine) for x in lines):
        solve += (" A <code>scalesweep recommend</code> recipe is a line too: its epochs ratio at "
                  "M over the study's at N (not epochs), observed as the best arm a later study "
                  "or solve ran at M (docs/beyond.md).")
    reused = sum(x.reused for x in lines if isinstance(x, SolveLedgerLine))
    if reused:
        solve += (f" {reused} pair(s) of solve reruns were left out: their seed was the search's "
                  "or the verification's, or an older run's, so they repeat a trial rather than "
                  "test the claim.")
    return f"""<h2>Predictions against measurements</h2>
<p>Each <code>scalesweep predict</code> recorded on this experiment's parent runs, per lr rule:
the predicted epochs to target at world size M (median and interval), and the median the
experiment's trials at that global batch measured since (the best setting's seeds, a seed that
never reached counting as +infinity): a <b>hit</b> when the interval holds it. {e(rate)};
pending predictions are not counted, nor censored ones (the median seed never reached within
the epochs the verification trained, and the interval reaches past them).{solve}</p>
<div class="wide"><table class="trials"><tr><th>predicted (UTC)</th><th>world size M</th>
<th>global batch</th><th>lr rule</th><th>epochs to target (predicted median)</th>
<th>interval</th><th>confidence</th><th>observed median</th><th>seeds</th><th>outcome</th></tr>
{chr(10).join(rows)}</table></div>"""
