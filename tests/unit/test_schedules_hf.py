"""The table "HF's linear and cosine" of docs/workloads.md against Hugging Face's own schedulers:
each row's ``scheduler`` block, with W and T filled in, built by scalesweep and compared at every
update with ``get_linear_schedule_with_warmup`` / ``get_cosine_schedule_with_warmup`` on a torch
optimizer (update k runs with the lr the optimizer holds after construction and k - 1 steps)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from transformers import get_cosine_schedule_with_warmup, get_linear_schedule_with_warmup

from scalesweep.science import schedules as S

ROOT = Path(__file__).resolve().parents[2]
W, T, LR = 10, 50, 0.3
HF: dict[str, Callable[..., Any]] = {"linear": get_linear_schedule_with_warmup,
                                     "cosine": get_cosine_schedule_with_warmup}


def hf_lrs(make: Callable[..., Any], warmup: int, total: int) -> list[float]:
    """lr of updates 1..total under HF's scheduler."""
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=LR)
    scheduler = make(optimizer, warmup, total)
    out = []
    for _ in range(total):
        out.append(float(optimizer.param_groups[0]["lr"]))
        optimizer.step()
        scheduler.step()
    return out


def doc_rows() -> list[tuple[str, dict[str, Any]]]:
    """(HF name, scheduler spec with W and T filled in) for each row of the docs' table."""
    text = (ROOT / "docs" / "workloads.md").read_text()
    table = text.split("**HF's `linear` and `cosine`.**", 1)[1].split("\n\n", 2)[1]
    rows = []
    for line in table.splitlines()[2:]:
        name, spec = (c.strip().strip("`") for c in line.strip("|").split("|")[:2])
        spec = re.sub(r"\bT-W\b", str(T - W), spec)
        spec = re.sub(r"\bW\b", str(W), re.sub(r"\bT\b", str(T), spec))
        rows.append((name, yaml.safe_load(spec)))
    return rows


def test_the_docs_table_has_the_four_rows() -> None:
    assert [(name, spec["type"]) for name, spec in doc_rows()] == [
        ("linear", "wsd"), ("cosine", "wsd"), ("linear", "ds_warmup_decay"),
        ("cosine", "ds_warmup_cosine")]


@pytest.mark.parametrize(("name", "spec"), doc_rows(), ids=lambda v: str(v)[:40])
def test_docs_table_against_hf(name: str, spec: dict[str, Any]) -> None:
    want = hf_lrs(HF[name], W, T)
    schedule = S.build(S.resolve(spec, LR), LR)
    got = [schedule.lr(k) for k in range(1, T + 1)]
    if spec["type"] == "wsd":
        # the same LambdaLR arithmetic, but 1 - (t - W)/(T - W) for HF's (T - t)/(T - W)
        assert got == pytest.approx(want, rel=1e-12, abs=1e-15)
        if name == "cosine":
            assert got == want
    elif spec["type"] == "ds_warmup_decay":
        # one update late throughout: updates 1 and 2 at 0, the peak at update W + 2
        assert got == [0.0, *want[:-1]]
        assert got[W + 1] == LR and got[W] < LR
    else:
        # the warmup one update late (update W + 1 at (W - 1)/W of the peak), then equal
        assert got[:W + 1] == [0.0, *want[:W]]
        assert got[W] == LR * ((W - 1) / W)
        assert got[W + 1:] == want[W + 1:]
