"""The language-model experiment (PAPER.md §3): SPEN, a same-size attention baseline, and their data.

Their data, in three steps (the last two cached by the corpus' content hash):

``corpus``     corpora through HF ``datasets`` (the embedded Austen novels by default, local files, hub
               names when online), cut into documents and split into train and validation.
``tokenizer``  a byte-level BPE trained on the training split (or a given tokenizer), stored as JSON.
``stream``     both splits as token streams, with the byte counts that bits-per-byte needs.
``data``       the lm config's ``data`` section and ``prepare``, which runs the three for it.

Submodules are imported explicitly (``from ema_core.lm import corpus``): this package imports nothing,
so that ``import ema_core.lm`` stays cheap for pages and the job runner (torch and ``datasets`` load
only with the module that needs them).
"""
