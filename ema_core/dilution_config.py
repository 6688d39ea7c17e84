"""The dilution study's configs: the random token stream, its stored traces, and how they are decoded.

Read by the closed-form measurement (:mod:`ema_core.dilution`), its page, and the trained sweep
(:mod:`ema_core.studies.dilution.experiment`, whose ``stream`` group is :class:`StreamConfig` whole).
A module of its own, pydantic only, rather than part of :mod:`ema_core.dilution`: that module
brings pandas, scipy and numba (1.1 s to import), which the registry, and so every CLI command and
every worker, would then pay for a config class.
"""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ema_core.config import PAPER_ALPHAS, check_rates, seed_field

# How the token at lag k is named from a stored trace (see ema_core.dilution): a linear read-out
# trained on the stream, or the peel, which knows the embedding table and the rates and needs no training.
Decoder = Literal["linear", "peel"]
# The number format a trace is stored in once computed (in float64): what a decoder reads.
Precision = Literal["float64", "float32", "bfloat16", "float16"]




class StreamConfig(BaseModel):
    """The random token stream, its traces and what is decoded from them: shared by the closed-form
    measurement (:class:`DilutionConfig`) and the trained sweep (its ``stream`` group)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    vocab: int = Field(64, ge=2, le=4096, description="V: words in the random stream")
    dim: int = Field(64, ge=1, le=1024, description="D: embedding dimension")
    max_lag: int = Field(24, ge=0, le=256, description="decode the token at lags 0..max_lag")
    window: int = Field(1, ge=1, le=64, description="trace states the decoder reads: 1 = current state only")
    n_train: int = Field(8192, ge=64, le=1_000_000)
    n_test: int = Field(2048, ge=64, le=1_000_000)
    # The stored trace: computed in float64, plus Gaussian noise of this σ per coordinate (in trace
    # units, drawn from the config's seed), then rounded to ``precision``.  The defaults (float32, no
    # noise) keep what runs made before these settings stored, up to the last bit of some values
    # (those traces were accumulated in float32 rather than rounded to it once).
    precision: Precision = Field("float32", description="the stored trace's number format")
    noise: float = Field(0.0, ge=0.0, le=10.0, description="σ of the Gaussian noise on each stored coordinate")


class DilutionConfig(StreamConfig):
    """Identity decoding from EMA traces of random token streams (see :mod:`ema_core.dilution`).

    The stream's settings are :class:`StreamConfig`'s, inherited (one declaration of each bound).
    """

    decoder: Decoder = Field("linear", description="linear: a ridge read-out trained on the stream; "
                                                   "peel: knows the embeddings and rates, no training")
    alphas: tuple[float, ...] = Field(PAPER_ALPHAS, min_length=1, max_length=8)
    ridge: float = Field(1e-2, gt=0, le=1e6, description="ridge penalty per training sample, on standardised features")
    seed: int = seed_field("seed of the stream, its embeddings and the split")

    @field_validator("alphas")
    @classmethod
    def _rates(cls, v: tuple[float, ...]) -> tuple[float, ...]:
        return check_rates(v)

    @model_validator(mode="after")
    def _peel_reads_one_state(self) -> "DilutionConfig":
        check_decoder_window(self.decoder, self.window)
        return self


def check_decoder_window(decoder: str, window: int, path: str = "window") -> None:
    """The peel decoder reads the current trace state only: a window of past states is the linear
    read-out's caveat (and would make the peel's comparison with the analytic horizon meaningless)."""
    if decoder == "peel" and window != 1:
        raise ValueError(f"{path}: the peel decoder reads the current trace state only, so {path} must be 1 "
                         f"(got {window}); use decoder=linear for a window")
