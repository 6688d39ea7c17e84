"""What an experiment is, and what it may call while it runs.

An experiment is a pure function of its config: ``run(config, reporter) -> result``.  It knows
nothing of processes, run folders or Ray; the job runner hands it a :class:`Reporter` backed by a
run folder, a test or notebook hands it a :class:`NullReporter`.

It sits below every experiment and model (of ema_core it imports only the run-folder format), so the training loops
of :mod:`ema_core.bigru` and :mod:`ema_core.lm.train` import it at the top like anything else, and
the worker takes :class:`Cancelled` from it without loading an experiment.  Torch is imported only
where a :class:`NullReporter` keeps a checkpoint, for the same reason: the worker imports this module
before it holds the run's lock (see :mod:`jobs.worker`).
"""
from __future__ import annotations

import io
import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, NamedTuple, Protocol, runtime_checkable

from pydantic import BaseModel, ValidationError

from ema_core.rundir import current_config, declare_older_shapes


class Cancelled(Exception):
    """Raised by an experiment that saw ``reporter.should_stop()``; its checkpoint is saved first."""

    def __init__(self, step: int, message: str | None = None):
        super().__init__(message or f"cancelled at step {step}")
        self.step = step


@runtime_checkable
class Reporter(Protocol):
    def log(self, step: int, metrics: dict[str, float]) -> None:
        """Record metrics at a global step (monotonic over the whole run, not per phase)."""

    def progress(self, fraction: float, message: str | None = None) -> None:
        """Fraction of the whole run done, in [0, 1].

        A message ``PHASE: detail`` names its phase (``α=0.5: step 10/200``); the run's log gets a
        line when the phase changes, not one per step.  A message without ``": "`` is a phase of
        its own up to its numbers (``step 10/300 · loss 4.2``).
        """

    def should_stop(self) -> bool:
        """True once a cancel was requested: save a checkpoint and raise :class:`Cancelled`."""

    def save_checkpoint(self, step: int, state: dict) -> None:
        """``state`` holds tensors and plain Python only, so it loads with ``weights_only=True``."""

    def load_checkpoint(self) -> tuple[int, dict] | None:
        """The newest checkpoint that loads, as ``(step, state)``, or None for a fresh start.

        A damaged newer one is passed over (the run's log and events say so): resuming from
        further back ends with the same result.
        """

    def save_artifact(self, name: str, data: bytes) -> None:
        """Keep a file the run produced (a tokenizer, ...) with the run; ``name`` is a plain file name."""

    # Optional, not part of the protocol's check: a reporter may also offer ``cell_pool(workers)``, a
    # pool over a cluster's workers for an experiment that trains independent units in parallel (the
    # boundary map's cells; see ema_core.cells.LocalCellPool for what a pool does).
    # The job runner's reporter has one on Ray; without it the experiment uses this machine's processes.


@dataclass(frozen=True)
class Experiment:
    kind: str
    config_cls: type[BaseModel]
    presets: dict[str, dict[str, Any]]
    run: Callable[[BaseModel, Reporter], dict]
    description: str
    # Settings a run's label always names, whatever its preset sets: what tells one run of the kind
    # from another at a glance (a SPEN run from a GPT run when both keep their preset's other values).
    identity: tuple[str, ...] = ()
    # Whether the Overview's one-click quick reproduction runs this kind's `quick` preset: the paper's
    # studies do; an extension whose quick map takes most of an hour (the boundary map) is launched from
    # its own page.
    one_click: bool = True
    # What that one click runs of this kind: the `quick` preset once per entry, with the entry's
    # overrides (the content claim is SPEN *against* the GPT, so its one click trains both sides).
    reproduction: tuple[Mapping[str, Any], ...] = ({},)
    # A finished run's result in one line from its summary (its Jobs card, the run table), so that no
    # page names a kind: "" where the kind says nothing in one line.
    headline: Callable[[dict], str] = lambda summary: ""
    # The shapes this kind's config had in run folders made before it changed, read in today's
    # (ema_core.rundir.current_config).  Each is frozen once declared: it describes files that
    # exist, so a later change of the config adds entries rather than editing these.
    # ``older_paths``: a name of the flat config of runs made before configs were nested, by the
    # dotted path it has today ({"steps": "train.steps"}); ``--set`` still takes these names.
    older_paths: Mapping[str, str] = field(default_factory=dict)
    # ``older_behaviour``: a setting added since whose default is not what older runs did, by the
    # value they ran with: a stored config that lacks it resumes with that value.
    older_behaviour: Mapping[str, Any] = field(default_factory=dict)
    # Names this kind had before a rename, which stored run folders and commands may still carry
    # (``rundir.current_kind`` reads them as today's; the store's migration 9 renamed its rows).
    older_kinds: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # Declared here, read by every reader of a run folder (ingest, runner, worker, a resuming
        # checkpoint's StoredConfig) without importing this kind's experiment.
        declare_older_shapes(self.kind, dict(self.older_paths), dict(self.older_behaviour), tuple(self.older_kinds))


def moved_into_groups(**groups: str) -> dict[str, str]:
    """``older_paths`` for settings that sat flat before configs were nested: each group's setting names
    (one string, space-separated) by the dotted path they have today, in the order given —
    ``moved_into_groups(train="steps lr")`` is ``{"steps": "train.steps", "lr": "train.lr"}``."""
    return {name: f"{group}.{name}" for group, names in groups.items() for name in names.split()}


class Column(NamedTuple):
    """A column of a result table, besides its ``run_id``."""

    name: str
    type: type  # str, int or float: what a result row's value is checked and converted to
    key: bool   # part of the primary key (besides run_id): required and never null


@dataclass(frozen=True)
class ResultTable:
    """A result table a study declares (``Study.tables``): a run's ``result["tables"][name]`` fills it.

    The store makes the table from this declaration (no SQL in the study), reads its rows for a run,
    groups them across seeds and offers them for export.  A key column named ``seed`` means a run
    holds several seeds, one per row; otherwise a row's seed is its run's.  A declared table, once
    stored, keeps its columns: a change is a numbered migration in the store.
    """

    name: str
    columns: tuple[Column, ...]
    description: str  # what one row is, as the Export page and the CLI say it

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns if c.key)

    @property
    def values(self) -> tuple[str, ...]:
        """What is averaged across seeds: every number that is not a key."""
        return tuple(c.name for c in self.columns if not c.key and c.type in (int, float))


@dataclass
class NullReporter:
    """Runs an experiment in-process without a run folder (tests, notebooks).

    Checkpoints are kept in memory, serialised with ``torch.save`` exactly as a run folder would
    (so a state that would not load with ``weights_only=True`` fails here too, and later in-place
    updates of the model cannot change a saved checkpoint).  ``stop_after_checkpoints=n`` makes
    ``should_stop()`` answer True once n checkpoints were saved: a cancel at a known point.
    """

    stop_after_checkpoints: int | None = None
    events: list[tuple[int, dict[str, float]]] = field(default_factory=list)
    fraction: float = 0.0
    message: str | None = None
    checkpoints_saved: int = 0
    artifacts: dict[str, bytes] = field(default_factory=dict)
    _checkpoint: tuple[int, bytes] | None = None
    _started: float = field(default_factory=time.monotonic)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.events.append((int(step), dict(metrics)))

    def progress(self, fraction: float, message: str | None = None) -> None:
        self.fraction = float(fraction)
        if message is not None:
            self.message = message

    def should_stop(self) -> bool:
        n = self.stop_after_checkpoints
        return n is not None and self.checkpoints_saved >= n

    def save_checkpoint(self, step: int, state: dict) -> None:
        import torch  # 1.2 s: not before a checkpoint is kept (the worker imports this module early)

        buf = io.BytesIO()
        torch.save(state, buf)
        self._checkpoint = (int(step), buf.getvalue())
        self.checkpoints_saved += 1

    def save_artifact(self, name: str, data: bytes) -> None:
        self.artifacts[str(name)] = bytes(data)

    def load_checkpoint(self) -> tuple[int, dict] | None:
        if self._checkpoint is None:
            return None
        import torch  # 1.2 s: as in save_checkpoint

        step, data = self._checkpoint
        return step, torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)


@dataclass(frozen=True)
class StoredConfig:
    """A run's config as its checkpoints keep it (JSON text) and recognise it when the run resumes.

    A checkpoint written before configs were nested holds the flat form; it is read in today's
    shape (:func:`ema_core.rundir.current_config`) and compared as a config, so an older run still
    resumes from where it stopped.
    """

    kind: str
    config: BaseModel

    def dump(self) -> str:
        return self.config.model_dump_json()

    def matches(self, stored: Any) -> bool:
        if stored == self.dump():
            return True
        try:
            return type(self.config).model_validate(current_config(self.kind, json.loads(stored))) == self.config
        except (TypeError, ValueError, ValidationError):
            return False


def stored(state: dict) -> dict:
    """``state`` with each :class:`StoredConfig` written as its JSON, as a checkpoint holds it."""
    return {key: value.dump() if isinstance(value, StoredConfig) else value for key, value in state.items()}


def check_checkpoint(state: dict, *, what: str, fmt: int, keys: tuple[str, ...] = (),
                     expect: dict[str, Any] | None = None) -> None:
    """Refuse a checkpoint that is not one of this run: shared by every experiment that resumes.

    ``keys`` (and every key of ``expect``) must be present, else "checkpoint lacks [...]: not a
    ``what``"; its ``format`` must be ``fmt``; and each ``expect`` value must equal the stored one (the
    run's identity, usually its config: a :class:`StoredConfig`), else "checkpoint was written for another KEY".  Each problem
    is a ``ValueError`` on one line.
    """
    expect = expect or {}
    missing = {"format", *keys, *expect} - set(state)
    if missing:
        raise ValueError(f"checkpoint lacks {sorted(missing)}: not a {what}")
    if state["format"] != fmt:
        raise ValueError(f"checkpoint format {state['format']} is not {fmt}")
    for key, value in expect.items():
        if not (value.matches(state[key]) if isinstance(value, StoredConfig) else state[key] == value):
            raise ValueError(f"checkpoint was written for another {key}")
