"""The Content page's "Where the gap lives" section: SPEN's loss minus its GPT's per token class (or
frequency band), over training and per predictor, and the pre-registered claims judged; and the gap table
the page's re-evaluations show again on another text."""
from __future__ import annotations

import math

import pandas as pd
import streamlit as st

from ema_core.lm.ngram import BASELINES, COPY_MIX
from ema_core.studies.content.gap import (GAP_PREDICTION, GAP_RULE, PARTITION_LABELS, PARTITIONS, VERDICT_K,
                                          class_gaps, class_label, gap_scores, gap_verdicts, variant_class_deltas)
from ema_core.studies.content.shared import ALL_TOKENS, VERDICT_DECIMALS, verdict_number
from ema_core.studies.content.figures import (class_gap_chart, class_gap_frame, lm_curve_chart, lm_curve_frame,
                                              token_class_curves, variant_delta_frame)
from pages._ui import chart_with_downloads, table_downloads, unbroken
from pages._verdicts import verdict_lines
from store import StoreError, mean_std_cells
from store.content import lm_token_class_pairs


def mean_std_columns(df: pd.DataFrame, digits: dict[str, int], default: int = 3) -> pd.DataFrame:
    """``mean ± std`` text cells (``store.mean_std_cells``) with a number of digits per column."""
    out = df.copy()
    for col in [c[:-5] for c in df.columns if c.endswith("_mean") and c[:-5] + "_std" in df.columns]:
        folded = mean_std_cells(df[[f"{col}_mean", f"{col}_std"]], digits=digits.get(col, default))
        at = out.columns.get_loc(f"{col}_mean")
        out = out.drop(columns=[f"{col}_mean", f"{col}_std"])
        out.insert(at, col, folded[col])
    return out


def verdict_cell(v: float) -> str:
    """A verdict's number as its rule rounds it; blank where there is none (NaN: the std of a single seed)."""
    return "" if math.isnan(v) else verdict_number(v)


def gap_table(frame: pd.DataFrame, split, what: str) -> tuple[pd.DataFrame, list[str]]:
    """The gap table of a :class:`~ema_core.studies.content.gap.GapSplit` (its ``class_gap_frame``), shown on the
    page, and the n-gram baselines it holds a column of.  Shares as percentages, on screen and in the
    downloads alike; the baselines' columns beside the GPT's (the loss on each class with no network)."""
    table = frame.assign(token_share=[f"{100 * v:.1f}" if math.isfinite(v) else "" for v in frame["token_share"]],
                         share_mean=100 * frame["share_mean"], share_std=100 * frame["share_std"])
    table = mean_std_columns(table.drop(columns=["name"]), {"share": 1})
    baselines = [b for b in BASELINES if b in table]
    for b in baselines:
        table[b] = [f"{v:.3f}" if math.isfinite(v) else "" for v in table[b]]
    copy = ["copy_gap"] if "copy_gap" in table else []
    names = {"class": what, "token_share": "% of tokens", "spen": f"{split.variant} (nats/token)",
             "gpt": "GPT (nats/token)", **{b: f"{b} baseline (nats/token)" for b in baselines},
             "gap": "gap: SPEN − GPT (nats/token)", "copy_gap": "gap, both with a free copy (nats/token)",
             "share": "share of the gap (%)", "n": "seeds"}
    table = table[["class", "tokens", "token_share", "spen", "gpt", *baselines, "gap", *copy, "share", "n"]
                  ].rename(columns=names)
    table["tokens"] = table["tokens"].round().astype("int64")
    st.table(unbroken(table, *(names[c] for c in ("spen", "gpt", "gap", *copy, "share"))), hide_index=True)
    return table, baselines


def gap_section(picked: list[str], x_axis: str) -> list[dict]:
    """Where SPEN's gap to the GPT lives: per token class (or frequency band), over training, per predictor,
    and the pre-registered claims judged by the shared rule.  Returns the class rows it read (none when the
    runs hold no token classes), which the next section reads too."""
    st.subheader("Where the gap lives: token classes")
    st.markdown(
        "Every evaluation splits the held-out loss by token. **Token classes** follow zoology (arXiv 2312.04927): a "
        "target is *recall* when the bigram it completes (previous token, target) already occurred in the window, "
        "bucketed by how far back (1–16, 17–64, 65–256, 257+ tokens); *first* when the target has not occurred "
        "in the window yet; *other* the rest. **Frequency bands** rank token types by their count in the training "
        "split: *frequent* covers the first 50 % of training tokens, *middle* up to 90 %, *rare* the rest. "
        "**Recall by training-bigram count** splits the recall tokens by how often their bigram occurs in the "
        "training split (0, 1–9, 10 or more: zoology's second axis; a common bigram needs no memory of the "
        "window). **Recall distance at matched positions** splits each distance bucket by the target's "
        "position, so that far and near recall can be compared at the same positions (a recall 65–256 back "
        "exists only past position 65, where every loss is lower). "
        f"**What to expect**: {GAP_PREDICTION} — an EMA trace keeps that a token occurred, not where, so copying "
        "it back is what attention can do and SPEN cannot."
    )
    try:
        rows = lm_token_class_pairs(picked)
    except StoreError as exc:
        st.error(str(exc))
        return []
    if rows.empty:
        st.info("These runs hold no token classes: they were stored before the held-out loss was split by token "
                "class. Runs launched now store the split at every evaluation.")
        return []
    without = sorted(set(picked) - set(rows["run_id"]))
    if without:
        st.caption(f"{len(without)} of the runs picked hold no token classes (stored before the split) and are "
                   "left out of this section.")
    partition = st.radio("Split the loss by", list(PARTITIONS), format_func=PARTITION_LABELS.get, horizontal=True,
                         key="content_partition")
    what = PARTITION_LABELS[partition]
    records = rows.to_dict("records")

    split = class_gaps(records, partition)
    if split is None:
        st.info(f"No SPEN run here has the GPT of its seed and settings among the runs picked, both split by "
                f"{what}: the gap needs both.")
    else:
        frame = class_gap_frame(split, class_gaps(records, partition, evaluation=COPY_MIX))
        table, baselines = gap_table(frame, split, what)
        table_downloads(table, f"content_gap_{partition}", key="content_gap_dl",
                        caption=f"Where the gap lives, per {what}: {split.variant}'s loss per token minus the GPT's "
                                "of the same seed and settings on the final evaluation, then mean ± std across "
                                "seeds (negative: SPEN is better); share of the gap = tokens × gap / "
                                "Σ tokens × gap, per seed.", label=f"tab:content-gap-{partition}")
        st.caption(
            f"**gap** = {split.variant}'s loss per token on the {what} − the GPT's (the GPT of the same seed and "
            "settings, as in the final table), formed within each seed; **a negative gap means SPEN is better** on "
            "those tokens. **share of the gap** = tokens × gap ÷ Σ over the classes of tokens × gap, per seed: the "
            "part of the whole gap the class carries (zoology: 82 % on recall tokens). Shares add up to 100 % on "
            "every seed because the classes' summed losses add up to the whole loss; they are read against the "
            f"whole gap (the *{ALL_TOKENS}* row), so where that is near 0 they are large, of either sign, and "
            "unstable. A class with no tokens (e.g. recall more than 256 back in windows of 256 tokens) has no "
            "gap and a share of 0.")
        if baselines:
            st.caption(
                "**Baselines with no network**, scored on the same windows (`ema_core/lm/ngram.py`): **bigram** — "
                "the training text's bigram counts (interpolated absolute discounting); **cache** — that bigram "
                "mixed with the pairs already seen in the window, the simplest model that copies (its weight "
                "chosen on training text); **kn_trigram** — an interpolated Kneser–Ney trigram of the training "
                "text, local word order two tokens back and no memory of the window. A class a model loses to the "
                "bigram on is one it has not yet learned even the training text's statistics of; what the cache "
                "gains over the bigram on recall tokens is what copying is worth there; what the trigram already "
                "gets on first and other tokens is local order. **gap, both with a free copy**: each trained model "
                "mixed with the window's own bigrams as the cache mixes them (its weight chosen on the model's "
                "losses on training text), SPEN − GPT again: the part of the gap that a copy mechanism closes.")
    chart_col, curve_col = st.columns([1, 1.35])
    if split is not None:
        with chart_col:
            chart_with_downloads(class_gap_chart(frame, split.variant, what), f"content_gap_{partition}",
                                 key="content_gap_chart")
    with curve_col:
        name = st.selectbox(f"{what.capitalize()} over training", PARTITIONS[partition], format_func=class_label,
                            key=f"content_class_{partition}")
        curves = lm_curve_frame(token_class_curves(rows, name))
        label = class_label(name)
        if curves["value"].notna().any():
            chart_with_downloads(
                lm_curve_chart(curves, x=x_axis, y_title=f"loss per token on {label} (nats/token)",
                               title=f"Over training: {label} tokens",
                               subtitle="mean across seeds; faint: each seed; the validation steps' evaluations"),
                f"content_class_curves_{name}", key="content_class_curves_chart")
            st.caption("The periodic evaluations (on `eval_tokens`), x axis as in the validation curves above: where "
                       "the GPT's line crosses below SPEN's on a recall class is where attention starts to copy.")
        else:
            st.info(f"No {label} tokens in these runs' periodic evaluations.")

    deltas = variant_class_deltas(records, partition)
    if deltas:
        st.markdown(f"**Every SPEN predictor against SPEN linear**, per {what}")
        grid = mean_std_cells(variant_delta_frame(deltas), digits=VERDICT_DECIMALS)
        st.table(unbroken(grid, *grid.columns[1:-1]), hide_index=True)
        table_downloads(grid, f"content_gap_variants_{partition}", key="content_gap_variants_dl",
                        caption=f"Each SPEN variant's loss per token minus SPEN linear's per {what} (nats/token), "
                                "within each seed both hold, mean ± std across seeds; negative: the variant is "
                                "better.",
                        label=f"tab:content-gap-variants-{partition}")
        st.caption(f"Δ = the variant's loss per token − SPEN linear's, within each seed both hold; negative: the "
                   f"variant is better there. *{ALL_TOKENS}* is the whole held-out loss: a raw-token control that "
                   "wins on the recall classes while it is flat there says where attention's advantage sits.")

    if split is not None:
        verdicts = gap_verdicts(records)
        st.markdown(f"##### Verdict: does the gap live where the paper's argument puts it? ({split.variant})")
        verdict_lines(gap_scores(verdicts), GAP_RULE, key="content_gap_verdicts")
        shown = pd.DataFrame([{
            "claim": v.claim.what, "the paper predicts": v.claim.paper,
            "Δ (nats/token)": verdict_cell(v.delta.mean), "std of Δ": verdict_cell(v.delta.std),
            "threshold": verdict_cell(v.threshold), "seeds": v.delta.n, "verdict": v.word} for v in verdicts])
        with st.expander("The claims' numbers as a table"):
            st.table(shown, hide_index=True)
            table_downloads(shown, "content_gap_verdict", key="content_gap_verdict_dl",
                            caption="Where the gap lives, judged: each claim's Δ per seed (gap per token on one pool "
                                    f"of classes − on another), mean and std across seeds; threshold = {VERDICT_K:g} "
                                    "× the std of Δ.", label="tab:content-gap-verdict")
    return records

