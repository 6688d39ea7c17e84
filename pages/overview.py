"""Overview: what reproduced (every judged claim in one board), what the store holds, a one-click reproduction."""
from __future__ import annotations

import math

import pandas as pd
import streamlit as st

from ema_core.experiments import REGISTRY, build_config
from ema_core.scoreboard import OUTCOMES, RULE_LINE, missing_seeds
from ema_core.studies import STUDIES
from ema_core.verdicts import RULE_AS_TEST, VERDICT_MIN_SEEDS, VERDICT_WORDS
from pages._router import ensure_router
from pages._state import launch, read_store, result_link
from pages._ui import table_downloads
from pages._verdicts import verdict_lines
from store import store_summary
from store.scoreboard import Judged, scoreboard

ensure_router()  # before anything is drawn: see pages/_router.py

st.title("EMA Lab")
st.markdown(
    "A workbench for *EMA Is Not All You Need* (arXiv 2604.08556): where a fixed-decay recurrent "
    "context — an exponential moving average $h_t = (1-\\alpha)h_{t-1} + \\alpha x_t$ — keeps "
    "structure, and where it loses content. Every number on these pages comes from runs made here."
)

board: list[Judged] = read_store(scoreboard)
scores = [s for j in board for s in j.scores]
claims = [s for s in scores if not s.sanity]


def board_frame() -> pd.DataFrame:
    """The scoreboard as a table: one row per judged claim (sanity checks included, marked)."""
    return pd.DataFrame([{
        "study": STUDIES[s.study].title, "claim": s.claim + (" (sanity check)" if s.sanity else ""),
        "verdict": s.word, "|Δ| ÷ threshold": None if math.isnan(s.strength) else round(s.strength, 2),
        "seeds": s.seeds, "measured here": s.measured, "the paper": s.paper,
    } for s in scores])


st.subheader("What reproduced")
if claims:
    counts = {o: sum(s.verdict == o for s in claims) for o in OUTCOMES}
    cols = st.columns(len(OUTCOMES))
    for col, o in zip(cols, OUTCOMES):
        col.metric(VERDICT_WORDS.get(o, "not measured").capitalize(), counts[o])
    st.caption(RULE_LINE + " Each study's runs are the finished group of one config holding the most seeds "
               "(the newest on a tie); its page lets you pick others.")
    frame = board_frame()
    # A static table: its cells wrap, so every claim reads whole at any width (a data grid would cut them).
    st.table(frame.style.format({"|Δ| ÷ threshold": "{:.2f}"}, na_rep=""), hide_index=True)
    st.caption("|Δ| ÷ threshold: how far Δ sits from the rule's threshold (2 × the std of Δ across seeds); above 1 "
               "is beyond the seeds' spread. Empty below 3 seeds.")
    table_downloads(frame, "claims_scoreboard", key="overview_board_dl",
                    caption="Every claim judged by the shared rule: Δ within each seed, judged on at least "
                            f"{VERDICT_MIN_SEEDS} seeds against 2 × its std across seeds.",
                    label="tab:claims-scoreboard")
else:
    st.info("No claim is judged yet: the store holds no finished structure, language-model or boundary runs. "
            "The quick reproduction below starts them.", icon=":material/science:")


def more_seeds(j: Judged):
    """The group's configs again at the seeds that bring it to the rule's minimum (done ones are reused)."""
    kind = STUDIES[j.study].kind
    cls = REGISTRY[kind].config_cls
    return [(kind, cls.model_validate({**cfg, "seed": s})) for cfg in j.configs
            for s in missing_seeds(j.seeds, j.span)]


st.subheader("The paper's claims, and where they are tested")
for j in board:
    study = STUDIES[j.study]
    with st.container(border=True, key=f"overview_study_{j.study}"):
        st.markdown(f"#### {study.title}\n{study.claim}  \n*Source: {study.source}.*")
        # The link opens the page on the runs judged here, whichever its own default would be.
        result_link(study.kind, j.run_ids, label=f"Tested on: {study.title}")
        if not j.run_ids:
            st.caption("No finished runs of this study yet: nothing judged.")
            continue
        seeds = ", ".join(map(str, j.seeds)) or "none paired"
        st.caption(f"Judged on {len(j.run_ids)} run(s) of settings {j.group}, seeds {seeds}.")
        paper = [s for s in j.scores if not s.sanity]
        checks = [s for s in j.scores if s.sanity]
        said = verdict_lines(paper, RULE_LINE + "\n\n" + RULE_AS_TEST, key=f"overview_claims_{j.study}")
        if checks:
            st.markdown("Sanity checks of the harness (they hold by construction or check the recipe):")
            verdict_lines(checks, RULE_LINE, key=f"overview_checks_{j.study}", title="The checks' numbers", said=said)
        wanted = missing_seeds(j.seeds, j.span)
        if wanted:
            runs = len(wanted) * len(j.configs)
            st.markdown(f"**Not judged: {len(j.seeds)} seed{'' if len(j.seeds) == 1 else 's'}.** The rule needs "
                        f"{VERDICT_MIN_SEEDS}; {runs} more run(s) of these settings (seed{'s' if len(wanted) > 1 else ''} "
                        f"{', '.join(map(str, wanted))}) would judge them.")
            if st.button(f"Launch the missing seeds ({runs} run{'' if runs == 1 else 's'})",
                         key=f"overview_more_{j.study}", icon=":material/add_task:"):
                launch(lambda j=j: more_seeds(j), preset=None)

for study in STUDIES.values():
    if study.judges or study.page is None:
        continue
    with st.container(border=True, key=f"overview_study_{study.name}"):
        st.markdown(f"#### {study.title}\n{study.claim}  \n*Source: {study.source}.*")
        st.caption(study.not_judged)
        st.page_link(study.page, label=f"Tested on: {study.title}", icon=":material/arrow_forward:")

summary = read_store(store_summary)
st.subheader("The store")
a, b, c = st.columns(3)
a.metric("Runs", summary["runs"])
b.metric("Metric rows", f"{summary['metric_rows']:,}")
c.metric("Result rows", f"{sum(summary['results'].values()):,}")
if summary["runs"]:
    st.dataframe(summary["by_kind_status"], hide_index=True, key="overview_by_kind")
else:
    st.info("The store is empty. The trace-dilution explorer needs no runs; the button below starts a quick reproduction.")

def quick_jobs() -> list[tuple[str, object]]:
    """Each kind's quick reproduction (``Experiment.reproduction``), over its `quick` preset."""
    return [(kind, build_config(kind, preset="quick", overrides=dict(overrides)))
            for kind, exp in REGISTRY.items() if "quick" in exp.presets and exp.one_click
            for overrides in exp.reproduction]


st.subheader("Quick reproduction")
st.markdown("Starts the `quick` preset of the paper's three studies as background jobs — for the language "
            "model, SPEN and the same-size GPT, each at its learning rate chosen on dev, so the content claim "
            "can be checked from this one click; follow them on the Jobs page. The boundary map (about 27 minutes "
            "on two cores) is launched from its own page.")
if st.button("Run the quick reproduction", type="primary", icon=":material/play_arrow:", key="quick_repro"):
    launch(quick_jobs, preset="quick")
