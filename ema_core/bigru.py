"""The supervised baseline of the grammar study: a bidirectional GRU tagger of grammatical roles.

The paper compares its label-free SPCN against "a supervised BiGRU" and gives no size, training
or unseen-word handling (PAPER.md §5 item 6); everything below is ours.

Model, per sentence (sentences never see each other; padding never reaches a real token)::

    ids (B, L)  word ids; every id >= N_WORDS (a word never seen in training) is read as UNK
    x = Embedding(N_WORDS + 2, embed)[ids]              rows: the 147 words, UNK, PAD
    h = BiGRU(x)  (B, L, 2·hidden)                      packed by length, so each direction starts
                                                        at the sentence's own first/last token
    logits = Linear(2·hidden, N_ROLES)(h)               one role per token

Training: Adam on the mean cross-entropy over real tokens, minibatches of whole sentences in an
order drawn by a local generator, word dropout (``unk_dropout``: a training token is replaced by
UNK with that probability, so the UNK row is trained at all), early stopping on dev token
accuracy (ties broken by the lower dev loss) with the best epoch's weights restored.

Unseen words.  ``UNK = N_WORDS``, and ids are clamped to it before the embedding lookup
(:func:`encode`), so a novel word can never reach a trained word's embedding, whatever its id:

>>> encode([0, 146, 147, 272, 10**6]).tolist()
[0, 146, 147, 147, 147]

Determinism.  ``train_bigru`` is a pure function of (cfg, data, seed) on CPU with one torch
thread: initialisation, data order and every dropout mask come from local ``torch.Generator``s
seeded from ``seed``; the global RNGs are neither read nor changed.
"""
from __future__ import annotations

import time
from typing import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field
from torch import nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

from ema_core.grammar import N_ROLES, N_WORDS, Sentence
from ema_core.protocol import Cancelled

UNK = N_WORDS  # the one row every unseen word id maps to
PAD = N_WORDS + 1  # fills positions past a sentence's end; packing keeps them out of the GRU
N_ROWS = N_WORDS + 2
IGNORE = -100  # role label of padding: cross_entropy skips it


class BiGRUConfig(BaseModel):
    """Size and training of the BiGRU role tagger; the seed is passed beside it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    embed: int = Field(32, ge=1, le=4096, description="word-embedding width")
    hidden: int = Field(64, ge=1, le=4096, description="GRU units per direction")
    layers: int = Field(1, ge=1, le=8, description="stacked bidirectional GRU layers")
    dropout: float = Field(
        0.1, ge=0.0, lt=1.0,
        description="dropout on the embeddings, between layers and before the head (training only)",
    )
    lr: float = Field(3e-3, gt=0.0, le=1.0, description="Adam step size")
    batch: int = Field(64, ge=1, le=65_536, description="sentences per gradient step")
    max_epochs: int = Field(30, ge=1, le=10_000, description="passes over the training sentences, at most")
    patience: int = Field(
        3, ge=1, le=10_000,
        description="epochs without a better dev token accuracy before training stops",
    )
    unk_dropout: float = Field(
        0.05, ge=0.0, lt=1.0,
        description="probability that a training token is replaced by UNK (trains the unknown-word row)",
    )


def encode(tokens: Sequence[int] | np.ndarray) -> np.ndarray:
    """Word ids → embedding rows: training words keep their id, every id >= N_WORDS becomes UNK."""
    ids = np.asarray(tokens, dtype=np.int64)
    if ids.size and ids.min() < 0:
        raise ValueError(f"word ids must be >= 0, got {int(ids.min())}")
    return np.minimum(ids, UNK)


def _dropout(x: torch.Tensor, p: float, generator: torch.Generator | None) -> torch.Tensor:
    # Inverted dropout with an explicit generator: nn.Dropout draws from the global RNG, which
    # would make training depend on (and change) state outside (cfg, data, seed).
    if p == 0.0:
        return x
    keep = torch.empty_like(x).bernoulli_(1.0 - p, generator=generator)
    return x * keep / (1.0 - p)


class BiGRUTagger(nn.Module):
    """Embedding → stacked bidirectional GRU over each sentence → linear head to the 20 roles."""

    def __init__(self, cfg: BiGRUConfig, generator: torch.Generator | None = None):
        super().__init__()
        self.cfg = cfg
        # Building the layers runs their default initialisers on the global RNG; fork it so that
        # building a model (to load a checkpoint, say) leaves the caller's RNG as it was.  The
        # weights that count are drawn again from ``generator`` below.
        with torch.random.fork_rng(devices=[]):
            self.embedding = nn.Embedding(N_ROWS, cfg.embed, padding_idx=PAD)
            # One single-layer GRU per level (not nn.GRU(num_layers=...)): the dropout between
            # levels then uses our generator, not nn.GRU's internal global-RNG dropout.
            self.grus = nn.ModuleList(
                nn.GRU(cfg.embed if i == 0 else 2 * cfg.hidden, cfg.hidden, batch_first=True, bidirectional=True)
                for i in range(cfg.layers)
            )
            self.head = nn.Linear(2 * cfg.hidden, N_ROLES)
        self.reset_parameters(generator if generator is not None else torch.Generator().manual_seed(0))

    @torch.no_grad()
    def reset_parameters(self, generator: torch.Generator) -> None:
        """PyTorch's default initialisation, drawn from ``generator`` (PAD's row stays zero)."""
        nn.init.normal_(self.embedding.weight, generator=generator)
        self.embedding.weight[PAD].zero_()
        bound = self.cfg.hidden ** -0.5
        for gru in self.grus:
            for w in gru.parameters():
                nn.init.uniform_(w, -bound, bound, generator=generator)
        bound = (2 * self.cfg.hidden) ** -0.5
        nn.init.uniform_(self.head.weight, -bound, bound, generator=generator)
        nn.init.uniform_(self.head.bias, -bound, bound, generator=generator)

    def forward(self, tokens: torch.Tensor, lengths: torch.Tensor,
                generator: torch.Generator | None = None) -> torch.Tensor:
        """Role logits (B, L, N_ROLES) for word ids (B, L), of which the first ``lengths[b]`` are real.

        Ids are clamped to UNK here as well as in :func:`encode`, so no caller can reach a word
        row with an unseen id; what stands past a sentence's end is ignored.  Logits past the
        end are the head's bias and mean nothing.  ``generator`` drives dropout in training mode.
        """
        B, L = tokens.shape
        lengths = lengths.to(torch.int64).cpu()
        real = torch.arange(L)[None, :] < lengths[:, None]
        ids = torch.where(real, tokens.clamp(max=UNK), PAD)
        p = self.cfg.dropout if self.training else 0.0
        x = self.embedding(ids)  # (B, L, embed)
        # Packed by length: the backward direction starts at each sentence's last real token and
        # no step ever reads a padded position, so a sentence's output is independent of how
        # long the others in its batch are.
        h = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        # Dropout on the packed rows only: the masks drawn do not depend on the padding either.
        h = PackedSequence(_dropout(h.data, p, generator), h.batch_sizes, h.sorted_indices, h.unsorted_indices)
        for gru in self.grus:
            h, _ = gru(h)
            h = PackedSequence(_dropout(h.data, p, generator), h.batch_sizes, h.sorted_indices, h.unsorted_indices)
        out, _ = pad_packed_sequence(h, batch_first=True, total_length=L)  # (B, L, 2·hidden)
        return self.head(out)


def _pad(sentences: Sequence[Sentence], with_roles: bool = True):
    """(tokens (N, L) encoded, lengths (N,), roles (N, L) with IGNORE past each end)."""
    if len(sentences) == 0:
        raise ValueError("no sentences")
    lengths = np.array([len(s.tokens) for s in sentences], dtype=np.int64)
    if lengths.min() < 1:
        raise ValueError("a sentence has no tokens")
    L = int(lengths.max())
    tokens = np.full((len(sentences), L), PAD, dtype=np.int64)
    roles = np.full((len(sentences), L), IGNORE, dtype=np.int64)
    for i, s in enumerate(sentences):
        tokens[i, : lengths[i]] = encode(s.tokens)
        if with_roles:
            roles[i, : lengths[i]] = s.roles
    return torch.from_numpy(tokens), torch.from_numpy(lengths), torch.from_numpy(roles)


def _generator(seed: int, purpose: int) -> torch.Generator:
    # Separate streams for initialisation (0) and data order + dropout (1), both fixed by seed.
    state = np.random.SeedSequence(seed, spawn_key=(purpose,)).generate_state(2, dtype=np.uint32)
    return torch.Generator().manual_seed(int(state[0]) | (int(state[1]) << 32))


def _predict_padded(model: BiGRUTagger, tokens: torch.Tensor, lengths: torch.Tensor,
                    batch: int = 512) -> np.ndarray:
    was_training = model.training
    model.eval()
    out = []
    try:
        with torch.no_grad():
            for i in range(0, len(tokens), batch):
                t, n = tokens[i : i + batch], lengths[i : i + batch]
                t = t[:, : int(n.max())]
                pred = model(t, n).argmax(-1)  # (b, L)
                real = torch.arange(t.shape[1])[None, :] < n[:, None]
                out.append(pred[real])  # row-major: sentence by sentence, token by token
    finally:
        model.train(was_training)
    return torch.cat(out).numpy()


def predict(model: BiGRUTagger, sentences: Sequence[Sentence]) -> np.ndarray:
    """Role ids (T,), flat and in the order of ``grammar.stream(sentences)``."""
    tokens, lengths, _ = _pad(sentences, with_roles=False)
    return _predict_padded(model, tokens, lengths)


def _evaluate(model: BiGRUTagger, tokens, lengths, roles, batch: int = 512) -> tuple[float, float]:
    """(token accuracy, mean cross-entropy per token) in eval mode."""
    was_training = model.training
    model.eval()
    hits, loss, count = 0, 0.0, 0
    try:
        with torch.no_grad():
            for i in range(0, len(tokens), batch):
                n = lengths[i : i + batch]
                L = int(n.max())
                t, r = tokens[i : i + batch, :L], roles[i : i + batch, :L]
                logits = model(t, n)
                real = r != IGNORE
                hits += int((logits.argmax(-1)[real] == r[real]).sum())
                loss += float(F.cross_entropy(logits.reshape(-1, N_ROLES), r.reshape(-1), ignore_index=IGNORE,
                                              reduction="sum"))
                count += int(real.sum())
    finally:
        model.train(was_training)
    return hits / count, loss / count


def train_bigru(
    cfg: BiGRUConfig,
    train: Sequence[Sentence],
    dev: Sequence[Sentence],
    seed: int,
    *,
    log: Callable[[int, dict], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> tuple[BiGRUTagger, dict]:
    """Train to early stopping on dev token accuracy; the best epoch's weights are returned.

    An epoch is better than the best so far when its dev accuracy is higher, or equal at a lower
    dev loss; training stops after ``patience`` epochs without a better one, or at ``max_epochs``.

    ``log(epoch, {"bigru/loss", "bigru/dev_acc", "bigru/dev_loss"})`` is called after each epoch
    (epochs count from 1; losses are mean cross-entropy per token, the training one averaged over
    the epoch's batches).  ``should_stop()`` is polled before every batch; when it answers True,
    :class:`Cancelled` is raised with the number of epochs finished.  The info dict holds
    ``epochs`` (run), ``best_epoch``, ``best_dev_acc``, ``best_dev_loss``, ``seconds`` (wall
    time, the one entry outside the determinism) and ``params``.
    """
    t0 = time.perf_counter()
    init_gen, data_gen = _generator(seed, 0), _generator(seed, 1)
    model = BiGRUTagger(cfg, generator=init_gen)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    padded_train, padded_dev = _pad(train), _pad(dev)

    best_acc, best_loss, best_epoch, best_state, epoch = -1.0, float("inf"), 0, None, 0
    for epoch in range(1, cfg.max_epochs + 1):
        loss_sum, token_count = _train_epoch(model, opt, padded_train, cfg, data_gen, epoch, should_stop)
        dev_acc, dev_loss = _evaluate(model, *padded_dev)
        if log is not None:
            log(epoch, {"bigru/loss": float(loss_sum) / token_count, "bigru/dev_acc": dev_acc,
                        "bigru/dev_loss": dev_loss})
        if _better(dev_acc, dev_loss, best_acc, best_loss):
            best_acc, best_loss, best_epoch = dev_acc, dev_loss, epoch
            best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        elif epoch - best_epoch >= cfg.patience:
            break
    model.load_state_dict(best_state)
    model.eval()
    return model, _info(model, epoch, best_epoch, best_acc, best_loss, t0)


def _train_epoch(model: BiGRUTagger, opt: torch.optim.Optimizer, padded, cfg: BiGRUConfig,
                 data_gen: torch.Generator, epoch: int,
                 should_stop: Callable[[], bool] | None) -> tuple[torch.Tensor, int]:
    """One pass over the shuffled training set; the summed token loss (float64) and the token count."""
    tokens, lengths, roles = padded
    n = len(tokens)
    model.train()
    order = torch.randperm(n, generator=data_gen)
    loss_sum = torch.zeros((), dtype=torch.float64)
    token_count = 0
    for i in range(0, n, cfg.batch):
        if should_stop is not None and should_stop():
            raise Cancelled(epoch - 1)
        loss, k = _train_step(model, opt, tokens, lengths, roles, order[i : i + cfg.batch], cfg, data_gen)
        loss_sum += loss.detach().double() * k
        token_count += k
    return loss_sum, token_count


def _train_step(model: BiGRUTagger, opt: torch.optim.Optimizer, tokens, lengths, roles, idx: torch.Tensor,
                cfg: BiGRUConfig, data_gen: torch.Generator) -> tuple[torch.Tensor, int]:
    """One optimiser step on the sentences ``idx``; the batch's mean token loss and its token count."""
    b_len = lengths[idx]
    L = int(b_len.max())
    b_tok, b_roles = tokens[idx, :L], roles[idx, :L]
    real = b_roles != IGNORE
    if cfg.unk_dropout > 0:
        drop = (torch.rand(b_tok.shape, generator=data_gen) < cfg.unk_dropout) & real
        b_tok = torch.where(drop, UNK, b_tok)
    logits = model(b_tok, b_len, generator=data_gen)
    loss = F.cross_entropy(logits.reshape(-1, N_ROLES), b_roles.reshape(-1), ignore_index=IGNORE)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss, int(real.sum())


def _better(dev_acc: float, dev_loss: float, best_acc: float, best_loss: float) -> bool:
    """Whether an epoch beats the best so far: higher dev accuracy, or the same at a lower dev loss."""
    # The loss breaks ties because the grammar is unambiguous given the whole sentence, so dev
    # accuracy reaches 1.0 within a couple of epochs and, alone, would stop training on a barely
    # fitted model.
    return (dev_acc, -dev_loss) > (best_acc, -best_loss)


def _info(model: BiGRUTagger, epochs: int, best_epoch: int, best_acc: float, best_loss: float, t0: float) -> dict:
    """The info dict of :func:`train_bigru`."""
    return {
        "epochs": epochs,
        "best_epoch": best_epoch,
        "best_dev_acc": best_acc,
        "best_dev_loss": best_loss,
        "seconds": time.perf_counter() - t0,
        "params": sum(p.numel() for p in model.parameters()),
    }
