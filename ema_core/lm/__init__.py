"""The language-model experiment (PAPER.md §3): SPEN, a same-size attention baseline, and their data.

``data``   corpora through HF ``datasets`` (the embedded Austen novels by default, local files, hub
           names when online), a byte-level BPE, and token streams cached by (corpus, tokenizer)
           hash, with the byte counts that bits-per-byte needs.

Submodules are imported explicitly (``from ema_core.lm import data``): this package imports nothing,
so that ``import ema_core.lm`` stays cheap for pages and the job runner (torch and ``datasets`` load
only with the module that needs them).
"""
