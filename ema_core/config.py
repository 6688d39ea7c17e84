"""Typed experiment configs, validated at the edge (page, CLI, job) so errors name the field.

One pydantic model per experiment; ``model_dump_json()`` is what a run stores and hashes.
"""
from __future__ import annotations

import copy

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

PAPER_ALPHAS = (0.5, 0.1, 0.02)  # fast, medium, slow: the paper's three rates (Figure 1)


class DilutionConfig(BaseModel):
    """Identity decoding from EMA traces of random token streams (see :mod:`ema_core.dilution`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    alphas: tuple[float, ...] = Field(PAPER_ALPHAS, min_length=1, max_length=8)
    vocab: int = Field(64, ge=2, le=4096, description="V: words in the random stream")
    dim: int = Field(64, ge=1, le=1024, description="D: embedding dimension")
    max_lag: int = Field(24, ge=0, le=256, description="decode the token at lags 0..max_lag")
    window: int = Field(1, ge=1, le=64, description="trace states the decoder reads: 1 = current state only")
    n_train: int = Field(8192, ge=64, le=1_000_000)
    n_test: int = Field(2048, ge=64, le=1_000_000)
    ridge: float = Field(1e-2, gt=0, le=1e6, description="ridge penalty per training sample, on standardised features")
    seed: int = Field(0, ge=0, le=2**32 - 1)

    @field_validator("alphas")
    @classmethod
    def _rates(cls, v: tuple[float, ...]) -> tuple[float, ...]:
        return check_rates(v)


def check_rates(v: tuple[float, ...], distinct: bool = False) -> tuple[float, ...]:
    """The rule every config's ``alphas`` follows: each in (0, 1]; ``distinct`` when each names a feature set."""
    bad = [a for a in v if not (0.0 < a <= 1.0)]
    if bad:
        raise ValueError(f"every rate must lie in (0, 1], got {bad}")
    if distinct and len(set(v)) != len(v):
        raise ValueError(f"rates must be distinct (each names a feature set), got {list(v)}")
    return tuple(float(a) for a in v)


def field_like(model: type[BaseModel], name: str, default=None, description: str | None = None):
    """``model``'s field ``name`` (bounds, description, default) for another config to declare.

    An experiment's settings are flat (``--set units=128`` on the command line), so they repeat the
    fields of the component configs they feed; borrowing the field keeps one definition of each
    bound.  ``default`` and ``description`` override the borrowed ones.
    """
    info = copy.deepcopy(model.model_fields[name])
    if default is not None:
        info.default = default
    if description is not None:
        info.description = description
    return info


def config_error(exc: ValidationError) -> str:
    """A pydantic error as one line: ``field: what is wrong (got value)``, problems joined by '; '.

    Here, beside the configs rather than with the experiments, so that the worker can word a stored
    config the current code refuses without importing an experiment.
    """
    parts = []
    for err in exc.errors():
        loc = ".".join(str(x) for x in err["loc"]) or "config"
        msg = err["msg"].removeprefix("Value error, ")
        got = err.get("input")
        shown = repr(got)
        if err["type"] != "extra_forbidden" and not isinstance(got, dict) and len(shown) <= 60:
            msg += f" (got {shown})"
        parts.append(f"{loc}: {msg}")
    return "; ".join(parts)
