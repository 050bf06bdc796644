"""The built-in workloads and the custom-workload example honour the contract in base.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from scalesweep.trainables import workloads
from scalesweep.trainables.workloads import mini_asr
from scalesweep.trainables.workloads.base import Workload, WorkloadOptionError

ROOT = Path(__file__).resolve().parents[2]

#: small but representative options, so the whole module runs in a few seconds
SMALL: dict[str, dict[str, Any]] = {
    "mlp_regression": {"train_size": 64, "dev_size": 40},
    "digits_cnn": {},
    "mini_asr": {"train_size": 40, "dev_size": 24, "train_speakers": 4, "dev_speakers": 2},
}
NAMES = sorted(SMALL)
DEFAULT_KEYS = {"optimizer", "scheduler", "per_worker_batch", "epochs", "eval_every_epochs"}


@pytest.fixture(autouse=True, scope="module")
def one_thread() -> Iterator[None]:
    # These models are tiny: with several threads on a shared machine, thread spin-up and
    # contention cost far more than the arithmetic (a 50x slowdown on small conv batches).
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(old)


@pytest.fixture
def float64() -> Iterator[None]:
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def make(name: str, **overrides: Any) -> Workload:
    return workloads.make(name, {**SMALL[name], **overrides})


def dev_values(w: Workload, model: torch.nn.Module, batch_size: int) -> dict[str, torch.Tensor]:
    parts: dict[str, list[torch.Tensor]] = {name: [] for name in w.metrics}
    for batch in w.dev_batches(batch_size):
        for name, value in w.evaluate(model, batch).items():
            parts[name].append(value)
    return {name: torch.cat(values) for name, values in parts.items()}


def flat(batch: Any) -> list[torch.Tensor]:
    """The tensors in a batch, whatever container the workload uses."""
    if isinstance(batch, torch.Tensor):
        return [batch]
    if isinstance(batch, dict):
        return [t for v in batch.values() for t in flat(v)]
    if isinstance(batch, (tuple, list)):
        return [t for v in batch for t in flat(v)]
    return [t for v in vars(batch).values() for t in flat(v)]


# ---- invalid options first ----------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_unknown_option_is_named_with_the_allowed_ones(name: str) -> None:
    with pytest.raises(WorkloadOptionError, match="bogus") as info:
        workloads.make(name, {"bogus": 1})
    assert info.value.option == "bogus"
    assert "allowed" in info.value.rule


@pytest.mark.parametrize(
    ("name", "option", "value"),
    [
        ("mlp_regression", "train_size", 0),
        ("mlp_regression", "dev_size", 2.5),
        ("mlp_regression", "noise", -0.1),
        ("mlp_regression", "data_seed", "zero"),
        ("digits_cnn", "dev_fraction", 1.0),
        ("digits_cnn", "dev_fraction", True),
        ("digits_cnn", "split_seed", 0.5),
        ("mini_asr", "train_size", 0),
        ("mini_asr", "max_tokens", 1),  # below min_tokens (2)
        ("mini_asr", "max_frames", 16),
        ("mini_asr", "vocab_size", 1),
        ("mini_asr", "d_model", 60),
        ("mini_asr", "dropout", 1.0),
        ("mini_asr", "noise", "loud"),
    ],
)
def test_invalid_option_value_names_the_option(name: str, option: str, value: Any) -> None:
    with pytest.raises(WorkloadOptionError, match=option) as info:
        workloads.make(name, {option: value})
    assert info.value.option == option
    assert info.value.value == value


# ---- the contract, for every workload -----------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_satisfies_protocol_and_defaults_use_the_sweep_form(name: str) -> None:
    w = make(name)
    assert isinstance(w, Workload)
    assert w.metrics["loss"] == "min"
    assert set(w.metrics.values()) <= {"min", "max"}
    assert set(w.defaults) <= DEFAULT_KEYS
    assert w.defaults["optimizer"]["type"] in {"adam", "adamw", "sgd"}
    assert w.defaults["optimizer"]["lr"] > 0
    assert "type" in w.defaults["scheduler"]
    assert w.defaults["per_worker_batch"] >= 1


@pytest.mark.parametrize("name", NAMES)
def test_sizes_and_dev_batches_cover_the_dev_set_in_order(name: str) -> None:
    w = make(name)
    if "train_size" in SMALL[name]:
        assert w.train_size() == SMALL[name]["train_size"]
        assert w.dev_size() == SMALL[name]["dev_size"]
    torch.manual_seed(0)
    model = w.build_model()
    whole = dev_values(w, model, batch_size=w.dev_size())
    chunked = dev_values(w, model, batch_size=7)
    for metric, values in whole.items():
        assert values.shape == (w.dev_size(),)
        torch.testing.assert_close(chunked[metric], values, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="batch_size"):
        next(iter(w.dev_batches(0)))


@pytest.mark.parametrize("name", NAMES)
def test_data_and_init_are_deterministic(name: str) -> None:
    a, b = make(name), make(name)
    indices = [5, 0, 3, 3]
    for x, y in zip(flat(a.train_batch(indices)), flat(b.train_batch(indices)), strict=True):
        assert torch.equal(x, y)
    for batch_a, batch_b in zip(a.dev_batches(16), b.dev_batches(16), strict=True):
        for x, y in zip(flat(batch_a), flat(batch_b), strict=True):
            assert torch.equal(x, y)
    torch.manual_seed(3)
    state_a = a.build_model().state_dict()
    torch.manual_seed(3)
    state_b = b.build_model().state_dict()
    assert all(torch.equal(state_a[k], state_b[k]) for k in state_a)


@pytest.mark.parametrize("name", NAMES)
def test_data_ignores_torch_global_rng(name: str) -> None:
    torch.manual_seed(1)
    a = make(name)
    torch.manual_seed(2)
    b = make(name)
    for x, y in zip(flat(a.train_batch([0, 1])), flat(b.train_batch([0, 1])), strict=True):
        assert torch.equal(x, y)


@pytest.mark.parametrize("name", NAMES)
def test_train_batch_is_those_samples_in_that_order(name: str, float64: None) -> None:
    # Per-sample losses of a batch equal those of its samples alone: order is kept and
    # padding (where there is any) does not leak into other samples.
    w = make(name)
    torch.manual_seed(0)
    model = w.build_model().eval()
    indices = [6, 2, 9]
    with torch.no_grad():
        together = w.loss(model, w.train_batch(indices))
        alone = torch.cat([w.loss(model, w.train_batch([i])) for i in indices])
    assert together.shape == (3,)
    torch.testing.assert_close(together, alone, rtol=1e-9, atol=1e-9)
    with pytest.raises(IndexError):
        w.train_batch([w.train_size()])
    with pytest.raises(IndexError):
        w.train_batch([-1])


@pytest.mark.parametrize("name", NAMES)
def test_float64_end_to_end(name: str, float64: None) -> None:
    w = make(name)
    batch = w.train_batch([0, 1, 2])
    assert all(t.dtype == torch.float64 for t in flat(batch) if t.is_floating_point())
    torch.manual_seed(0)
    model = w.build_model()
    assert all(p.dtype == torch.float64 for p in model.parameters())
    loss = w.loss(model, batch)
    assert loss.dtype == torch.float64
    loss.sum().backward()


@pytest.mark.parametrize("name", NAMES)
def test_float32_batches_by_default(name: str) -> None:
    w = make(name)
    assert all(t.dtype == torch.float32 for t in flat(w.train_batch([0, 1])) if t.is_floating_point())


@pytest.mark.parametrize("name", NAMES)
def test_a_few_steps_of_the_default_optimizer_reduce_the_training_loss(name: str) -> None:
    w = make(name)
    torch.manual_seed(0)
    model = w.build_model()
    opt_conf = dict(w.defaults["optimizer"])
    kind = opt_conf.pop("type")
    optimizer_cls = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW, "sgd": torch.optim.SGD}
    # A fixed batch and a few steps: this checks the gradient flows, not the recipe.
    lr = opt_conf.pop("lr") * (5 if kind == "sgd" else 1)
    optimizer = optimizer_cls[kind](model.parameters(), lr=lr, **opt_conf)
    batch = w.train_batch(list(range(16)))
    losses = []
    for _ in range(15):
        loss = w.loss(model, batch)
        assert loss.shape == (16,)
        assert torch.isfinite(loss).all()
        optimizer.zero_grad()
        loss.mean().backward()
        optimizer.step()
        losses.append(float(loss.detach().mean()))
    assert losses[-1] < 0.9 * losses[0]


@pytest.mark.parametrize("name", NAMES)
def test_dev_metrics_are_in_range(name: str) -> None:
    w = make(name)
    torch.manual_seed(0)
    model = w.build_model()
    values = dev_values(w, model, batch_size=16)
    assert set(values) == set(w.metrics)
    assert (values["loss"] >= 0).all()
    if "accuracy" in values:
        assert set(values["accuracy"].tolist()) <= {0.0, 1.0}
    if "ter" in values:
        assert (values["ter"] >= 0).all()
    assert not any(v.requires_grad for v in values.values())


# ---- per-workload specifics ---------------------------------------------------------------


def test_mlp_dev_set_does_not_depend_on_train_size() -> None:
    a = workloads.make("mlp_regression", {"train_size": 10, "dev_size": 8})
    b = workloads.make("mlp_regression", {"train_size": 99, "dev_size": 8})
    for x, y in zip(flat(next(a.dev_batches(8))), flat(next(b.dev_batches(8))), strict=True):
        assert torch.equal(x, y)


def test_mlp_data_seed_changes_the_data() -> None:
    a = workloads.make("mlp_regression", {"data_seed": 0})
    b = workloads.make("mlp_regression", {"data_seed": 1})
    assert not torch.equal(a.train_batch([0])[1], b.train_batch([0])[1])


def test_mlp_model_is_the_ddp_demo_model() -> None:
    model = workloads.make("mlp_regression", {}).build_model()
    assert sum(p.numel() for p in model.parameters()) == 10 * 100 + 100 + 100 * 20 + 20


def test_digits_split_is_stratified_disjoint_and_complete() -> None:
    w = workloads.make("digits_cnn", {"dev_fraction": 0.25, "split_seed": 4})
    assert w.train_size() + w.dev_size() == 1797
    train_x, train_y = w.train_batch(list(range(w.train_size())))
    dev_x, dev_y = next(w.dev_batches(w.dev_size()))
    for cls in range(10):
        share = float((dev_y == cls).sum()) / float((train_y == cls).sum() + (dev_y == cls).sum())
        assert abs(share - 0.25) < 0.01
    # no image is on both sides (the digits set has no exact duplicates across classes here)
    train_keys = {tuple(row.tolist()) for row in train_x.flatten(1)}
    assert not any(tuple(row.tolist()) in train_keys for row in dev_x.flatten(1))
    assert abs(float(train_x.mean())) < 1e-5  # standardised on the training set


def asr(**overrides: Any) -> mini_asr.MiniASR:
    return mini_asr.make({**SMALL["mini_asr"], **overrides})


@pytest.mark.parametrize(("vocab", "max_frames"), [(10, 60), (2, 40)])  # (2, 40): many repeats
def test_asr_utterances_fit_ctc_and_the_options(vocab: int, max_frames: int) -> None:
    w = asr(train_size=200, max_frames=max_frames, min_tokens=3, max_tokens=6, vocab_size=vocab)
    batch = w.train_batch(list(range(w.train_size())))
    assert int(batch.feat_lens.max()) <= max_frames
    assert int(batch.token_lens.min()) >= 1 and int(batch.token_lens.max()) <= 6
    for row in range(w.train_size()):
        tokens = batch.tokens[row, : batch.token_lens[row]]
        assert int(tokens.min()) >= 1 and int(tokens.max()) <= vocab  # 0 is the blank
        repeats = int((tokens[1:] == tokens[:-1]).sum())
        frames = int(mini_asr.subsampled_length(batch.feat_lens[row]))
        assert frames >= len(tokens) + repeats  # a CTC path exists: no zero_infinity needed
        assert not batch.feats[row, batch.feat_lens[row] :].any()  # zero padding
    # global CMVN on the training set
    valid = torch.cat([batch.feats[r, : batch.feat_lens[r]] for r in range(w.train_size())])
    assert valid.mean(dim=0).abs().max() < 1e-4
    assert (valid.std(dim=0) - 1).abs().max() < 1e-2


def test_asr_dev_set_does_not_depend_on_train_size() -> None:
    # CMVN comes from the first CMVN_UTTERANCES training utterances, which train_size
    # does not change once it is at least that large.
    n = mini_asr.CMVN_UTTERANCES
    a = next(asr(train_size=n).dev_batches(8))
    b = next(asr(train_size=n + 30).dev_batches(8))
    for x, y in zip(a, b, strict=True):
        assert torch.equal(x, y)


def test_asr_without_dropout_the_loss_draws_no_randomness() -> None:
    w = asr()
    torch.manual_seed(0)
    model = w.build_model().train()
    batch = w.train_batch([0, 1, 2])
    state = torch.get_rng_state()
    first = w.loss(model, batch)
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.equal(first, w.loss(model, batch))


def test_asr_dropout_draws_from_torch_global_rng() -> None:
    w = asr(dropout=0.2)
    torch.manual_seed(0)
    model = w.build_model().train()
    batch = w.train_batch([0, 1, 2])
    losses = []
    for seed in (5, 5, 6):
        torch.manual_seed(seed)
        losses.append(w.loss(model, batch))
    assert torch.equal(losses[0], losses[1])
    assert not torch.equal(losses[0], losses[2])


def test_asr_ter_counts_edits_after_greedy_ctc_decoding() -> None:
    assert mini_asr._edit_distance([1, 2, 3], [1, 2, 3]) == 0
    assert mini_asr._edit_distance([1, 3], [1, 2, 3]) == 1
    assert mini_asr._edit_distance([4, 2, 3, 5], [1, 2, 3]) == 2
    assert mini_asr._edit_distance([], [1, 2]) == 2


def test_asr_model_is_a_small_conformer() -> None:
    w = asr()
    model = w.build_model()
    assert isinstance(model, mini_asr.ConformerCTC)
    assert len(model.blocks) == 2
    assert 100_000 < sum(p.numel() for p in model.parameters()) < 400_000
    # Conv2dSubsampling4: 4x fewer frames
    log_probs, lens = model(torch.zeros(2, 50, mini_asr.N_MELS), torch.tensor([50, 30]))
    assert log_probs.shape == (2, 11, 25) and lens.tolist() == [11, 6]


# ---- the custom workload example ----------------------------------------------------------


@pytest.fixture
def on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    # What a user does with PYTHONPATH=. (or by installing their package).
    monkeypatch.syspath_prepend(str(ROOT))


def test_custom_example_loads_by_path_and_honours_the_contract(on_path: None) -> None:
    w = workloads.make("examples.custom_workload:make", {"train_size": 64, "dev_size": 20})
    assert isinstance(w, Workload)
    assert (w.train_size(), w.dev_size()) == (64, 20)
    torch.manual_seed(0)
    model = w.build_model()
    values = dev_values(w, model, batch_size=8)
    assert values["loss"].shape == (20,)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    batch = w.train_batch(list(range(64)))
    first = float(w.loss(model, batch).detach().mean())
    for _ in range(30):
        optimizer.zero_grad()
        w.loss(model, batch).mean().backward()
        optimizer.step()
    assert float(w.loss(model, batch).detach().mean()) < first
    with pytest.raises(WorkloadOptionError, match="noise"):
        workloads.make("examples.custom_workload:make", {"noise": -1})
    with pytest.raises(WorkloadOptionError, match="allowed"):
        workloads.make("examples.custom_workload:make", {"nosie": 1})


def test_asr_data_is_made_once_per_process_for_the_same_options() -> None:
    # a reused Tune actor runs the next trial of a study with the same data options
    first = asr(train_size=60)
    first.prepare()
    same_data = asr(train_size=60, d_model=16, num_blocks=1)  # another model, the same data
    same_data.prepare()
    assert same_data._splits() is first._splits()
    other = asr(train_size=60, data_seed=1)
    other.prepare()
    assert other._splits() is not first._splits()
    assert not torch.equal(other._splits()[0][0][:10], first._splits()[0][0][:10])
    # values from the cache are those a fresh generation gives
    mini_asr._LAST = None
    fresh = asr(train_size=60)
    fresh.prepare()
    assert fresh._splits() is not first._splits()
    for a, b in zip(fresh._splits()[0] + fresh._splits()[1], first._splits()[0] + first._splits()[1],
                    strict=True):
        assert torch.equal(a, b)
