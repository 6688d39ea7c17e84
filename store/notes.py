"""What a person writes about a run: a note and tags (the ``run_notes`` table, migration 5).

The only rows of the store that a person writes rather than ingest.  They go through the store's
one writer (``open_store(readonly=False)``: one at a time, briefly), and are read like every other
table, on a short read-only connection.  Ingest never reads or writes ``run_notes``, so
a note stays whatever ingest later does to its run's rows.

    set_note("lm-1a2b3c4d-s0", note="the GPT at twice the rate", tags="lr sweep, gpt")
    run_notes()      # run_id, note, tags (a list), updated_at: one row per run that has ever had one
    tags_in_use()    # ["gpt", "lr sweep"]
"""
from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable

import pandas as pd

from .db import open_store
from .queries import RUN_FILTER, RunIds, id_list, query_frame

# A note is a few lines about a run, not a document: a cap keeps one paste from bloating every read
# of the table (the Jobs page reads it whole).
MAX_NOTE_CHARS = 10_000
MAX_TAG_CHARS = 64


class UnknownRunError(ValueError):
    """A note or tags for a run id the store does not hold."""


def normalise_tags(tags: str | Iterable[str] | None) -> list[str]:
    """Tags as stored: each stripped, split at commas (a comma separates tags where tags are typed as
    one line, so no tag may hold one), empty ones dropped, each kept once, in the order first given.

    >>> normalise_tags(" gpt, lr sweep ,gpt,, ")
    ['gpt', 'lr sweep']
    """
    if tags is None:
        return []
    items = [tags] if isinstance(tags, str) else list(tags)
    out: list[str] = []
    for item in items:
        if not isinstance(item, str):
            raise ValueError(f"a tag is text, got {item!r}")
        for tag in item.split(","):
            tag = " ".join(tag.split())  # inner runs of spaces (and newlines) read as one space
            if len(tag) > MAX_TAG_CHARS:
                raise ValueError(f"tag {tag[:20]!r}… is {len(tag)} characters long; at most {MAX_TAG_CHARS}")
            if tag and tag not in out:
                out.append(tag)
    return out


def set_note(run_id: str, note: str | None = None, tags: str | Iterable[str] | None = None, *,
             home: Path | None = None, timeout: float | None = None) -> dict[str, Any]:
    """Write the note and/or the tags of one stored run; None leaves that part as it was.

    Returns the run's row as stored (run_id, note, tags, updated_at).  A run id the store does not
    hold is refused (``UnknownRunError``, naming it): a note is about a run, and one on a typo would
    be lost from sight.  Tags are normalised (:func:`normalise_tags`).
    """
    if not isinstance(run_id, str) or not run_id.strip():
        raise ValueError(f"a note needs the run id of a stored run, got {run_id!r}")
    if note is not None and not isinstance(note, str):
        raise ValueError(f"a note is text, got {type(note).__name__}")
    if note is not None and len(note) > MAX_NOTE_CHARS:
        raise ValueError(f"the note on {run_id} is {len(note):,} characters long; at most {MAX_NOTE_CHARS:,}")
    new_tags = None if tags is None else normalise_tags(tags)
    now = datetime.now(timezone.utc).replace(tzinfo=None)  # the schema's times are naive UTC
    with open_store(readonly=False, home=home, timeout=timeout) as conn:
        conn.execute("BEGIN TRANSACTION")
        if conn.execute("SELECT count(*) FROM runs WHERE run_id = ?", [run_id]).fetchone()[0] == 0:
            conn.execute("ROLLBACK")
            raise UnknownRunError(f"no run {run_id!r} in the store: notes and tags are kept for stored runs only")
        old = conn.execute("SELECT note, tags FROM run_notes WHERE run_id = ?", [run_id]).fetchone()
        old_note, old_tags = (old[0], list(old[1])) if old is not None else ("", [])
        row = [run_id, old_note if note is None else note, old_tags if new_tags is None else new_tags, now]
        conn.execute(
            """INSERT INTO run_notes (run_id, note, tags, updated_at) VALUES (?, ?, ?::VARCHAR[], ?)
               ON CONFLICT (run_id) DO UPDATE
               SET note = excluded.note, tags = excluded.tags, updated_at = excluded.updated_at""", row)
        conn.execute("COMMIT")
    return dict(zip(("run_id", "note", "tags", "updated_at"), row))


def run_notes(run_ids: RunIds = None, *, home: Path | None = None) -> pd.DataFrame:
    """The notes and tags of these runs (every run when None): run_id, note, tags (a list of text),
    updated_at; one row per run that has one, newest first."""
    df = query_frame(
        f"""SELECT run_id, note, tags, updated_at FROM run_notes
            WHERE {RUN_FILTER.format(col='run_id')} ORDER BY updated_at DESC, run_id""",
        {"ids": id_list(run_ids)}, home)
    # DuckDB hands a list column over as arrays: plain lists compare, print and test as people expect.
    df["tags"] = [list(t) for t in df["tags"]] if len(df) else pd.Series([], dtype=object)
    return df


def tags_in_use(*, home: Path | None = None) -> list[str]:
    """Every tag some run has, sorted (case aside, then as written)."""
    df = query_frame("SELECT DISTINCT unnest(tags) AS tag FROM run_notes", {}, home)
    return sorted(df["tag"].tolist(), key=lambda t: (t.casefold(), t))
