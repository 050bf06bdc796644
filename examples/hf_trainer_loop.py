"""A tiny GPT-2 trained by a plain Hugging Face ``transformers.Trainer``, swept by scalesweep as
it is (sweeps/hf_trainer.yaml).

This is how such a script is usually written: a config, a model, two datasets, ``Trainer``,
``trainer.train()``. The lines marked ``# scalesweep`` are all that sweeping it needs
(``scalesweep.adapters.hf``):

* ``hf.training_arguments(config, model)``: the trial's batch, accumulation, updates, evals,
  seed, lr, and the model's loss made to mean the same at every world size;
* ``hf.optimizers(model, config)``: the sweep's optimizer with the trial's planned lr schedule
  (warmup rule and lr rule applied) in place of HF's own;
* ``hf.ReportCallback(config)``: reports ``eval_loss`` at every evaluation, update =
  ``state.global_step``, with the Trainer's checkpoint of that step;
* ``hf.last_checkpoint()``: where to resume after a lost worker, a retry or ``scalesweep
  resume`` (None on a first start).

The task: next-character prediction on text made here from a small grammar (no download, no
tokenizer: the vocabulary is the text's characters). Every worker of every trial builds the same
text (a fixed numpy seed); the model's initial weights come from the trial's seed. Run from the
repository root (needs the extra: ``pip install -e '.[hf]'``):

    python -m scalesweep run sweeps/hf_trainer.yaml
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, set_seed

from scalesweep.adapters import hf  # scalesweep

BLOCK = 32  # characters per training sequence
DEV_SIZE = 64
SUBJECTS = ["the cat", "a dog", "my friend", "the old man", "a small bird", "the teacher"]
VERBS = ["sees", "likes", "finds", "follows", "draws", "calls"]
OBJECTS = ["the ball", "a red box", "the river", "a green tree", "the moon", "her book"]


def make_text(sentences: int, data_seed: int) -> str:
    """Sentences "subject verb object." drawn from a fixed grammar."""
    rng = np.random.default_rng(data_seed)
    parts = [f"{SUBJECTS[s]} {VERBS[v]} {OBJECTS[o]}. "
             for s, v, o in rng.integers(0, 6, size=(sentences, 3))]
    return "".join(parts)


VOCAB = sorted(set(make_text(200, data_seed=0)))


class CharBlocks(Dataset[dict[str, torch.Tensor]]):
    """``size`` sequences of BLOCK characters, cut from generated text; labels = inputs (the
    model shifts them)."""

    def __init__(self, size: int, data_seed: int) -> None:
        text = make_text(size * BLOCK // 20 + 10, data_seed)
        ids = torch.tensor([VOCAB.index(c) for c in text[: size * BLOCK]])
        self.blocks = ids.view(size, BLOCK)

    def __len__(self) -> int:
        return len(self.blocks)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.blocks[i], "labels": self.blocks[i]}


def train_loop_per_worker(config: dict[str, Any]) -> None:
    set_seed(config["seed"])  # every rank builds the same initial model
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(VOCAB), n_positions=BLOCK, n_embd=32,
                                       n_layer=2, n_head=2, bos_token_id=None,
                                       eos_token_id=None))
    train = CharBlocks(config["train_size"], data_seed=1)  # scalesweep: train_size in the sweep file
    dev = CharBlocks(DEV_SIZE, data_seed=2)

    trainer = Trainer(
        model=model,
        args=hf.training_arguments(config, model),  # scalesweep
        train_dataset=train,
        eval_dataset=dev,
        optimizers=hf.optimizers(model, config),  # scalesweep
        callbacks=[hf.ReportCallback(config)],  # scalesweep
    )
    with hf.last_checkpoint() as resume:  # scalesweep
        trainer.train(resume_from_checkpoint=resume)
