"""A trained language model after its run: its weights as the run keeps them, sampled continuations, and
passages of held-out text to prompt it with.

The ``lm`` kind keeps its final weights with the run, beside the tokenizer its ids need
(``artifacts/model.pt`` and ``artifacts/tokenizer.json``, :data:`MODEL_ARTIFACT`,
:data:`TOKENIZER_ARTIFACT`): the model's ``state_dict``, float32 tensors on the CPU (the float64 α of
SPEN's blocks as they are), loadable with ``torch.load(..., weights_only=True)``; ≈ 4 bytes a parameter
(tiny: 1.4M parameters, ≈ 5.6 MB).  Its checkpoints are no substitute: they resume training, so the
newest is the last one before the end (the quick preset's is at step 200 of 300), and only a few are
kept.  :func:`ema_core.studies.content.evaluation.load_trained` reads a run's model back;
:func:`sample` continues a prompt with it.

    >>> from ema_core.studies.content.evaluation import load_trained
    >>> trained = load_trained("lm-0123456789ab-s0")                       # (config, model, tokenizer)
    >>> sample(trained.model, trained.tokenizer, "It was a truth", 40, temperature=0.8, top_k=50, seed=0,
    ...        context=trained.config.train.seq_len)
"""
from __future__ import annotations

import io
import re

import numpy as np
import torch
from tokenizers import Tokenizer
from torch import nn

from ema_core.lm.data import CorpusConfig
from ema_core.lm.gpt import GPT
from ema_core.lm.tokenizer import EOT, eot_id

MODEL_ARTIFACT = "model.pt"
TOKENIZER_ARTIFACT = "tokenizer.json"


def weights_bytes(model: nn.Module) -> bytes:
    """The model's ``state_dict`` as the bytes of ``artifacts/model.pt`` (tensors on the CPU)."""
    # .cpu() is the tensor itself on the CPU: the GPT's tied embedding and read-out stay one storage.
    state = {name: t.detach().cpu() for name, t in model.state_dict().items()}
    buf = io.BytesIO()
    torch.save(state, buf)
    return buf.getvalue()


def load_weights(model: nn.Module, data: bytes) -> nn.Module:
    """``model`` with the weights of :func:`weights_bytes`'s ``data`` (every tensor named, no other)."""
    state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)  # data, never code to run
    if not isinstance(state, dict):
        raise ValueError(f"not a state dict but {type(state).__name__}")
    model.load_state_dict(state)
    return model


def context_of(model: nn.Module, context: int | None = None) -> int:
    """How many tokens the model reads before the next: ``context``, else the GPT's positional table.

    SPEN has no table (its traces run over any length), but it was trained on windows of ``seq_len``
    tokens that start from an empty state, so it is given the same crop and told it by the caller.
    """
    if isinstance(model, GPT):
        rows = model.cfg.seq_len
        if context is not None and context > rows:
            raise ValueError(f"context {context} is longer than the GPT's positional table ({rows} rows)")
        return context or rows
    if context is None:
        raise ValueError("SPEN has no window of its own: pass context, the seq_len it was trained on")
    if context < 1:
        raise ValueError(f"context must be at least 1 token, got {context}")
    return context


@torch.no_grad()
def sample_ids(model: nn.Module, tokenizer: Tokenizer, prompt: str, n_tokens: int, temperature: float = 1.0,
               top_k: int | None = None, seed: int = 0, *, context: int | None = None) -> list[int]:
    """The ``n_tokens`` ids that continue ``prompt``, drawn one at a time; the same for the same seed.

    Each step runs the model on the last ``context`` tokens (:func:`context_of`: prompt and what was
    drawn so far), as it read its training windows: the GPT cannot see further (its positional table),
    and SPEN, whose traces start empty at each window, is given the same crop rather than a longer
    history it never trained on.  ``temperature`` 0 takes the most likely token; otherwise the next
    token is drawn from softmax(logits / temperature), restricted to the ``top_k`` most likely when
    given, by a generator seeded with ``seed``.  An empty prompt starts a document (the end-of-document
    token before it).  The model stays on its device; the draw is made on the CPU.
    """
    if n_tokens < 0:
        raise ValueError(f"n_tokens must be ≥ 0, got {n_tokens}")
    if not temperature >= 0:
        raise ValueError(f"temperature must be ≥ 0, got {temperature}")
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k must be at least 1 (or None: every token), got {top_k}")
    window = context_of(model, context)
    ids = tokenizer.encode(prompt, add_special_tokens=False).ids if prompt else []
    ids = ids or [eot_id(tokenizer)]
    device = next(model.parameters()).device
    g = torch.Generator().manual_seed(int(seed))
    was_training = model.training
    model.eval()
    drawn: list[int] = []
    try:
        for _ in range(n_tokens):
            x = torch.tensor([ids[-window:]], dtype=torch.long, device=device)  # (1, ≤ window)
            logits = model(x)[0, -1].float().cpu()  # (V,)
            nxt = _draw(logits, temperature, top_k, g)
            ids.append(nxt)
            drawn.append(nxt)
    finally:
        model.train(was_training)
    return drawn


def _draw(logits: torch.Tensor, temperature: float, top_k: int | None, g: torch.Generator) -> int:
    if temperature == 0:
        return int(torch.argmax(logits))
    logits = logits.double() / temperature
    if top_k is not None and top_k < logits.numel():
        kth = torch.topk(logits, top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return int(torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=g))


def sample(model: nn.Module, tokenizer: Tokenizer, prompt: str, n_tokens: int, temperature: float = 1.0,
           top_k: int | None = None, seed: int = 0, *, context: int | None = None) -> str:
    """The continuation of ``prompt`` as text (:func:`sample_ids`'s ids decoded); an end of document
    shows as ``<|endoftext|>`` (the model's own mark that a new text begins)."""
    ids = sample_ids(model, tokenizer, prompt, n_tokens, temperature, top_k, seed, context=context)
    return tokenizer.decode(ids, skip_special_tokens=False)


# A paragraph starts a document or follows a blank line.
_PARAGRAPH = re.compile(r"\n[^\S\n]*\n\s*")
# Where a passage may end: after a sentence's last mark (and a closing quote), before white space.
_SENTENCE_END = re.compile(r"[.!?][\"'”’)]*(?=\s)")


def held_out_passages(data: CorpusConfig, n: int = 5, *, chars: int = 500, seed: int = 0) -> list[str]:
    """Up to ``n`` passages of the held-out text ``data`` names, each a paragraph's start of about ``chars``
    characters ending at a sentence's end; the same for the same seed (and text).

    For a prompt from text the models never trained on: the held-out novel of an Austen run, the last
    documents of a local corpus.  Paragraphs shorter than a fifth of ``chars`` (chapter headings) are not
    drawn; a passage keeps the text's own line breaks, as the models read it.
    """
    if n < 1 or chars < 20:
        raise ValueError(f"n must be ≥ 1 and chars ≥ 20, got n={n}, chars={chars}")
    starts: list[tuple[int, int]] = []  # (document, offset of a paragraph's start)
    docs = data.load().val
    for d, doc in enumerate(docs):
        offsets = [0, *(m.end() for m in _PARAGRAPH.finditer(doc))]
        for a, b in zip(offsets, [*offsets[1:], len(doc)]):
            if len(doc[a:b].strip()) >= chars // 5 and EOT not in doc[a:a + chars]:
                starts.append((d, a))
    if not starts:
        return []
    rng = np.random.default_rng(seed)
    picked = sorted(rng.choice(len(starts), size=min(n, len(starts)), replace=False))
    return [_passage(docs[d][a:a + chars + 1]) for d, a in (starts[i] for i in picked)]


def _passage(text: str) -> str:
    """``text`` cut at its last sentence end past a third of it (else at its last space)."""
    ends = [m.end() for m in _SENTENCE_END.finditer(text) if m.end() >= len(text) // 3]
    if ends:
        return text[:ends[-1]].strip()
    space = text.rstrip().rfind(" ")
    return (text[:space] if space > 0 else text).strip()
