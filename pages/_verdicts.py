"""How every page states a judged claim: one plain line first, the rule and its numbers on demand.

A verdict is read in one line (what was expected, what was measured, the verdict and how strong the
evidence is: :attr:`ema_core.scoreboard.Score.line`); the formula, Δ, its std, the threshold and t
sit in an expander with the rule.  A caveat about the runs (an under-trained task, a missing floor)
is said once below the claims it concerns, however many of them it concerns.
"""
from __future__ import annotations

from typing import Iterable

import streamlit as st

from ema_core.palette import VERDICT_BADGES
from ema_core.scoreboard import Score


def badge(score: Score) -> str:
    """The verdict as a coloured Markdown badge (its colour and icon are the palette's, by outcome)."""
    color, icon = VERDICT_BADGES[score.verdict]
    return f":{color}-badge[{icon} {score.word}]"


def verdict_lines(scores: Iterable[Score], rule: str, key: str, title: str = "The rule and the numbers",
                  said: Iterable[str] = ()) -> set[str]:
    """Each claim on one line, each caveat once, then ``rule`` and every claim's full sentence in an expander.

    ``said``: caveats the page has stated already (a warning beside a chart), not repeated here.
    Returns every caveat said so far, for the next call on the same page."""
    scores, said = list(scores), set(said)
    if not scores:
        return said
    with st.container(key=key):
        for s in scores:
            st.markdown(f"{badge(s)} {s.line}")
        for note in dict.fromkeys(s.note for s in scores if s.note and s.note not in said):
            st.caption(note)
    with st.expander(title):
        st.markdown(rule)
        st.markdown("\n".join(f"- {s.detail}" for s in scores))
    return said | {s.note for s in scores if s.note}
