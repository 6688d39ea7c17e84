"""How the benchmarks report: one JSON object with ``--json`` (what docs/benchmarks.md reads), else text,
its rows as fixed-width tables."""
from __future__ import annotations

import json
import re
from typing import Callable, Iterable, Mapping, Sequence


def print_rows(rows: Iterable[Mapping], columns: Sequence[tuple[str, str, str]]) -> None:
    """``rows`` as fixed-width columns under a header line: each column is (the row's key, its header,
    its format spec, e.g. ``"9.4f"``), a width first.  Text sits left, numbers right, as their specs
    put them; columns are one space apart."""
    widths = [re.match(r"\d+", spec).group() for _, _, spec in columns]
    print(" ".join(f"{head:{'' if spec.endswith('s') else '>'}{width}s}"
                   for (_, head, spec), width in zip(columns, widths)))
    for row in rows:
        print(" ".join(f"{row[key]:{spec}}" for key, _, spec in columns))


def show(report: dict, as_json: bool, text: Callable[[dict], None], **dumps) -> None:
    """A benchmark's report on stdout: with ``--json`` one JSON object (``dumps``: json.dumps's options),
    else ``text(report)``, its lines for a person."""
    if as_json:
        print(json.dumps(report, **dumps))
    else:
        text(report)
