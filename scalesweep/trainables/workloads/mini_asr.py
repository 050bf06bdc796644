"""``mini_asr``: a WeNet-like conformer + CTC recogniser on synthetic speech, sized for a CPU.

Data (all from ``data_seed``, numpy only, generated at ``make``):

* A "language": ``vocab_size`` tokens (ids 1..V; 0 is the CTC blank) and a random bigram
  model over them, so sequences have structure but are not predictable from it alone.
* Each token is two spectral states (onset -> steady, interpolated over the token's frames);
  each state is a couple of Gaussian "formant" bumps over ``N_MELS`` mel-like bins.
* Speakers shift the formants (up to +-2 bins), tilt and offset the spectrum, and speak at
  their own rate; every token's duration also jitters. Utterances start and end in silence
  and sometimes pause between tokens. Neighbouring frames are blended (coarticulation) and
  Gaussian noise of std ``noise`` (times a per-utterance factor) is added.
* Train and dev use disjoint speakers. Features are normalised with global CMVN computed on
  the first training utterances, as WeNet computes ``global_cmvn`` on its training data.

Model, after WeNet's ``conformer`` recipe at a tiny scale: Conv2dSubsampling4 (two 3x3
stride-2 convs: 4x fewer frames), sinusoidal positions, ``num_blocks`` conformer blocks
(FFN/2, MHSA, convolution module, FFN/2, each pre-norm, plus a final norm), a CTC head.
The convolution module uses LayerNorm instead of BatchNorm (WeNet's ``cnn_module_norm:
layer_norm``): batch statistics would make a sample's loss depend on its micro-batch, and
BatchNorm's running buffers are not updated identically by DDP and by simulated ranks.

Per-sample loss: CTC summed over the utterance, not divided by its length (WeNet divides the
batch's summed CTC loss by the batch size: a per-utterance loss). Padding is masked
everywhere, so a sample's loss does not depend on what it is batched with.
Dev metrics: ``loss`` and ``ter``, the per-utterance token error rate of greedy CTC decoding
(edit distance / reference length; the loop's mean is the mean per-utterance TER, which
weights short utterances more than a corpus TER would).
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from scalesweep.trainables.workloads._common import index_array, merge_options, require, rng
from scalesweep.trainables.workloads.base import Direction

N_MELS = 40
BLANK = 0
HEADS = 4
CONV_KERNEL = 15  # depthwise kernel of the convolution module, as WeNet's AISHELL conformer
SUBSAMPLING_CHANNELS = 16  # WeNet uses d_model here; 16 keeps the convs cheap on a CPU
FF_RATIO = 2  # FFN hidden = FF_RATIO * d_model (WeNet AISHELL: 8); 2 keeps an epoch within ~3 s on a CPU
CMVN_UTTERANCES = 500  # CMVN from the first ones, so dev does not depend on train_size

OPTIONS: dict[str, Any] = {
    "train_size": 4000,  # utterances
    "dev_size": 400,
    "train_speakers": 50,
    "dev_speakers": 10,  # disjoint from the training speakers
    "vocab_size": 24,  # real tokens; the CTC blank comes on top
    "min_tokens": 2,
    "max_tokens": 6,
    "max_frames": 128,  # longer utterances lose tokens from their end until they fit
    "noise": 1.0,  # std of the additive noise; formant bumps have heights 1..2.5
    "data_seed": 0,
    "d_model": 64,
    "num_blocks": 2,
    "dropout": 0.0,  # off by default: dropout masks are the one source of run-to-run noise
}


class SpeechBatch(NamedTuple):
    feats: torch.Tensor  # [B, T, N_MELS], zero-padded, default dtype
    feat_lens: torch.Tensor  # [B] frames
    tokens: torch.Tensor  # [B, S] token ids, padded with BLANK
    token_lens: torch.Tensor  # [B]


# ---- data ---------------------------------------------------------------------------------


def subsampled_length(frames: int | torch.Tensor) -> Any:
    """Frames left after two unpadded 3x3 stride-2 convolutions."""
    return ((frames - 1) // 2 - 1) // 2


class _Language:
    """Tokens, their spectral states and durations, and the bigram model: shared by splits."""

    def __init__(self, vocab: int, gen: np.random.Generator) -> None:
        self.vocab = vocab
        # [V + 1, 2 states, 2 bumps]: row 0 (blank/silence) has no bumps (height 0).
        self.centers = gen.uniform(4, N_MELS - 4, (vocab + 1, 2, 2))
        self.widths = gen.uniform(1.5, 3.5, (vocab + 1, 2, 2))
        self.heights = gen.uniform(1.0, 2.5, (vocab + 1, 2, 2))
        self.heights[BLANK] = 0.0
        self.base_frames = gen.integers(6, 11, vocab + 1)  # each token's typical length
        self.bigram = gen.dirichlet(np.full(vocab, 0.5), size=vocab)

    def templates(self, shift: float, tilt: float, gain: float) -> np.ndarray:
        """[V + 1, 2, N_MELS] spectra of every token state for one speaker; silence is row 0."""
        bins = np.arange(N_MELS)
        z = (bins - (self.centers[..., None] + shift)) / self.widths[..., None]
        bumps = (self.heights[..., None] * np.exp(-0.5 * z**2)).sum(axis=2)
        out: np.ndarray = bumps + tilt * (bins / (N_MELS - 1) - 0.5) + gain
        out[BLANK] -= 1.0  # silence is quieter than any speech
        return out

    def sentence(self, gen: np.random.Generator, length: int) -> list[int]:
        tokens = [int(gen.integers(self.vocab))]
        for _ in range(length - 1):
            tokens.append(int(gen.choice(self.vocab, p=self.bigram[tokens[-1]])))
        return [t + 1 for t in tokens]  # ids 1..V


def _frames(sent: list[int], natural: int) -> int:
    """Frames for an utterance: its natural length, or more if CTC needs it.

    CTC needs an output frame per token plus a blank between repeated tokens, and
    subsampled_length(4n + 3) = n.
    """
    need = len(sent) + sum(a == b for a, b in itertools.pairwise(sent))
    return max(natural, 4 * need + 3)


def _split(
    lang: _Language, gen: np.random.Generator, n_utts: int, n_speakers: int, opts: dict[str, Any]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Features [frames, N_MELS] (un-normalised), frame offsets, tokens, token offsets."""
    shift = gen.uniform(-2.0, 2.0, n_speakers)
    tilt = gen.uniform(-1.0, 1.0, n_speakers)
    gain = gen.normal(0.0, 0.3, n_speakers)
    rate = gen.uniform(0.8, 1.25, n_speakers)
    templates = np.stack(
        [lang.templates(shift[s], tilt[s], gain[s]) for s in range(n_speakers)]
    )  # [speakers, V + 1, 2, N_MELS]

    frame_spk, frame_tok, frame_alpha, frame_noise = [], [], [], []
    frame_offsets, tokens, token_offsets = [0], [], [0]
    for _ in range(n_utts):
        spk = int(gen.integers(n_speakers))
        sent = lang.sentence(gen, int(gen.integers(opts["min_tokens"], opts["max_tokens"] + 1)))
        durs = [max(3, round(lang.base_frames[t] * rate[spk] * gen.uniform(0.8, 1.2))) for t in sent]
        pauses = [int(gen.integers(2, 6)) if gen.random() < 0.15 else 0 for _ in sent]
        lead, trail = int(gen.integers(3, 9)), int(gen.integers(3, 9))
        while len(sent) > 1 and _frames(sent, lead + trail + sum(durs) + sum(pauses)) > opts["max_frames"]:
            sent, durs, pauses = sent[:-1], durs[:-1], pauses[:-1]
        total = _frames(sent, lead + trail + sum(durs) + sum(pauses))
        trail = total - lead - sum(durs) - sum(pauses)  # the CTC padding is trailing silence

        toks, alphas = [np.zeros(lead, np.int64)], [np.zeros(lead)]
        for tok, dur, pause in zip(sent, durs, pauses, strict=True):
            toks += [np.full(dur, tok), np.zeros(pause, np.int64)]
            # onset state glides into the steady state over the first half of the token
            alphas += [np.minimum(1.0, np.arange(dur) / max(1.0, (dur - 1) / 2)), np.zeros(pause)]
        toks.append(np.zeros(trail, np.int64))
        alphas.append(np.zeros(trail))
        frame_tok.append(np.concatenate(toks))
        frame_alpha.append(np.concatenate(alphas))
        frame_spk.append(np.full(total, spk))
        # Drawn per utterance, so the first k utterances do not depend on how many follow.
        frame_noise.append(opts["noise"] * gen.uniform(0.7, 1.3) * gen.standard_normal((total, N_MELS)))
        frame_offsets.append(frame_offsets[-1] + total)
        tokens += sent
        token_offsets.append(len(tokens))

    spk_f, tok_f = np.concatenate(frame_spk), np.concatenate(frame_tok)
    alpha = np.concatenate(frame_alpha)[:, None]
    clean = (1 - alpha) * templates[spk_f, tok_f, 0] + alpha * templates[spk_f, tok_f, 1]
    # Coarticulation: blend each frame with its neighbours inside the same utterance.
    offsets = np.asarray(frame_offsets)
    idx = np.arange(len(clean))
    prev, nxt = idx - 1, idx + 1
    prev[offsets[:-1]] = offsets[:-1]
    nxt[offsets[1:] - 1] = offsets[1:] - 1
    smooth = 0.5 * clean + 0.25 * clean[prev] + 0.25 * clean[nxt]
    return (
        smooth + np.concatenate(frame_noise),
        offsets,
        np.asarray(tokens, dtype=np.int64),
        np.asarray(token_offsets, dtype=np.int64),
    )


# ---- model --------------------------------------------------------------------------------


class Conv2dSubsampling4(nn.Module):
    """WeNet's Conv2dSubsampling4: [B, T, F] -> [B, T', d_model] with T' = ((T-1)//2-1)//2."""

    def __init__(self, d_model: int, dropout: float) -> None:
        super().__init__()
        c = SUBSAMPLING_CHANNELS
        self.conv = nn.Sequential(nn.Conv2d(1, c, 3, 2), nn.ReLU(), nn.Conv2d(c, c, 3, 2), nn.ReLU())
        self.out = nn.Linear(c * subsampled_length(N_MELS), d_model)
        self.dropout = nn.Dropout(dropout)
        self.xscale = math.sqrt(d_model)
        # Sinusoidal positions (no parameters, no RNG), long enough for any max_frames here.
        pos = torch.arange(1024).unsqueeze(1)
        inv = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
        pe = torch.zeros(1024, d_model)
        pe[:, 0::2], pe[:, 1::2] = torch.sin(pos * inv), torch.cos(pos * inv)
        self.pe: torch.Tensor
        self.register_buffer("pe", pe, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(x.unsqueeze(1))  # [B, C, T', F']
        b, c, t, f = x.shape
        x = self.out(x.transpose(1, 2).reshape(b, t, c * f))
        return self.dropout(x * self.xscale + self.pe[:t])


class FeedForward(nn.Module):
    def __init__(self, d_model: int, dropout: float) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.LayerNorm(d_model),
            nn.Linear(d_model, FF_RATIO * d_model),
            nn.SiLU(),  # "swish", as WeNet's conformer
            nn.Dropout(dropout),
            nn.Linear(FF_RATIO * d_model, d_model),
            nn.Dropout(dropout),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.net(x)
        return out


class SelfAttention(nn.Module):
    def __init__(self, d_model: int, dropout: float) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.dropout = dropout

    def forward(self, x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm(x)).view(b, t, 3, HEADS, d // HEADS).permute(2, 0, 3, 1, 4)
        # Keys at padded frames are masked out; padded queries still see valid keys, so no
        # row is fully masked (that would give NaN).
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=valid[:, None, None, :], dropout_p=self.dropout * self.training
        )
        out: torch.Tensor = self.proj(y.transpose(1, 2).reshape(b, t, d))
        return out


class ConvModule(nn.Module):
    """Conformer convolution module on [B, T, d]; pointwise convs are Linear layers (same map)."""

    def __init__(self, d_model: int, dropout: float) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.pointwise1 = nn.Linear(d_model, 2 * d_model)
        self.depthwise = nn.Conv1d(d_model, d_model, CONV_KERNEL, padding=CONV_KERNEL // 2, groups=d_model)
        self.conv_norm = nn.LayerNorm(d_model)
        self.pointwise2 = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        y = F.glu(self.pointwise1(self.norm(x)), dim=-1)
        # Zero the padding right before the only op that mixes time steps (WeNet masks before
        # pointwise1, which lets the bias leak into the last valid frames).
        y = y.masked_fill(~valid[:, :, None], 0.0).transpose(1, 2).unsqueeze(2)  # [B, d, 1, T]
        # The depthwise conv run as a 1xK Conv2d: same numbers, ~1.5x faster on CPU than
        # Conv1d's backward at these sizes.
        w, b, k = self.depthwise.weight.unsqueeze(2), self.depthwise.bias, CONV_KERNEL
        y = F.conv2d(y, w, b, padding=(0, k // 2), groups=y.shape[1]).squeeze(2).transpose(1, 2)
        out: torch.Tensor = self.dropout(self.pointwise2(F.silu(self.conv_norm(y))))
        return out


class ConformerBlock(nn.Module):
    def __init__(self, d_model: int, dropout: float) -> None:
        super().__init__()
        self.ff1 = FeedForward(d_model, dropout)
        self.attn = SelfAttention(d_model, dropout)
        self.attn_dropout = nn.Dropout(dropout)
        self.conv = ConvModule(d_model, dropout)
        self.ff2 = FeedForward(d_model, dropout)
        self.norm = nn.LayerNorm(d_model)

    def forward(self, x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        x = x + 0.5 * self.ff1(x)
        x = x + self.attn_dropout(self.attn(x, valid))
        x = x + self.conv(x, valid)
        x = x + 0.5 * self.ff2(x)
        out: torch.Tensor = self.norm(x)
        return out


class ConformerCTC(nn.Module):
    def __init__(self, vocab: int, d_model: int, num_blocks: int, dropout: float) -> None:
        super().__init__()
        self.embed = Conv2dSubsampling4(d_model, dropout)
        self.blocks = nn.ModuleList(ConformerBlock(d_model, dropout) for _ in range(num_blocks))
        self.after_norm = nn.LayerNorm(d_model)
        self.ctc = nn.Linear(d_model, vocab + 1)

    def forward(self, feats: torch.Tensor, feat_lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probabilities [B, T', V + 1] and their lengths [B]."""
        x = self.embed(feats)
        lens = subsampled_length(feat_lens)
        valid = torch.arange(x.shape[1], device=x.device)[None, :] < lens[:, None]
        for block in self.blocks:
            x = block(x, valid)
        return F.log_softmax(self.ctc(self.after_norm(x)), dim=-1), lens


# ---- batching -----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Split:
    """A split as batches are cut from it: the frames and tokens where batches are made (the
    host, or the trial's device once placed), each with one padding row at its end (a zero
    frame, a BLANK), and where each utterance starts, on the host."""

    feats: torch.Tensor  # [frames + 1, N_MELS], float32
    tokens: torch.Tensor  # [tokens + 1]
    offsets: np.ndarray  # [utterances + 1] frame offsets
    token_offsets: np.ndarray  # [utterances + 1]

    @classmethod
    def of(cls, data: tuple[torch.Tensor, ...], device: torch.device | None = None) -> _Split:
        feats, offsets, tokens, token_offsets = data
        feats = torch.cat([feats, feats.new_zeros(1, N_MELS)])
        tokens = torch.cat([tokens, tokens.new_full((1,), BLANK)])
        if device is not None:
            feats, tokens = feats.to(device), tokens.to(device)
        return cls(feats, tokens, offsets.numpy(), token_offsets.numpy())

    def batch(self, idx: np.ndarray) -> SpeechBatch:
        """Utterances ``idx`` zero-padded to the longest: the host lays out which row every
        frame and token of the batch comes from (padding: the last row), the device gathers
        them in one indexing each; no Python loop over utterances, no read from the device."""
        feat_lens = self.offsets[idx + 1] - self.offsets[idx]
        token_lens = self.token_offsets[idx + 1] - self.token_offsets[idx]
        device = self.feats.device
        rows = _ragged_rows(self.offsets[idx], feat_lens, len(self.feats) - 1)
        x = self.feats[torch.from_numpy(rows).to(device, non_blocking=True)]
        rows = _ragged_rows(self.token_offsets[idx], token_lens, len(self.tokens) - 1)
        y = self.tokens[torch.from_numpy(rows).to(device, non_blocking=True)]
        return SpeechBatch(x.to(torch.get_default_dtype()),
                           torch.from_numpy(feat_lens).to(device, non_blocking=True), y,
                           torch.from_numpy(token_lens).to(device, non_blocking=True))


def _ragged_rows(starts: np.ndarray, lengths: np.ndarray, pad: int) -> np.ndarray:
    """[n, longest] row numbers: row ``starts[i] + j`` for ``j < lengths[i]``, else ``pad``."""
    width = int(lengths.max()) if len(lengths) else 0
    cols = np.arange(width, dtype=np.int64)
    rows = starts[:, None] + cols[None, :]
    rows[cols[None, :] >= lengths[:, None]] = pad
    return rows


# ---- workload -----------------------------------------------------------------------------


def _edit_distance(a: Sequence[int], b: Sequence[int]) -> int:
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        diag, row[0] = row[0], i
        for j, y in enumerate(b, 1):
            diag, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, diag + (x != y))
    return row[-1]


#: options that shape the model, not the data
MODEL_OPTIONS = frozenset({"d_model", "num_blocks", "dropout"})
#: the last data generated in this process, with its options. Tune reuses a trial's process
#: for the next trial of the sweep, and every trial of a study reads the same data: making it
#: again cost 3.6 CPU s a trial for the WeNet study's 9192 utterances (about 4 % of a trial).
#: One entry only, so a process holds at most one dataset besides the one in use; the tensors
#: are only ever indexed (batches are copies), never written, so sharing them is safe.
_LAST: tuple[str, tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]] | None = None


class MiniASR:
    metrics: Mapping[str, Direction] = {"loss": "min", "ter": "min"}

    def __init__(self, options: Mapping[str, Any]) -> None:
        opts = merge_options(options, OPTIONS)
        for name in ("train_size", "dev_size", "train_speakers", "dev_speakers", "num_blocks"):
            require(opts[name] >= 1, name, opts[name], "must be at least 1")
        require(opts["vocab_size"] >= 2, "vocab_size", opts["vocab_size"], "must be at least 2")
        require(opts["min_tokens"] >= 1, "min_tokens", opts["min_tokens"], "must be at least 1")
        require(
            opts["max_tokens"] >= opts["min_tokens"],
            "max_tokens",
            opts["max_tokens"],
            f"must be at least min_tokens ({opts['min_tokens']})",
        )
        # Room for one token of the longest kind at the slowest rate, a pause and the silences
        # (15 + 5 + 8 + 8 frames); 1024 is the length of the positional table.
        require(40 <= opts["max_frames"] <= 1024, "max_frames", opts["max_frames"], "must lie in [40, 1024]")
        require(opts["noise"] >= 0, "noise", opts["noise"], "must be at least 0")
        require(
            opts["d_model"] >= HEADS and opts["d_model"] % (2 * HEADS) == 0,
            "d_model",
            opts["d_model"],
            f"must be a positive multiple of {2 * HEADS} ({HEADS} heads, sin/cos pairs)",
        )
        require(0 <= opts["dropout"] < 1, "dropout", opts["dropout"], "must lie in [0, 1)")
        self.options = opts
        # WeNet's AISHELL conformer recipe (adam, lr 0.002, warmuplr), with warmup sized to this
        # data: at world size 4, 4000 utterances / (16 x 4) = 62 updates per epoch, so 30
        # epochs are 1860 updates and 300 warmup updates are 16% of them (~5 epochs).
        self.defaults: Mapping[str, Any] = {
            "optimizer": {"type": "adam", "lr": 0.002},
            "scheduler": {"type": "warmuplr", "warmup_steps": 300},
            "per_worker_batch": 16,
            "epochs": 30,
            "eval_every_epochs": 1,
        }
        # Generated on first use (1 CPU second for 4096 utterances): the planner makes a
        # workload only to read train_size(), and a ddp trial hands its workers a copy.
        self._data: tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]] | None = None
        # (train, dev) as batches are cut from them: on the host, or the trial's device (place)
        self._batching: tuple[_Split, _Split] | None = None

    def _splits(self) -> tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]:
        """(train, dev) tensors: features, offsets, tokens, token offsets."""
        global _LAST
        key = json.dumps({k: v for k, v in self.options.items() if k not in MODEL_OPTIONS},
                         sort_keys=True)
        if self._data is None and _LAST is not None and _LAST[0] == key:
            self._data = _LAST[1]
        if self._data is None:
            opts = self.options
            lang = _Language(opts["vocab_size"], rng(opts["data_seed"], 0))
            train = _split(lang, rng(opts["data_seed"], 1), opts["train_size"], opts["train_speakers"], opts)
            dev = _split(lang, rng(opts["data_seed"], 2), opts["dev_size"], opts["dev_speakers"], opts)
            calib = train[0][: train[1][min(CMVN_UTTERANCES, opts["train_size"])]]
            mean, std = calib.mean(axis=0), calib.std(axis=0)
            # float32 storage halves the memory; float64 runs see the same values, widened.
            self._data = (self._store(train, mean, std), self._store(dev, mean, std))
            _LAST = (key, self._data)
        return self._data

    def prepare(self) -> None:
        """Generate the data now (before this workload is copied to other processes)."""
        self._splits()

    def place(self, device: torch.device) -> None:
        """Keep the frames and tokens on ``device``: a batch is then gathered there, and only
        its row numbers and lengths are copied to it (base.py's ``place``)."""
        train, dev = self._splits()
        self._batching = _Split.of(train, device), _Split.of(dev, device)

    def _split_for_batches(self) -> tuple[_Split, _Split]:
        if self._batching is None:
            train, dev = self._splits()
            self._batching = _Split.of(train), _Split.of(dev)
        return self._batching

    @staticmethod
    def _store(
        split: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
        mean: np.ndarray,
        std: np.ndarray,
    ) -> tuple[torch.Tensor, ...]:
        feats, offsets, tokens, token_offsets = split
        normed = ((feats - mean) / std).astype(np.float32)
        return tuple(torch.from_numpy(a) for a in (normed, offsets, tokens, token_offsets))

    def train_size(self) -> int:
        return int(self.options["train_size"])

    def dev_size(self) -> int:
        return int(self.options["dev_size"])

    def build_model(self) -> nn.Module:
        o = self.options
        return ConformerCTC(o["vocab_size"], o["d_model"], o["num_blocks"], o["dropout"])

    @property
    def fusable(self) -> bool:
        """Padding is masked everywhere, so a sample's loss ignores its batch; but dropout
        masks are drawn per micro-batch from the loop's reseeded RNG, which a fused pass
        would draw differently."""
        return bool(self.options["dropout"] == 0.0)

    def sample_lengths(self, indices: Sequence[int]) -> list[int]:
        """Frames per utterance: what a batch pads to its longest of."""
        offsets = self._split_for_batches()[0].offsets
        idx = index_array(indices, self.train_size())
        lengths: list[int] = (offsets[idx + 1] - offsets[idx]).tolist()
        return lengths

    def train_batch(self, indices: Sequence[int]) -> SpeechBatch:
        return self._split_for_batches()[0].batch(index_array(indices, self.train_size()))

    def dev_batches(self, batch_size: int) -> Iterator[SpeechBatch]:
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, but got {batch_size=}")
        dev = self._split_for_batches()[1]
        for start in range(0, self.dev_size(), batch_size):
            yield dev.batch(np.arange(start, min(start + batch_size, self.dev_size()), dtype=np.int64))

    @staticmethod
    def _ctc(log_probs: torch.Tensor, lens: torch.Tensor, batch: SpeechBatch) -> torch.Tensor:
        return F.ctc_loss(
            log_probs.transpose(0, 1),  # [T', B, V + 1]
            batch.tokens,
            lens,
            batch.token_lens,
            blank=BLANK,
            reduction="none",  # summed over each utterance: the per-utterance loss
            zero_infinity=True,
        )

    def loss(self, model: nn.Module, batch: SpeechBatch) -> torch.Tensor:
        log_probs, lens = model(batch.feats, batch.feat_lens)
        return self._ctc(log_probs, lens, batch)

    def evaluate(self, model: nn.Module, batch: SpeechBatch) -> Mapping[str, torch.Tensor]:
        with torch.no_grad():
            log_probs, lens = model(batch.feats, batch.feat_lens)
            loss = self._ctc(log_probs, lens, batch)
            best = log_probs.argmax(dim=-1).tolist()
            # read to the host once per batch, not once per utterance
            tokens, token_lens = batch.tokens.tolist(), batch.token_lens.tolist()
            ter = []
            for row, (path, n) in enumerate(zip(best, lens.tolist(), strict=True)):
                # greedy CTC: collapse repeats, then drop blanks
                hyp = [t for k, t in enumerate(path[:n]) if t != BLANK and (k == 0 or t != path[k - 1])]
                ref = tokens[row][: token_lens[row]]
                ter.append(_edit_distance(hyp, ref) / len(ref))
        return {"loss": loss, "ter": torch.tensor(ter, dtype=loss.dtype)}


def make(options: Mapping[str, Any]) -> MiniASR:
    return MiniASR(options)
