"""The Content page's "How the gap grows" section: SPEN ÷ GPT against training tokens per model size (the
plateau's evaluations, the annealed finals of runs of several lengths) and against model size at matched
tokens per parameter; every extension to the paper's budget labelled as the extrapolation it is."""
from __future__ import annotations

import math

import pandas as pd
import streamlit as st

from ema_core.studies.content.growth import (GROWTH_MIN_POINTS, GROWTH_MODEL, GROWTH_POOLS, GapGrowth, SizeTrend,
                                             gap_growth, growth_series, growth_statement, size_statement, size_trend,
                                             tokens_text)
from ema_core.studies.content.shared import PAPER_PARAMS, PAPER_RATIO, PAPER_TOKENS, ratio_text
from ema_core.studies.content.figures import growth_chart, growth_frame
from pages._ui import chart_with_downloads, table_downloads
from store import StoreError
from store.content import lm_family_runs, lm_token_class_pairs


def growth_section(picked: list[str]) -> None:
    """How the gap grows: per (corpus, size) of the runs picked, with their family's other lengths."""
    st.subheader("How the gap grows")
    st.markdown(
        f"The paper measures SPEN at {PAPER_RATIO:.1f}× GPT-2's perplexity after {tokens_text(PAPER_TOKENS)} "
        f"training tokens at {tokens_text(PAPER_PARAMS)} parameters; these runs stop far earlier. Each periodic "
        "evaluation gives SPEN ÷ its GPT's perplexity (exp of the loss difference, per seed at the same step), on "
        f"every token and on recall tokens. **The fit**: {GROWTH_MODEL}, Δ = SPEN's loss − the GPT's "
        "(nats/token), t = training tokens seen, by least squares through the evaluations made on the learning "
        "rate's plateau — after the warm-up, before the decay (`train.schedule=wsd`), where every point is of a "
        "model still training at its rate. **Annealed points** are the field's reading: runs of the same "
        "settings but of different lengths (`--set train.steps=N`), each evaluated once its rate has decayed; a "
        "wsd run of N steps is the longer run up to its decay, so each is a cool-down branched off one plateau. "
        "Extended to the paper's budget a fit is **an extrapolation, not a measurement**: no rule judges it."
    )
    try:
        family = lm_token_class_pairs(lm_family_runs(picked)).to_dict("records")
        finals = lm_token_class_pairs(None, "final").to_dict("records")
    except StoreError as exc:
        st.error(str(exc))
        return
    series = growth_series(family)
    for (corpus, size), records in series.items():
        if len(series) > 1:
            st.markdown(f"#### {size} on {corpus}")
        _series(records, f"{corpus}_{size}" if len(series) > 1 else "")
    corpora = {r.get("corpus") for r in family}
    trends = [t for t in (size_trend([r for r in finals if r.get("corpus") in corpora], pool)
                          for pool in GROWTH_POOLS) if t is not None]
    if trends:
        _sizes(trends)


def _series(records: list[dict], tag: str) -> None:
    first = [f for f in (gap_growth(records, pool, first_pass=True) for pool in GROWTH_POOLS) if f is not None]
    every = [f for f in (gap_growth(records, pool, at=None) for pool in GROWTH_POOLS) if f is not None]
    annealed = [f for f in (gap_growth(records, pool, first_pass=True, annealed=True) for pool in GROWTH_POOLS)
                if f is not None]
    if not every and not annealed:
        st.caption(f"Not enough points: the fit needs SPEN and its GPT with at least {GROWTH_MIN_POINTS} periodic "
                   "evaluations on the plateau, after the warm-up and before the decay. A cosine schedule (the "
                   "`quick` and `tiny` presets) decays from the end of its warm-up and has none: train with "
                   "`--preset fresh` (or `long`, on Austen).")
        return
    if first:
        _growth_fits(first, _name("first_pass", tag))
    elif every:
        st.info(f"**No extrapolation to the paper's budget from the plateau.** It is quoted only from a fit on the "
                f"*first pass*: evaluations made before any training token was seen twice, at least "
                f"{GROWTH_MIN_POINTS} of them on the plateau. These runs have fewer (or were stored before the "
                "training split's size was kept): past one pass a model can memorise its training text, and a line "
                "through repeated passes says nothing of fresh tokens at scale.")
    if annealed:
        st.markdown(f"**Annealed points** — one run per length, each cooled down (first pass, at least "
                    f"{GROWTH_MIN_POINTS} lengths):")
        _growth_fits(annealed, _name("annealed", tag))
    else:
        st.caption(f"No annealed fit: it needs the same settings trained to at least {GROWTH_MIN_POINTS} lengths "
                   "on the first pass (for the `fresh` preset: `--set train.steps=625`, `1250`, `2500` beside its "
                   "5,000; docs/benchmarks.md).")
    if any((f.passes_to or 2) > 1 for f in every):
        st.markdown("**Every plateau evaluation, repeated passes included** — within the data, not extended:")
        _growth_fits(every, _name("all_passes", tag))


def _name(what: str, tag: str) -> str:
    return f"{what}_{tag}" if tag else what


def _growth_fits(fits: list[GapGrowth], name: str) -> None:
    """One set of growth fits: its chart, its sentence and its table (the extrapolation's columns only when
    the fits reach beyond their data)."""
    chart_with_downloads(growth_chart(fits), f"content_gap_growth_{name}", key=f"content_growth_chart_{name}")
    st.markdown(growth_statement(fits))
    table = growth_frame(fits)
    shown = pd.DataFrame({
        "tokens": table["tokens"], "a (nats/token)": table["a"].map(lambda v: f"{v:.4f}"),
        "b (nats/token per decade)": table["b"].map(lambda v: f"{v:.4f}"),
        ("runs" if fits[0].annealed else "evaluations"): table["evaluations"],
        "seeds": table["seeds"], "passes": table["passes"],
        "fitted (training tokens)": [f"{tokens_text(lo)}–{tokens_text(hi)}"
                                     for lo, hi in zip(table["fitted_from"], table["fitted_to"])],
        "SPEN ÷ GPT at the last point fitted": table["ratio_at_end"].map(ratio_text),
    })
    if fits[0].extrapolated:
        shown[f"at {tokens_text(PAPER_TOKENS)} tokens (extrapolated)"] = table["ratio_at"].map(ratio_text)
        shown[f"{100 * fits[0].level:g} % interval"] = [f"{ratio_text(lo)}–{ratio_text(hi)}"
                                                      for lo, hi in zip(table["ratio_lo"], table["ratio_hi"])]
        shown["decades beyond the data"] = table["decades"].map(lambda v: f"{v:.1f}")
        shown["interval from"] = table["interval_from"]
        shown["the paper"] = table["paper"].map(lambda v: "" if math.isnan(v) else f"{v:.1f}")
    st.table(shown, hide_index=True)
    through = ("the annealed final evaluations of runs of several lengths, first pass" if fits[0].annealed
               else "the first pass's plateau evaluations")
    what = (f"fitted through {through} and extrapolated to the paper's {tokens_text(PAPER_TOKENS)} training "
            "tokens: an extrapolation, not a measurement"
            if fits[0].extrapolated else "fitted through every plateau evaluation, repeated passes included; "
                                         "not extended beyond the data")
    size = f" at size {fits[0].size}" if fits[0].size else ""
    table_downloads(shown, f"content_gap_growth_{name}", key=f"content_growth_dl_{name}",
                    caption=f"How the gap grows{size}: {GROWTH_MODEL} (Δ = SPEN − GPT, nats/token; t = training "
                            f"tokens) {what}.", label=f"tab:content-gap-growth-{name.replace('_', '-')}")
    st.caption(
        "**The interval** is the wider of the fit's prediction interval (from its residuals) and, with two seeds "
        "or more, the seeds' own (each seed's line on its own, mean ± t × std / √seeds): the evaluations of one "
        "run share a model, so the residuals alone understate the uncertainty. It covers the noise of these runs, "
        "not the model's form: a gap that levels off, or grows faster, at scale lies outside it. **Not the "
        "paper's setting**: a tiny model, our corpus and tokenizer, perplexity on our held-out text; compare the "
        "trend, not the number. Hollow points are measured but not fitted.")


def _sizes(trends: list[SizeTrend]) -> None:
    """The gap against model size at matched tokens per parameter: a sentence and a table."""
    st.markdown("**Against model size**, at matched tokens per parameter:")
    st.markdown(size_statement(trends))
    rows = []
    for t in trends:
        for size, params, delta, seeds in t.sizes:
            rows.append({"tokens": t.label, "size": size, "parameters": tokens_text(params), "seeds": str(seeds),
                         "SPEN ÷ GPT (measured)": ratio_text(math.exp(delta))})
        lo, hi = t.ratio_interval(t.at)
        rows.append({"tokens": t.label, "size": "the paper's (extrapolated)", "parameters": tokens_text(t.at),
                     "seeds": "", "SPEN ÷ GPT (measured)": f"{ratio_text(t.ratio(t.at))} [{ratio_text(lo)}, "
                                                             f"{ratio_text(hi)}], extrapolated"})
    shown = pd.DataFrame(rows)
    st.table(shown, hide_index=True)
    table_downloads(shown, "content_gap_by_size", key="content_gap_by_size_dl",
                    caption=f"SPEN ÷ GPT perplexity by model size at {trends[0].tokens_per_param:.2f} training "
                            "tokens per parameter (each run cooled down at its end), mean Δ over seeds; the last "
                            "row extends Δ = a + b·log10 N to the paper's parameters at the same tokens per "
                            "parameter: an extrapolation, not a measurement.", label="tab:content-gap-by-size")
