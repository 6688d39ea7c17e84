"""Learning rates chosen on dev, one form for every study: where a config says ``auto``, which rate it trains at.

A :class:`RateTable` holds the rates one sweep chose (a rate per cell: per model, per (rule, depth), per
(mixer, task)), every setting they were chosen at (``tuned_for``, by dotted path), and the command that
chose them (``source``).  Each study declares its tables in its folder's ``rates.py`` (``TABLES``), and
:func:`resolve` is the one way a config reads them:

- the table whose ``binding`` settings the config shares is read (by default every setting of
  ``tuned_for``); a config that shares none is refused, naming what differs, rather than trained at
  rates chosen for something else.  A study may let a config name a table to read at other settings on
  purpose (the depth study's ``rates_from``); the run then records that the table did not match.
- a cell the table has no rate for is refused (``missing="refuse"``), or, where the study chooses on dev
  in the cell anyway (the boundary map's mixer of one's own), left to that choice (``missing="dev"``).

:func:`describe` says in words where a run's rates came from, for the pages.  ``emalab learning-rates`` prints
every study's tables (the registry: :func:`ema_core.studies.rate_tables`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Literal, Mapping, Sequence

from ema_core.config import flatten

Auto = Literal["auto"]
AUTO: Auto = "auto"


def _plain(value: Any) -> Any:
    # A config dumped in Python mode holds tuples where its JSON (and a table) holds lists.
    return list(value) if isinstance(value, tuple) else value


def flat_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """A config's model_dump as {dotted path: value}, tuples as lists (as JSON and the tables have them)."""
    return {path: _plain(value) for path, value in flatten(dict(config)).items()}


def settings_at(config: Mapping[str, Any], paths: Iterable[str]) -> dict[str, Any]:
    """The values of ``paths`` in a config's model_dump (a path ending in "." is a whole section): what a
    sweep records as the settings its table was chosen at."""
    paths = tuple(paths)
    return {path: value for path, value in flat_settings(config).items()
            if any(path.startswith(p) if p.endswith(".") else path == p for p in paths)}


@dataclass(frozen=True)
class RateTable:
    """The rates one sweep chose on dev, and everything it chose them at."""

    name: str
    # What a rate is per, in the order of a key's parts ("spen", "sum|8", "ema|mqar|16").
    cell: tuple[str, ...]
    rates: Mapping[str, float]
    # Every setting the rates were chosen at, by dotted path.
    tuned_for: Mapping[str, Any]
    # The command that chooses such rates ("python -m bench.depth_lr"), and what exactly was run for these.
    sweep: str
    source: str
    # The settings a config must share to read this table without naming it: None is every one of
    # ``tuned_for``.  The rest are recorded, and a config that differs there reads the table but is not
    # "matched" (the content study's rates are per size; its longer budgets read them and say so).
    binding: tuple[str, ...] | None = None
    # Sections whose settings count even where ``tuned_for`` does not record them: a model setting the
    # sweep never saw is a body it never trained (a new field differs from the table, never matches it).
    unrecorded: tuple[str, ...] = ()
    # A cell with no rate: refused, or left to a choice on dev in the cell (the study does that choice).
    missing: Literal["refuse", "dev"] = "refuse"
    # What a page says the table was chosen at, in a few words ("300 steps on Austen").
    budget: str = ""

    def rate(self, *key: Any) -> float | None:
        """The rate of one cell (its key's parts in ``cell`` order), or None where the table has none."""
        return self.rates.get("|".join(map(str, key)))

    def differences(self, config: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
        """{path: (the table's value, the config's)} for every setting where ``config`` (a model_dump)
        differs from what the table was chosen at; an unrecorded setting of a counted section differs
        as (None, its value)."""
        got = flat_settings(config)
        out = {path: (theirs, got.get(path)) for path, theirs in self.tuned_for.items()
               if got.get(path) != _plain(theirs)}
        if self.unrecorded:
            out.update({path: (None, value) for path, value in got.items()
                        if path.startswith(self.unrecorded) and path not in self.tuned_for})
        return out

    def refusals(self, config: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
        """The differences that keep ``config`` from reading this table without naming it."""
        diff = self.differences(config)
        if self.binding is None:
            return diff
        return {path: d for path, d in diff.items() if path in self.binding}

    def matches(self, config: Mapping[str, Any]) -> bool:
        """Whether the rates were chosen at this config's every recorded setting."""
        return not self.differences(config)


def _natural(value: str) -> tuple:
    # Depths as numbers (4 before 16), names as names.
    return (0, int(value), "") if value.isdigit() else (1, 0, value)


def _said(diff: Mapping[str, tuple[Any, Any]], most: int = 4) -> str:
    return ", ".join(f"{path} {theirs!r} there, {mine!r} here" for path, (theirs, mine) in list(diff.items())[:most])


@dataclass(frozen=True)
class Resolved:
    """What ``auto`` read: the table, each asked-for cell's rate (a ``missing="dev"`` table's cell it has no
    rate for is absent), and whether the table was chosen at this config's every setting."""

    table: RateTable
    rates: dict[tuple, float]
    matched: bool


def find(tables: Sequence[RateTable], name: str) -> RateTable:
    """A table by name; a ValueError listing the names where there is none."""
    for table in tables:
        if table.name == name:
            return table
    raise ValueError(f"no rate table named {name!r} (tables: {', '.join(t.name for t in tables) or 'none'})")


def resolve(tables: Sequence[RateTable], config: Mapping[str, Any], cells: Iterable[tuple] = (),
            read: str | None = None, what: str = "train.lr: auto",
            instead: str = "set train.lr to a number") -> Resolved:
    """The rates ``auto`` trains ``cells`` at under ``config`` (a model_dump): from the table named ``read``
    (on purpose, at whatever settings), else from the first table whose binding settings the config
    shares.  A ValueError beginning with ``what`` says what is missing, where no table serves it, and
    ends with what to do ``instead``."""
    if read is not None:
        table = find(tables, read)
    else:
        table = next((t for t in tables if not t.refusals(config)), None)
        if table is None:
            why = "; ".join(f"{t.name}: {_said(t.refusals(config))}" for t in tables) or "there are no tables"
            raise ValueError(f"{what}, but no rates were chosen at these settings ({why}); {instead}")
    if not table.rates:
        raise ValueError(f"{what}, but the {table.name} rate table is empty ({table.sweep} fills it); {instead}")
    cells = [tuple(c) for c in cells]
    rates = {c: table.rate(*c) for c in cells}
    missing = [c for c, r in rates.items() if r is None]
    if missing and table.missing == "refuse":
        parts = list(zip(*(key.split("|") for key in table.rates)))
        have = "; ".join(f"{name} {', '.join(sorted(set(values), key=_natural))}"
                         for name, values in zip(table.cell, parts))
        raise ValueError(f"{what}, but the {table.name} rate table has no rate for "
                         f"{', '.join(' '.join(f'{k} {v}' for k, v in zip(table.cell, c)) for c in missing)} "
                         f"(it holds {have}); choose them on dev with {table.sweep}, or {instead}")
    return Resolved(table, {c: r for c, r in rates.items() if r is not None}, table.matches(config))


def describe(table: RateTable, matched: bool, config: Mapping[str, Any] | None = None) -> str:
    """Where ``auto`` rates came from, in words: the table, and whether it was chosen at this run's settings
    or read here at others (naming the first few that differ, where the config is given)."""
    if matched:
        return f"From the `{table.name}` rate table, chosen on dev at these very settings (`{table.source}`)"
    diff = table.differences(config) if config is not None else {}
    return (f"From the `{table.name}` rate table: rates chosen on dev at other settings ({table.budget}), read here "
            "on purpose" + (f" ({_said(diff, 3)})" if diff else ""))


def rate_source(tables: Sequence[RateTable], config: Mapping[str, Any],
                summary: Mapping[str, Any] | None = None) -> str:
    """Where one stored run's rates came from, in words: set in its config, or the table ``auto`` read.  The
    run's own record (its summary's ``rate_table`` and ``rates_matched``) where it has one, else read from
    its config (a run stored before its summary said)."""
    lr = (config.get("train") or {}).get("lr")
    if lr != AUTO:
        return (f"Set in the config: train.lr = {lr:g}, the same for every cell" if isinstance(lr, (int, float))
                else "Not recorded by these runs")
    summary = summary or {}
    name = summary.get("rate_table") or config.get("rates_from")
    table = next((t for t in tables if (t.name == name if name else not t.refusals(config))), None)
    if table is None:
        return (f"From the rate table {name!r}, which this code no longer holds" if name
                else "From a rate table not recorded")
    return describe(table, summary["rates_matched"] if "rates_matched" in summary else table.matches(config), config)
