"""A run folder: everything a worker writes, and the only thing it writes.

Workers never open the DuckDB store (one process may hold it read-write, and then nobody else may
open it at all).  They write their run folder; ``store.ingest`` is the only writer of the store.
This format is the contract between the two: it lives here, beside the science and below both,
so that the job runner and the store each import it and neither imports the other.  It imports
only the standard library, ``ema_core.paths`` and ``ema_core.config`` (the shape of a config);
the older shapes of each kind's config are declared to it by the experiments (:data:`OLDER_SHAPES`).

Layout of ``$EMALAB_HOME/runs/<run_id>/``::

    config.json     {"run_id", "kind", "config", "seed", "preset", "created", "code_version", "host"}
                    written once, atomically ("preset": the one it was launched with, or null;
                    runs made before it was recorded lack the key)
    status.json     {"state", "pid", "backend", "started", "ended", "heartbeat", "progress",
                     "eta_s", "message", "step"}  replaced atomically on every update
    events.jsonl    one JSON object per line {"seq", "step", "time", "metrics": {key: value}},
                    append-only; ``seq`` counts from 0 and makes ingest idempotent; an event may
                    carry a "message" instead of metrics (a damaged checkpoint passed over on resume)
    result.json     the final result {"summary": {...}, "tables": {name: [row, ...]}}, atomic
    checkpoints/    step-<n>.pt, written atomically, the newest few kept
    artifacts/      files a run keeps besides its results, each written atomically (lm: tokenizer.json,
                    and model.pt, the final weights, once it has trained)
    log.txt         the worker's stdout/stderr
    worker.lock     held (flock) by the live worker: two runners never run one run twice
    cancel          present when a cancel was requested

States: queued → running → done | failed | cancelled; "running" with a dead process is detected by
the runner and marked "crashed" (resumable, like failed and cancelled).
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import os
import re
import socket
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Iterator

from ema_core.config import nest
from ema_core.paths import emalab_home  # the one rule for the data folder, shared with ema_core

STATES = ("queued", "running", "done", "failed", "cancelled", "crashed")
FINAL_STATES = ("done", "failed", "cancelled", "crashed")
RESUMABLE_STATES = ("failed", "cancelled", "crashed")
KEEP_CHECKPOINTS = 2
ARTIFACT_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")


class StorageError(RuntimeError):
    """The data folder cannot be written (read-only, full, …); nothing was half-written."""


class CheckpointError(RuntimeError):
    """A checkpoint exists but cannot be loaded."""


class DamagedRunError(ValueError):
    """A file of a run folder is not what EMA Lab writes there; the message is one line naming it."""


# Run folders made before a kind's config changed shape hold the older shape: flat configs from before
# configs were nested ("steps", "hebbian_lr"), or configs without a setting added since whose default
# is not what those runs did.  Each study's Experiment declares its own (``older_paths``,
# ``older_behaviour``: see ema_core.protocol.Experiment), and declaring it registers them here, so
# that every reader of a run folder reads the config in today's shape without naming a study.  A
# process that reads run folders imports ema_core.experiments first (the runner, the worker and the
# CLI do at the top; the store's ingest before it reads a config).
OLDER_SHAPES: dict[str, tuple[dict[str, str], dict[str, Any]]] = {}


# A kind renamed since (the content study's runs were kind "lm"): {the older name: today's}, declared by
# the Experiment that carries today's name, so that a run folder of either name is read as today's.
OLDER_KINDS: dict[str, str] = {}


def declare_older_shapes(kind: str, older_paths: dict[str, str], older_behaviour: dict[str, Any],
                         older_kinds: tuple[str, ...] = ()) -> None:
    """Register ``kind``'s older config shapes and names (called by ``Experiment`` as it is declared)."""
    OLDER_SHAPES[kind] = (dict(older_paths), dict(older_behaviour))
    OLDER_KINDS.update({older: kind for older in older_kinds})


def current_kind(kind: str) -> str:
    """Today's name of a kind a run folder or a command names (an older name read as today's)."""
    return OLDER_KINDS.get(kind, kind)


def current_config(kind: str, config: dict) -> dict:
    """A stored config in today's shape: a flat one of an older run folder is nested (the kind's
    ``older_paths``), and a setting added since that changed what a run does is given the value the
    older run ran with (its ``older_behaviour``); a config of today passes as it is.

    Values are not checked here (the worker validates the config it runs).
    """
    moves, behaviour = OLDER_SHAPES.get(kind, ({}, {}))
    if any(key in moves for key in config):
        config = nest({moves.get(key, key): value for key, value in config.items()})
    missing = {path: value for path, value in behaviour.items() if not _has_path(config, path)}
    if not missing or not all(_has_path(config, path.rsplit(".", 1)[0]) for path in missing if "." in path):
        return config  # a config without the group at all is not one of these runs: left for the check
    out = json.loads(json.dumps(config))  # a copy: the caller's dict is not changed
    for path, value in missing.items():
        *groups, leaf = path.split(".")
        node = out
        for g in groups:
            node = node[g]
        node[leaf] = value
    return out


def _has_path(config: dict, path: str) -> bool:
    node: Any = config
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


_JSON_TYPES = {list: "a list", str: "a string", int: "a number", float: "a number", bool: "a boolean",
               type(None): "null"}


def read_json_object(path: Path, required: dict[str, type] | None = None,
                     optional: dict[str, type] | None = None) -> dict:
    """The JSON object in ``path``, with ``required`` keys of the given types, and each ``optional``
    key it has of its type.

    Raises ``FileNotFoundError`` when there is no file, and ``DamagedRunError`` for one that is
    empty, not UTF-8 text, not JSON, not an object, lacks a key or holds one of another type: files
    are written atomically, so such a file was cut or replaced by something else, and waiting will
    not mend it.
    """
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise DamagedRunError(f"{path} cannot be read: {exc.strerror or exc}") from exc
    problem = None
    if not raw.strip():
        problem = "empty"
    else:
        try:
            obj = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError:
            problem = "not text (binary data)"
        except json.JSONDecodeError as exc:
            problem = f"not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
        except ValueError as exc:  # a number with more digits than Python converts
            problem = f"not JSON ({exc})"
        except RecursionError:
            problem = "not JSON (nested too deep)"
        else:
            if not isinstance(obj, dict):
                problem = f"not a JSON object but {_JSON_TYPES.get(type(obj), type(obj).__name__)}"
            else:
                problem = _wrong_key(obj, required or {}, missing=True) or _wrong_key(obj, optional or {})
                if problem is None:
                    return obj
    raise DamagedRunError(f"{path} is damaged: {problem}")


def _wrong_key(obj: dict, types: dict[str, type], missing: bool = False) -> str | None:
    """What is wrong with the first key of ``types`` that ``obj`` lacks (when ``missing`` counts) or
    holds with another type; None when nothing is."""
    for key, kind in types.items():
        if key not in obj and not missing:
            continue
        value = obj.get(key)
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
            if key not in obj:
                return f"its {key!r} is missing"
            return f"its {key!r} is not {_JSON_TYPES.get(kind, 'an object')} but {_json_type(value)}"
    return None


def _json_type(value: Any) -> str:
    return "an object" if isinstance(value, dict) else _JSON_TYPES.get(type(value), type(value).__name__)


def runs_root(home: Path | None = None) -> Path:
    return (home or emalab_home()) / "runs"


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def run_id_for(kind: str, config: dict, seed: int) -> str:
    """Derived from the config and seed, so the same run is recognised rather than repeated."""
    digest = hashlib.sha256(canonical_json({"kind": kind, "config": config, "seed": seed}).encode()).hexdigest()
    return f"{kind}-{digest[:12]}-s{seed}"


def run_ids_for(kind: str, config: dict, seed: int) -> list[str]:
    """The ids a run of these settings may have: today's, then those it had under an older name of the
    kind (a run made before the rename is the same run, recognised rather than repeated)."""
    return [run_id_for(name, config, seed) for name in (kind, *(o for o, k in OLDER_KINDS.items() if k == kind))]


def code_version() -> str:
    """The checkout's commit (with +dirty when changed), or the package version outside git."""
    root = Path(__file__).resolve().parents[1]
    head = root / ".git" / "HEAD"
    try:
        ref = head.read_text().strip()
        if ref.startswith("ref: "):
            sha = (root / ".git" / ref[5:]).read_text().strip()
        else:
            sha = ref
        return sha[:12]
    except OSError:
        try:
            return version("emalab")
        except PackageNotFoundError:
            return "unknown"


def atomic_write(path: Path, data: str | bytes) -> None:
    """Write ``path`` so that readers see the old file or the new one, never a torn one.

    Text is written as UTF-8.  The one such writer for everything under the data folder: run
    files, exports and the language-model caches (:mod:`ema_core.lm.tokenizer`, ``.stream``).  A file system that
    refuses raises :class:`StorageError`; an interrupted write leaves no temporary file behind.
    """
    raw = data.encode("utf-8") if isinstance(data, str) else data
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "wb") as fh:
            fh.write(raw)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        raise StorageError(_explain(exc, path)) from exc
    finally:
        if tmp is not None:  # not renamed into place: failed, or interrupted (Ctrl-C) on the way
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def _explain(exc: OSError, path: Path) -> str:
    if exc.errno == errno.ENOSPC:
        return f"the data folder is full: could not write {path}"
    if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return f"the data folder is not writable: could not write {path}"
    return f"could not write {path}: {exc.strerror or exc}"


def _in_run(name: str) -> property:
    """A read-only attribute of :class:`RunDir`: the path of the run folder's file (or folder) ``name``."""
    def path(self: "RunDir") -> Path:
        return self.path / name
    return property(path)


@dataclass(frozen=True)
class RunDir:
    path: Path

    @classmethod
    def for_id(cls, run_id: str, home: Path | None = None) -> "RunDir":
        if not run_id or "/" in run_id or "\\" in run_id or run_id.startswith("."):
            raise ValueError(f"run id must be a plain name, got {run_id!r}")
        return cls(runs_root(home) / run_id)

    # -- files ------------------------------------------------------------------------------
    @property
    def run_id(self) -> str:
        return self.path.name

    # The run folder's files, each by its one name in the format.
    config_path = _in_run("config.json")
    status_path = _in_run("status.json")
    events_path = _in_run("events.jsonl")
    result_path = _in_run("result.json")
    checkpoint_dir = _in_run("checkpoints")
    log_path = _in_run("log.txt")
    cancel_path = _in_run("cancel")
    # Written by the local runner when it starts a worker for a queued run: any process's runner
    # then knows a worker is on its way, before that worker has marked the run running.
    spawn_path = _in_run("spawned.json")

    def exists(self) -> bool:
        return self.config_path.exists()

    # -- config and status -------------------------------------------------------------------
    @classmethod
    def for_settings(cls, kind: str, config: dict, seed: int, home: Path | None = None) -> "RunDir":
        """The folder of a run of these settings: one made under an older name of the kind where it
        exists (:func:`run_ids_for`), else today's."""
        folders = [cls.for_id(run_id, home) for run_id in run_ids_for(kind, config, seed)]
        return next((rd for rd in folders[1:] if rd.exists()), folders[0])

    def create(self, kind: str, config: dict, seed: int, preset: str | None = None) -> dict:
        """Write config.json and a queued status; an existing identical run is left as it is.

        ``preset`` only says how the config was chosen (the job list shows what differs from it):
        the same config reached from another preset is the same run.
        """
        record = {"run_id": self.run_id, "kind": kind, "config": config, "seed": seed, "preset": preset,
                  "created": now_iso(), "code_version": code_version(), "host": socket.gethostname()}
        if self.exists():
            old = self.read_config()
            if (old["kind"], old["config"], old["seed"]) != (kind, config, seed):
                raise ValueError(f"run folder {self.run_id} holds a different config")
            return old
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(_explain(exc, self.path)) from exc
        atomic_write(self.config_path, json.dumps(record, indent=2, sort_keys=True))
        self.write_status(state="queued", progress=0.0)
        return record

    def read_config(self) -> dict:
        """config.json, its config in today's shape (:func:`current_config`); ``DamagedRunError`` when
        it is not the object :meth:`create` writes."""
        record = read_json_object(self.config_path, {"kind": str, "seed": int, "config": dict})
        kind = current_kind(record["kind"])
        return {**record, "kind": kind, "config": current_config(kind, record["config"])}

    def read_status(self) -> dict:
        # Rewritten on every update: a damaged one is as good as none, and the next update replaces it.
        try:
            status = json.loads(self.status_path.read_text())
        except (OSError, ValueError, RecursionError):
            return {}
        return status if isinstance(status, dict) else {}

    def write_status(self, **fields: Any) -> dict:
        status = self.read_status()
        status.update(fields)
        status["updated"] = now_iso()
        atomic_write(self.status_path, json.dumps(status, sort_keys=True))
        return status

    # -- events ------------------------------------------------------------------------------
    def append_events(self, events: list[dict]) -> None:
        """Append complete lines (each ends in a newline: a reader skips an unterminated tail)."""
        if not events:
            return
        data = "".join(canonical_json(e) + "\n" for e in events)
        try:
            with open(self.events_path, "a", encoding="utf-8") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as exc:
            raise StorageError(_explain(exc, self.events_path)) from exc

    def read_events(self, offset: int = 0) -> tuple[list[dict], int, int]:
        """Events after byte ``offset``: (events, new offset, malformed lines skipped).

        Only newline-terminated lines are read, so a line being written (or cut by a crash) is
        left for later; a complete line that is not valid JSON is counted and skipped.
        """
        try:
            with open(self.events_path, "rb") as fh:
                fh.seek(offset)
                chunk = fh.read()
        except FileNotFoundError:
            return [], offset, 0
        end = chunk.rfind(b"\n") + 1
        events, bad = [], 0
        for line in chunk[:end].splitlines():
            try:
                event = json.loads(line)
                if not isinstance(event, dict) or "seq" not in event:
                    raise ValueError
                events.append(event)
            except ValueError:
                bad += 1
        return events, offset + end, bad

    def next_seq(self) -> int:
        events, _, _ = self.read_events()
        return max((int(e["seq"]) for e in events), default=-1) + 1

    # -- result --------------------------------------------------------------------------------
    def write_result(self, result: dict) -> None:
        atomic_write(self.result_path, json.dumps(result, sort_keys=True))

    def read_result(self) -> dict | None:
        """result.json, or None before the run has one; ``DamagedRunError`` when it is not a JSON object,
        or its summary (which may be left out) is not an object.  The tables' shape is the ingest's to
        check (``store.ingest.ResultError``), table by table."""
        try:
            return read_json_object(self.result_path, optional={"summary": dict})
        except FileNotFoundError:
            return None

    # -- checkpoints -----------------------------------------------------------------------------
    def checkpoints(self) -> list[tuple[int, Path]]:
        found = []
        for p in self.checkpoint_dir.glob("step-*.pt"):
            with contextlib.suppress(ValueError):
                found.append((int(p.stem.split("-", 1)[1]), p))
        return sorted(found)

    def save_checkpoint(self, step: int, state: dict) -> Path:
        """torch.save to a temporary file, then rename: a crash never leaves a torn checkpoint."""
        import torch  # 1.2 s: the worker imports this module before it holds the run's lock (see jobs.worker)

        buf = io.BytesIO()
        torch.save(state, buf)
        path = self.checkpoint_dir / f"step-{step:09d}.pt"
        atomic_write(path, buf.getvalue())
        for _, old in self.checkpoints()[:-KEEP_CHECKPOINTS]:
            with contextlib.suppress(OSError):
                old.unlink()
        return path

    def save_artifact(self, name: str, data: bytes) -> Path:
        """A file the run produced besides its results (its tokenizer, ...), under ``artifacts/``, atomically."""
        path = self.artifact_path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, data)
        return path

    def artifact_path(self, name: str) -> Path:
        """Where the artifact ``name`` is (or would be) kept: ``artifacts/<name>``."""
        if not ARTIFACT_NAME.fullmatch(name or ""):
            raise ValueError(f"artifact name must be a plain file name (letters, digits, . _ -), got {name!r}")
        return self.path / "artifacts" / name

    def load_checkpoint(self, path: Path) -> dict:
        """Load with ``weights_only=True``: a checkpoint is data, never code to run."""
        import torch  # 1.2 s: as in save_checkpoint

        try:
            return torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:  # torch raises many types for a bad file
            raise CheckpointError(f"checkpoint {path.name} of run {self.run_id} cannot be loaded: {exc}") from exc

    def latest_checkpoint(self, passed_over: list[str] | None = None) -> tuple[int, dict] | None:
        """The newest checkpoint that loads, as ``(step, state)``; None when there is none.

        A damaged one (cut, overwritten) is passed over for the one before it, and what is wrong
        with it appended to ``passed_over``: the run resumes from further back, to the same end.
        When none loads, the newest one's ``CheckpointError`` is raised.
        """
        errors: list[CheckpointError] = []
        for step, path in reversed(self.checkpoints()):
            try:
                state = self.load_checkpoint(path)
            except CheckpointError as exc:
                errors.append(exc)
                continue
            if passed_over is not None:
                passed_over.extend(str(e) for e in errors)
            return step, state
        if errors:
            raise errors[0]
        return None

    # -- cancel --------------------------------------------------------------------------------
    def request_cancel(self) -> None:
        atomic_write(self.cancel_path, now_iso())

    def cancel_requested(self) -> bool:
        return self.cancel_path.exists()

    def clear_cancel(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.cancel_path.unlink()


def iter_run_dirs(home: Path | None = None) -> Iterator[RunDir]:
    root = runs_root(home)
    if not root.is_dir():
        return
    for child in sorted(root.iterdir()):
        rd = RunDir(child)
        if rd.exists():
            yield rd


def pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped by its parent) still answers kill(0): look closer.
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def wait_for(predicate, timeout: float, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()
