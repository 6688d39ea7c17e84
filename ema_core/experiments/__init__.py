"""Experiments: one typed config and one ``run(config, reporter) -> result`` per kind.

    >>> cfg = build_config("dilution", preset="quick", overrides={"alphas": "0.5,0.1", "train.steps": 20}, seed=3)
    >>> result = REGISTRY["dilution"].run(cfg, NullReporter())
    >>> sorted(result)
    ['summary', 'tables']

A result is ``{"summary": {name: float | str}, "tables": {name: [row dict, ...]}}``; the job runner
writes it to the run's ``result.json`` and the store ingests it.  Nothing here imports the job
runner, Streamlit or DuckDB: an experiment runs the same in a worker process, a Ray task or a test.
"""
from __future__ import annotations

import importlib
import json
import typing
from typing import Any

from pydantic import BaseModel, TypeAdapter, ValidationError

from ema_core.config import config_error, nest, resolve_setting, setting_fields
from ema_core.protocol import Cancelled, Experiment, NullReporter, Reporter
from ema_core.rundir import current_kind
from ema_core.studies import STUDIES


def _registry() -> dict[str, Experiment]:
    """Every study's experiments, in the studies' order (the order pages and the CLI list the kinds):
    a kind not listed here is rejected when its config is built."""
    out: dict[str, Experiment] = {}
    for study in STUDIES.values():
        for kind, module in zip(study.kinds, study.experiment_modules()):
            exp = importlib.import_module(module).EXPERIMENT
            if exp.kind != kind or kind in out:
                raise ValueError(f"{module} declares kind {exp.kind!r}: the study {study.name!r} names it "
                                 f"{kind!r}, and a kind belongs to one study")
            out[kind] = exp
    return out


REGISTRY: dict[str, Experiment] = _registry()

__all__ = ["REGISTRY", "Cancelled", "Experiment", "NullReporter", "Reporter", "build_config",
           "config_error", "get_experiment", "headline"]


def get_experiment(kind: str) -> Experiment:
    """The experiment of ``kind``, by today's name or one it had before a rename (``rundir.current_kind``)."""
    try:
        return REGISTRY[current_kind(kind)]
    except (KeyError, TypeError):
        raise ValueError(f"unknown experiment kind {kind!r}; known kinds: {', '.join(sorted(REGISTRY))}") from None


def headline(kind: str, summary: Any) -> str:
    """A finished run's result in one line, from its summary: "" for a run with no summary (yet), or
    of a kind this code no longer has."""
    if not isinstance(summary, dict) or not summary or current_kind(kind) not in REGISTRY:
        return ""
    return REGISTRY[current_kind(kind)].headline(summary)


def build_config(kind: str, preset: str | None = None, overrides: dict[str, Any] | None = None,
                 seed: int | None = None) -> BaseModel:
    """The validated config of ``kind``: defaults, then the preset, then overrides, then the seed.

    A setting is named by its dotted path (``train.lr``), by its own name where no other group has
    one (``lr``), or by its name in the flat configs of older runs (``hebbian_lr``); a group may also
    be given whole, as a dict.  Values may be typed, or strings as typed on a command line
    (``--set vocab=32``): a string is read as JSON where that gives the setting's type (``32``,
    ``true``, ``[0.5, 0.1]``), tuple settings also take ``0.5,0.1``, and anything else stays a
    string.  Every problem is a ``ValueError`` on one line that names the setting and what it allows.
    """
    exp = get_experiment(kind)
    fields = setting_fields(exp.config_cls)
    values: dict[str, Any] = {}  # dotted path -> value
    if preset is not None:
        if preset not in exp.presets:
            raise ValueError(f"unknown preset {preset!r} for {kind}; presets: {', '.join(exp.presets)}")
        values.update(exp.presets[preset])
    for key, raw in _leaves(overrides or {}).items():
        path = resolve_setting(exp.config_cls, key, dict(exp.older_paths), what=kind)
        annotation = fields[path].annotation
        value = _parse_value(annotation, raw)
        # Pydantic's lax mode reads True as 1: "--set steps=true" would quietly run one step.
        if annotation is not bool and _holds_bool(value):
            raise ValueError(f"{path}: expects {_type_name(annotation)}, not a boolean (got {raw!r})")
        values[path] = value
    if seed is not None:
        values["seed"] = seed
    try:
        return exp.config_cls(**nest(values))
    except ValidationError as exc:
        raise ValueError(config_error(exc)) from None


def _leaves(overrides: dict[str, Any]) -> dict[str, Any]:
    """Overrides with every group given whole (a dict, or a config) spelled out as its dotted settings."""
    out: dict[str, Any] = {}
    for key, value in overrides.items():
        if isinstance(value, BaseModel):
            value = value.model_dump()
        if isinstance(value, dict) and isinstance(key, str):
            out.update({f"{key}.{sub}": v for sub, v in _leaves(value).items()})
        else:
            out[key] = value
    return out


def _parse_value(annotation: Any, raw: Any) -> Any:
    if not isinstance(raw, str):
        return raw
    is_tuple = typing.get_origin(annotation) is tuple
    text = raw.strip()
    candidates = []
    try:
        candidates.append(json.loads(text))
    except ValueError:
        pass
    if is_tuple and ("," in text or not text):  # "--set mixers=" lists nothing, not one empty name
        candidates.append([_scalar(p) for p in text.strip("()[] ").split(",") if p.strip()])
    candidates.append(raw)
    if is_tuple:  # a single value is a one-element grid
        candidates = [c if isinstance(c, (list, tuple)) else [c] for c in candidates]
    adapter = TypeAdapter(annotation)
    for cand in candidates:
        try:
            adapter.validate_python(cand)
            return cand
        except ValidationError:
            continue
    return candidates[0]  # let the model report it, against the decoded value


def _scalar(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text.strip()


def _holds_bool(value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        return any(isinstance(v, bool) for v in value)
    return isinstance(value, bool)


def _type_name(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    if origin is tuple:
        return "a list of numbers"
    if origin is typing.Annotated:  # a constrained type reads as the type it constrains
        return _type_name(typing.get_args(annotation)[0])
    if origin is typing.Literal:
        return " or ".join(map(str, typing.get_args(annotation)))
    if origin is typing.Union:  # train.lr: a number or auto
        return " or ".join(_type_name(a) for a in typing.get_args(annotation))
    return {int: "an integer", float: "a number", str: "text"}.get(annotation, str(annotation))
