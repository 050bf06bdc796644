"""One stepping core (issue 32 §2): the built-in loop, the helpers for users' own loops and the
framework adapters step by the same functions (scalesweep.trainables.stepping), so that "a loop
written with the helpers behaves as the built-in one" holds by construction; the equivalence
tests (test_loop_helpers, test_adapter_*, test_uneven_ranks) check the outcome."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from scalesweep import loop_helpers
from scalesweep.science.optimizers import OPTIMIZER_TYPES
from scalesweep.trainables import loop, stepping
from scalesweep.trainables.sharding import Sharding

PACKAGE = Path(stepping.__file__).parents[1]
#: the modules that step a trial: none may restate what stepping does
STEPPERS = ("trainables/loop.py", "loop_helpers.py", "adapters/hf.py", "adapters/lightning.py",
            "adapters/_common.py")


def _restated(path: Path) -> list[str]:
    """Where a module cuts micro-batches, mixes a seed or names a torch optimizer class itself."""
    own = {"micro_batches", "SeedSequence", *(k.torch_class for k in OPTIMIZER_TYPES.values())}
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Attribute) or node.attr not in own:
            continue
        owner = node.value.id if isinstance(node.value, ast.Name) else None
        # stepping's own, or VirtualRanks' micro_batches method, which calls stepping's
        if owner not in ("stepping", "self"):
            found.append((node.lineno, f"{path.name}:{node.lineno} {node.attr}"))
    return [text for _, text in sorted(found)]


def test_the_loop_the_helpers_and_the_adapters_restate_nothing_of_it() -> None:
    assert loop_helpers.MicroBatch is stepping.MicroBatch
    assert loop.build_optimizer is stepping.build_optimizer
    assert [r for m in STEPPERS for r in _restated(PACKAGE / m)] == []


def test_a_restatement_is_caught(tmp_path: Path) -> None:
    planted = tmp_path / "loop.py"
    planted.write_text("def f(self, update, v):\n    return self.sharding.micro_batches(update, v)\n"
                       "import numpy as np\nseed = np.random.SeedSequence([1])\n"
                       "import torch\nopt = torch.optim.AdamW([])\n")
    assert _restated(planted) == ["loop.py:2 micro_batches", "loop.py:4 SeedSequence",
                                  "loop.py:6 AdamW"]


@pytest.mark.parametrize(("ranks", "accum"), [(range(0, 1), 1), (range(2, 5), 2)])
def test_micro_batches_run_each_rank_in_turn_and_the_last_all_reduces(ranks: range, accum: int) -> None:
    sharding = Sharding(96, 6, 4, accum, seed=3)
    passes = stepping.micro_batches(sharding, ranks, 2)
    assert [(mb.virtual_rank, mb.index) for mb in passes] == [(v, m) for v in ranks for m in range(accum)]
    assert [mb.indices for mb in passes] == [sharding.micro_batches(2, v)[m] for v in ranks
                                             for m in range(accum)]
    assert [mb.last for mb in passes] == [False] * (len(passes) - 1) + [True]


def test_reseed_keys_and_report_cadence() -> None:
    mb = stepping.MicroBatch(indices=[0], virtual_rank=2, index=1, last=False)
    stepping.reseed_pass(torch.device("cpu"), 7, 5, mb)
    a = torch.rand(3)
    stepping.reseed(torch.device("cpu"), 7, stepping.TRAIN_STREAM, 5, 2, 1)
    assert torch.equal(a, torch.rand(3))
    stepping.reseed_eval(torch.device("cpu"), 7, 5)
    assert not torch.equal(a, torch.rand(3))
    assert [u for u in range(1, 12) if stepping.report_due(u, eval_every=4, total_updates=11)] == [4, 8, 11]
    # a ramp stage counts its cadence from its own first update
    assert [u for u in range(9, 16) if stepping.eval_due(u, 3, 9)] == [11, 14]
    assert stepping.report_keys(6, samples_seen=96.0, epoch=1.5) == {"update": 6, "samples_seen": 96.0,
                                                                      "epoch": 1.5}
