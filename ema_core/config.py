"""Typed experiment configs, validated at the edge (page, CLI, job) so errors name the field.

One pydantic model per experiment; ``model_dump_json()`` is what a run stores and hashes.
"""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.fields import FieldInfo

PAPER_ALPHAS = (0.5, 0.1, 0.02)  # fast, medium, slow: the paper's three rates (Figure 1)
# How the token at lag k is named from a stored trace (see ema_core.dilution): a linear read-out
# trained on the stream, or the peel, which knows the embedding table and the rates and needs no training.
Decoder = Literal["linear", "peel"]
# The number format a trace is stored in once computed (in float64): what a decoder reads.
Precision = Literal["float64", "float32", "bfloat16", "float16"]


def seed_field(description: str) -> Any:
    """The seed every config has: one set of bounds (an unsigned 32-bit integer, numpy's limit)."""
    return Field(0, ge=0, le=2**32 - 1, description=description)


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


def check_rates(v: tuple[float, ...], distinct: bool = False) -> tuple[float, ...]:
    """The rule every config's ``alphas`` follows: each in (0, 1]; ``distinct`` when each names a feature set."""
    bad = [a for a in v if not (0.0 < a <= 1.0)]
    if bad:
        raise ValueError(f"every rate must lie in (0, 1], got {bad}")
    if distinct and len(set(v)) != len(v):
        raise ValueError(f"rates must be distinct (each names a feature set), got {list(v)}")
    return tuple(float(a) for a in v)


def setting_fields(cls: type[BaseModel]) -> dict[str, FieldInfo]:
    """Every leaf setting of a config class by its dotted path (``train.lr``), in declaration order.

    A field whose type is itself a config is a group: its settings are walked, not listed whole.
    """
    out: dict[str, FieldInfo] = {}
    for name, info in cls.model_fields.items():
        if is_group(info):
            out.update({f"{name}.{sub}": f for sub, f in setting_fields(info.annotation).items()})
        else:
            out[name] = info
    return out


def is_group(info: FieldInfo) -> bool:
    return isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel)


def resolve_setting(cls: type[BaseModel], key: str, aliases: dict[str, str] | None = None,
                    what: str = "the config") -> str:
    """The dotted path ``key`` names: itself, a declared alias, or a leaf name unique in the tree.

    ``--set lr=…`` is short for ``train.lr`` while only one group has an ``lr``; where two do,
    the error names both paths.
    """
    paths = setting_fields(cls)
    if key in paths:
        return key
    if aliases and key in aliases:
        return aliases[key]
    leaves = [p for p in paths if p.rsplit(".", 1)[-1] == key]
    if len(leaves) == 1:
        return leaves[0]
    shown = key if isinstance(key, str) and key.replace(".", "_").isidentifier() else repr(key)  # one line
    if leaves:
        raise ValueError(f"{shown}: more than one setting of {what} is called that; say {' or '.join(leaves)}")
    raise ValueError(f"{shown}: not a setting of {what}; settings: {', '.join(paths)}")


def nest(flat: dict[str, Any]) -> dict[str, Any]:
    """``{"train.lr": 1e-3, "seed": 0}`` → ``{"train": {"lr": 1e-3}, "seed": 0}``."""
    out: dict[str, Any] = {}
    for path, value in flat.items():
        *groups, leaf = path.split(".")
        node = out
        for g in groups:
            node = node.setdefault(g, {})
        node[leaf] = value
    return out


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """The inverse of :func:`nest`: a nested dict (a dumped config) as dotted paths → values."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, path + "."))
        else:
            out[path] = value
    return out


def short_names(paths: list[str] | tuple[str, ...] | dict) -> dict[str, str]:
    """Each dotted path by its last part where no other path ends the same (``train.lr`` → ``lr``),
    else whole: the names a label shows."""
    leaves = [p.rsplit(".", 1)[-1] for p in paths]
    return {p: leaf if leaves.count(leaf) == 1 else p for p, leaf in zip(paths, leaves)}


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
