"""The HF adapter's loss means the same at every world size (scalesweep.adapters.hf): a tiny
BERT-style sequence classifier (whose forward takes ``**kwargs`` but whose loss ignores
``num_items_in_batch``) and a tiny causal LM (whose loss divides by it), trained by a plain
``transformers.Trainer`` on real gloo process groups of 1 and 2 ranks from the same weights,
give the eval loss and the first update's gradient norm that the model computes on the whole
batch itself, at world size 1 with and without accumulation and at world size 2. The causal LM's training
sequences count unequal numbers of tokens (``COUNTED``), so that its ranks' and accumulation
steps' counts differ: the gradient then matches only with the count taken over the global batch
(``average_tokens_across_devices``; checked: with the flag dropped, the gpt2 arms at world size 2
fail).

Under transformers' defaults the classifier's loss at 2 ranks is 2x (the Trainer multiplies
it by the number of processes) and its gradient at accumulation 2 is 2x (the Trainer leaves
it undivided by the accumulation steps)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import Dataset
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    GPT2Config,
    GPT2LMHeadModel,
    PreTrainedModel,
    Trainer,
    TrainerCallback,
)

from scalesweep.adapters import hf
from tests.support import gloo_group

VOCAB, LENGTH, TRAIN, DEV = 32, 8, 8, 16  # TRAIN: one global batch, whatever its split


def _model(kind: str) -> PreTrainedModel:
    torch.manual_seed(0)  # the same weights in every process
    if kind == "bert":
        return BertForSequenceClassification(BertConfig(
            vocab_size=VOCAB, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
            intermediate_size=32, max_position_embeddings=LENGTH, num_labels=2,
            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
    return GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_positions=LENGTH, n_embd=16, n_layer=1,
                                      n_head=2, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                      bos_token_id=None, eos_token_id=None))


#: the causal LM's training sequences count this many tokens each in its loss (the rest of the
#: labels are -100): 31 in all, odd, so no split of the global batch between 2 ranks, or between
#: 2 accumulation steps, has equal counts. Equal counts would give the same gradient whether or
#: not the count is taken over the global batch (``average_tokens_across_devices``): each
#: rank's mean is then the global mean.
COUNTED = (1, 7, 2, 6, 3, 5, 4, 3)
assert len(COUNTED) == TRAIN and sum(COUNTED) % 2 == 1 and max(COUNTED) < LENGTH


class _Synthetic(Dataset[dict[str, torch.Tensor]]):
    """Random token sequences; labels: the tokens (causal LM) or one class per sequence. With
    ``counted``, sequence i's labels past position ``counted[i]`` are -100 (the causal LM's loss
    shifts its labels by one: it counts ``counted[i]`` tokens of sequence i)."""

    def __init__(self, kind: str, size: int, data_seed: int,
                 counted: tuple[int, ...] | None = None) -> None:
        g = torch.Generator().manual_seed(data_seed)
        self.ids = torch.randint(0, VOCAB, (size, LENGTH), generator=g)
        self.labels = (self.ids.clone() if kind == "gpt2"
                       else torch.randint(0, 2, (size,), generator=g))
        for i, n in enumerate(counted or ()):
            self.labels[i, n + 1:] = -100

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.labels[i]}


def _config(world: int, batch: int, accum: int) -> dict[str, Any]:
    """A trial's config (scalesweep.orchestrator.plan.loop_config) of one update."""
    return {"world_size": world, "physical_workers": world, "per_worker_batch": batch,
            "accum_grad": accum, "global_batch": world * batch * accum, "total_updates": 1,
            "eval_every": 1, "updates_per_epoch": 1, "seed": 0, "lr": 0.1, "grad_clip": None,
            "optimizer": {"type": "sgd", "lr": 0.1}, "schedule": {"type": "constant"}}


class _GradNorm(TrainerCallback):
    """The gradient's norm before each optimizer step (after DDP's all-reduce)."""

    def __init__(self) -> None:
        self.norms: list[float] = []

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        grads = [p.grad for p in kwargs["model"].parameters() if p.grad is not None]
        self.norms.append(float(torch.linalg.vector_norm(torch.stack(
            [torch.linalg.vector_norm(g) for g in grads]))))


def _trainer(kind: str, config: dict[str, Any], out: Path, *callbacks: TrainerCallback) -> Trainer:
    model = _model(kind)
    return Trainer(model=model,
                   args=hf.training_arguments(config, model, output_dir=str(out), save_strategy="no"),
                   train_dataset=_train_set(kind),
                   eval_dataset=_Synthetic(kind, DEV, data_seed=2),
                   optimizers=hf.optimizers(model, config), callbacks=list(callbacks))


def _train_set(kind: str) -> _Synthetic:
    return _Synthetic(kind, TRAIN, data_seed=1, counted=COUNTED if kind == "gpt2" else None)


def _measure(kind: str, config: dict[str, Any], out: Path) -> dict[str, float]:
    norm = _GradNorm()
    _trainer(kind, config, out, norm).train()
    # the initial weights' eval by a Trainer of its own: one that evaluates before train()
    # trains without DDP's wrapper (transformers 5.24), each rank on its own gradient
    dev_loss = float(_trainer(kind, config, out).evaluate()["eval_loss"])
    return {"dev_loss": dev_loss, "grad_norm": norm.norms[0]}


def _ranks(rank: int, size: int, arms: list[tuple[int, int]], out: Path) -> None:
    # what a Ray Train worker has: accelerate joins the process group already made
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(size),
                      LOCAL_WORLD_SIZE=str(size), MASTER_ADDR="127.0.0.1", MASTER_PORT="29500")
    results = {f"{kind}-b{batch}-a{accum}": _measure(kind, _config(size, batch, accum),
                                                     out / f"trainer-{rank}")
               for kind in ("bert", "gpt2") for batch, accum in arms}
    if rank == 0:
        (out / f"ws{size}.json").write_text(json.dumps(results))


def _reference(kind: str) -> dict[str, float]:
    """What the model itself computes: its loss on the whole dev set, and the gradient of its
    loss on the whole training set (one global batch)."""
    model = _model(kind)
    dev, train = _Synthetic(kind, DEV, data_seed=2), _train_set(kind)
    with torch.no_grad():
        dev_loss = float(model(input_ids=dev.ids, labels=dev.labels).loss)
    model(input_ids=train.ids, labels=train.labels).loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    return {"dev_loss": dev_loss, "grad_norm": float(torch.linalg.vector_norm(torch.stack(
        [torch.linalg.vector_norm(g) for g in grads])))}


@pytest.mark.timeout(600)
def test_loss_and_first_gradient_are_the_same_at_world_sizes_1_and_2(tmp_path: Path) -> None:
    gloo_group.run(1, _ranks, (1, [(8, 1), (4, 2)], tmp_path), tmp_path)
    gloo_group.run(2, _ranks, (2, [(4, 1)], tmp_path), tmp_path)
    measured = {**json.loads((tmp_path / "ws1.json").read_text()),
                **{f"ws2-{k}": v for k, v in json.loads((tmp_path / "ws2.json").read_text()).items()}}
    for kind in ("bert", "gpt2"):
        expected = _reference(kind)
        for arm in (f"{kind}-b8-a1", f"{kind}-b4-a2", f"ws2-{kind}-b4-a1"):
            assert measured[arm] == pytest.approx(expected, rel=1e-5), (arm, measured[arm], expected)


def test_the_loss_kind_is_read_off_the_model() -> None:
    bert, gpt2 = _model("bert"), _model("gpt2")
    assert not hf.loss_counts_items(bert) and hf.loss_counts_items(gpt2)
    hf.training_arguments(_config(1, 8, 1), bert)
    assert bert.accepts_loss_kwargs is False  # what Trainer.__init__ reads
    assert hf.training_arguments(_config(1, 8, 1), gpt2).average_tokens_across_devices
    assert not hasattr(gpt2, "accepts_loss_kwargs") or gpt2.accepts_loss_kwargs


class _Opaque(torch.nn.Module):
    """A model whose forward takes ``**kwargs`` and that has no dummy inputs to try."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(2, 1)

    def forward(self, x: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        return self.linear(x)


def test_a_model_whose_loss_cannot_be_told_is_refused_by_name() -> None:
    from scalesweep.adapters._common import AdapterConfigError

    with pytest.raises(AdapterConfigError, match=r"training_arguments model=_Opaque: cannot tell "
                                                 r"whether its loss divides by num_items_in_batch"):
        hf.training_arguments(_config(1, 8, 1), _Opaque())
    declared = _Opaque()
    declared.accepts_loss_kwargs = False  # type: ignore[assignment]  # the user's word: a mean of its own
    assert not hf.training_arguments(_config(1, 8, 1), declared).average_tokens_across_devices
