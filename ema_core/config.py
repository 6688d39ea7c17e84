"""What every experiment config shares, and how a setting is named, reached and worded when refused.

Each study declares its own config beside its science (``ema_core/experiments/<study>.py``, or a
lighter module of its own that its page also reads); this module names no study.  One pydantic
model per experiment; ``model_dump_json()`` is what a run stores and hashes.
"""
from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, Field, ValidationError
from pydantic.fields import FieldInfo

# The paper's three EMA rates (Figure 1: fast, medium, slow), and below the rule every rate
# follows: here rather than with one study because several read them (every config with EMA
# traces), each as the default and the check of its own ``alphas``.
PAPER_ALPHAS = (0.5, 0.1, 0.02)


def seed_field(description: str) -> Any:
    """The seed every config has: one set of bounds (an unsigned 32-bit integer, numpy's limit)."""
    return Field(0, ge=0, le=2**32 - 1, description=description)


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
        # An item of a list setting is named by the setting (``mixers``), not pydantic's index (``mixers.1``):
        # the value shown says which item.
        loc = ".".join(str(x) for x in err["loc"] if not isinstance(x, int)) or "config"
        msg, shown = _plain(err)
        # A validator that already says what it got ("…, got ['ema', 'ema']") is not told twice.
        if shown is not None and not re.search(r"\bgot\b", msg):
            msg += f" (got {shown})"
        # A check across settings (loc: the config) that names its setting itself is not prefixed twice.
        named = loc == "config" and re.match(r"[\w.]+: ", msg)
        parts.append(msg if named else f"{loc}: {msg}")
    return "; ".join(parts)


def _plain(err: dict) -> tuple[str, str | None]:
    """One pydantic error in the words a user reads, and the value to show after it (None: none)."""
    got, ctx = err.get("input"), err.get("ctx") or {}
    if err["type"] in ("too_short", "too_long"):  # pydantic's "Tuple should have at least 1 item after validation"
        short = err["type"] == "too_short"
        n = ctx.get("min_length" if short else "max_length")
        what = f"{'needs at least' if short else 'takes at most'} {n} value{'s' if n != 1 else ''}"
        count = ctx.get("actual_length")
        return what, None if count is None else ("none" if count == 0 else str(count))
    if err["type"] == "literal_error":  # pydantic's "Input should be 'a' or 'b'": the choices, from the type
        msg = f"must be one of {ctx.get('expected', '')}".rstrip()
    else:
        msg = err["msg"].removeprefix("Value error, ")
    shown = repr(got)
    if err["type"] == "extra_forbidden" or isinstance(got, dict) or len(shown) > 60:
        return msg, None
    return msg, shown
