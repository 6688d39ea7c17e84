"""Content: SPEN, a language model whose only context is EMA traces, beside the same-size GPT; the predictor
ablation."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import streamlit as st

from ema_core.studies.content.findings import (ALL_TOKENS, ATTN_INPUT_LABELS, GAP_PREDICTION, GAP_RULE, HEADLINE_RULE,
                                      PAPER_GPT_PPL, PAPER_RATIO, PAPER_SPEN_PPL, PARTITION_LABELS, PARTITIONS,
                                      VERDICT_DECIMALS, VERDICT_K, VERDICT_RULE, AblationVerdict, ablation_verdict,
                                      class_gaps, class_label, gap_verdicts, headline_verdict, lm_variant_label,
                                      variant_class_deltas, verdict_number)
from ema_core.experiments import REGISTRY, build_config
from ema_core.studies.content.evaluation import KIND as REEVAL_KIND
from ema_core.studies.content.evaluation import TrainedRun, load_trained, trained_run
from ema_core.studies.content.figures import (SMOOTHING, class_gap_chart, class_gap_frame, lm_ablation_chart,
                                      lm_ablation_frame, lm_curve_chart, lm_curve_frame, token_class_curves,
                                      variant_delta_frame)
from ema_core.lm.data import CorpusConfig
from ema_core.lm.ngram import BASELINES, COPY_MIX
from ema_core.lm.trained import MODEL_ARTIFACT, held_out_passages
from ema_core.palette import LM_VARIANTS
from ema_core.rundir import RunDir, emalab_home
from ema_core.studies.content.findings import ablation_score, gap_scores, headline_score
from pages._content_growth import growth_section
from pages._router import ensure_router
from pages._sources import check_sources
from pages._state import finished_runs, launch, pick_runs, read_store
from pages._ui import chart_with_downloads, table_downloads, unbroken
from pages._verdicts import verdict_lines
from store import StoreError, mean_std_cells
from store.content import (lm_ablation, lm_curves, lm_final_losses, lm_final_stats, lm_reeval_class_pairs,
                           lm_reevaluations, lm_runs, lm_token_class_pairs)
from store.export import mean_std

ensure_router()  # before anything is drawn: see pages/_router.py

KIND = "lm"
METRICS = {  # metric key -> axis title
    "val/loss": "validation loss (nats/token)", "val/ppl": "validation perplexity",
    "val/bpb": "validation bits per byte", "train/loss": "training loss (nats/token)",
}
LAUNCH_DEFAULT = ["GPT", "SPEN linear", "SPEN softmax attention (state)", "SPEN softmax attention (tokens)"]
VARIANT_RANK = {label: i for i, (label, _) in enumerate(LM_VARIANTS.values())}


def _cells(df: pd.DataFrame, digits: dict[str, int], default: int = 3) -> pd.DataFrame:
    """``mean ± std`` text cells (``store.mean_std_cells``) with a number of digits per column."""
    out = df.copy()
    for col in [c[:-5] for c in df.columns if c.endswith("_mean") and c[:-5] + "_std" in df.columns]:
        folded = mean_std_cells(df[[f"{col}_mean", f"{col}_std"]], digits=digits.get(col, default))
        at = out.columns.get_loc(f"{col}_mean")
        out = out.drop(columns=[f"{col}_mean", f"{col}_std"])
        out.insert(at, col, folded[col])
    return out


def _millions(n: float) -> str:
    return f"{n / 1e6:.2f}M" if n >= 1e5 else f"{n:,.0f}"


def launch_section() -> None:
    st.subheader("Launch")
    exp = REGISTRY[KIND]
    presets = list(exp.presets)  # declared by budget
    st.markdown("One run per variant and seed, as background jobs; the page shows them once they are done. "
                "`quick` takes a few minutes per run on two CPU cores, `tiny` about ten, `long` about 1.5 hours "
                "(how the gap grows, below); `fresh` is that budget on fresh tokens, the free-prose corpus (built once by "
                "`make corpus-free-prose`); `small` and `paper` want a GPU. The GPT is sized to SPEN linear.")
    labels = [label for label, _ in LM_VARIANTS.values()]
    with st.form("content_launch"):
        left, mid, right = st.columns([1, 1, 1])
        preset = left.selectbox("Preset", presets, key="content_preset")
        n_seeds = mid.number_input("Seeds", min_value=1, max_value=10, value=3, step=1, key="content_n_seeds")
        first = right.number_input("First seed", min_value=0, max_value=2**32 - 11, value=0, step=1,
                                   key="content_first_seed")
        variants = st.multiselect("Variants", labels, default=LAUNCH_DEFAULT, key="content_variants",
                                  help="(state): attention reads the current trace state only; (sequence): the "
                                       "past trace states; (tokens): the raw tokens, a control with no EMA "
                                       "bottleneck.")
        launched = st.form_submit_button("Launch", type="primary", icon=":material/play_arrow:")
    if launched:
        if not variants:
            st.warning("Pick at least one variant.")
            return
        by_label = {label: key for key, (label, _) in LM_VARIANTS.items()}
        seeds = range(int(first), int(first) + int(n_seeds))

        def configs():
            for label in variants:
                model, predictor, attn_input = by_label[label]
                for s in seeds:
                    yield KIND, build_config(KIND, preset=preset, seed=s, overrides={
                        "model": model, "predictor": predictor, "attn_input": attn_input})

        launch(configs, preset, seed_key="content_first_seed")


st.title("Content")
st.markdown(
    """
SPEN (*Sparse Predictive Equilibrium Network*) is a language model whose only view of the past is three
EMA traces of its input (α = 0.5, 0.1, 0.02): a predictor reads the traces, a sparse feed-forward network
does the rest. The **GPT** beside it has the same width, depth, vocabulary and parameter count, with causal
attention instead. Both are trained on the same text with the same tokenizer and budget. The paper's
claim: a fixed-decay trace destroys *which* token came when, so SPEN falls far behind (C4 perplexity 260
against GPT-2 Small's 33), and swapping its **predictor** — linear, linear attention, softmax attention —
changes nothing: the loss lives in the traces, not in what reads them. An attention predictor can read
the current trace **state** (what the paper's argument covers), the **sequence** of past trace states
(which an EMA does not fully hide), or — our control — the raw **tokens**.
"""
)

runs = read_store(lm_runs)

done = finished_runs(runs, "language-model", "one run per variant and seed", launch_section)

done["variant"] = [lm_variant_label(*k) for k in zip(done["model"], done["predictor"], done["attn_input"])]
info = done.set_index("run_id")
# Newest comparable group first (lm_runs is newest first), then variants in their order, then seeds.
picked = pick_runs(
    "Runs (default: every variant and seed of the newest comparable settings)", done["run_id"],
    lambda r: info.at[r, "group_id"],
    lambda r: (VARIANT_RANK.get(info.at[r, "variant"], len(VARIANT_RANK)), info.at[r, "variant"],
               info.at[r, "seed"], r),
    format_func=lambda r: f"{info.at[r, 'variant']} · seed {info.at[r, 'seed']} · settings {info.at[r, 'group_id']}",
    key="content_runs",
)
if not picked:
    st.info("Pick at least one run.")
    launch_section()
    st.stop()
sel = info.loc[picked]
groups = list(dict.fromkeys(sel["group_id"]))
seeds = sorted({int(s) for s in sel["seed"].dropna()})
st.caption(f"{len(picked)} run(s) · {sel['variant'].nunique()} variant(s) · seeds {', '.join(map(str, seeds))} · "
           f"settings {', '.join(groups)} · ± is the standard deviation across seeds")
if len(groups) > 1:
    st.warning(f"The runs picked come from {len(groups)} different settings (size, corpus, budget, ...); "
               "mean ± std then mixes them, and a SPEN is only divided by a GPT of its own settings.")
with st.expander("Settings the runs share (besides model, predictor, attention input and seed)"):
    shared = {g: json.loads(sel.loc[sel["group_id"] == g, "comparable"].iloc[0]) for g in groups}
    st.json(shared, expanded=len(groups) == 1)
    for g, config in shared.items():
        if config.get("train", {}).get("lr") == "auto":  # the rate each model trained at, as its runs recorded it
            part = sel[sel["group_id"] == g]
            rates = [f"{model.upper()} {', '.join(f'{lr:g}' for lr in sorted(part.loc[part['model'] == model, 'lr'].dropna().unique()))}"
                     for model in sorted(part["model"].dropna().unique())]
            st.caption(f"Settings {g}: `train.lr = auto`, each model at the rate chosen for it — {'; '.join(rates)}.")

# -- curves --------------------------------------------------------------------------------------------
st.subheader("Validation curves")
c1, c2, c3, c4 = st.columns([1.3, 1, 1.4, 1.2])
metric = c1.selectbox("Metric", list(METRICS), format_func=METRICS.get, key="content_metric")
x_axis = c2.radio("x axis", ["step", "tokens"], format_func={"step": "optimiser step", "tokens": "tokens"}.get,
                  horizontal=True, key="content_x")
smoothing = c3.radio("Smoothing", list(SMOOTHING), horizontal=True, key="content_smoothing",
                     help="An EMA of each seed's curve before the mean: s_t = w·s_{t−1} + (1 − w)·v_t.")
with c4:
    log_x = st.toggle("log x", key="content_log_x")
    log_y = st.toggle("log y", key="content_log_y")
    show_seeds = st.toggle("each seed", value=True, key="content_seeds")
try:
    curves = lm_curves(picked, metric)
except StoreError as exc:
    st.error(str(exc))
    st.stop()
if curves.empty:
    st.info(f"These runs logged no {METRICS[metric]}.")
else:
    frame = lm_curve_frame(curves, SMOOTHING[smoothing])
    sub = ("mean across seeds" + ("; faint: each seed" if show_seeds else "")
           + ("" if smoothing == "none" else f"; smoothed: {smoothing}"))
    chart_with_downloads(lm_curve_chart(frame, x=x_axis, log_x=log_x, log_y=log_y, seeds=show_seeds,
                                        y_title=METRICS[metric], subtitle=sub),
                         f"content_curves_{metric.replace('/', '_')}", key="content_curves_chart")
    st.caption("A validation point every `eval_every` optimiser steps, each on a slice of the held-out text "
               "(`eval_tokens`); the final numbers below use the whole held-out text (or `final_eval_tokens`).")

# -- final evaluation ----------------------------------------------------------------------------------

def _first(stats: pd.DataFrame, model: str, predictor: str = "linear", attn_input: str = "state") -> pd.DataFrame:
    """The row of one variant, else the first row of that model (an empty frame when none)."""
    rows = stats[stats["model"] == model]
    exact = rows[(rows["predictor"] == predictor) & (rows["attn_input"] == attn_input)]
    return (exact if len(exact) else rows).head(1)


def final_table(stats: pd.DataFrame, sel: pd.DataFrame) -> None:
    final = stats[["variant", "params", "n", "loss_mean", "loss_std", "ppl_mean", "ppl_std", "bpb_mean", "bpb_std",
                   "ppl_ratio_mean", "ppl_ratio_std", "bpb_ratio_mean", "bpb_ratio_std"]]
    final = _cells(final, {"ppl": 1, "ppl_ratio": 2, "bpb_ratio": 2}).rename(columns={
        "n": "seeds", "loss": "val loss (nats/token)", "ppl": "perplexity", "bpb": "bits per byte",
        "ppl_ratio": "perplexity ÷ GPT", "bpb_ratio": "bits per byte ÷ GPT"})
    # Parameter counts with a thousands separator on screen; the downloads keep the number (the
    # Markdown and LaTeX writers add the separator themselves).
    st.table(unbroken(final, *final.columns[3:]).style.format({"params": "{:,.0f}"}, na_rep=""), hide_index=True)
    table_downloads(final, "content_final", key="content_final_dl",
                    caption="Final evaluation on the held-out text per variant, mean ± std across seeds; "
                            "ratios formed per seed with the GPT of the same seed.", label="tab:content-final")
    corpora = ", ".join(sorted({str(c) for c in sel["corpus"].dropna()})) or "?"
    held_out = sorted({str(v).title() for v in sel.loc[sel["corpus"] == "austen", "val_doc"].dropna()})
    tokens = sel["tokens"].dropna()
    vocab = ", ".join(sorted({str(int(v)) for v in sel["vocab_size"].dropna()}))
    st.caption(
        f"**Ours**: corpus *{corpora}*" + (f" with *{', '.join(held_out)}* held out whole as validation" if held_out
                                           else "")
        + f", size {', '.join(sorted({str(s) for s in sel['size'].dropna()}))}, "
        + (f"{_millions(tokens.median())} training tokens per run, " if len(tokens) else "")
        + f"our own BPE ({vocab} tokens). **The paper**: 130M parameters, FineWeb-Edu (8B tokens), perplexity on "
        "C4. A different corpus, tokenizer and scale: compare the ratios and the ablation's spread, not the "
        "perplexities themselves. ÷ GPT divides each SPEN run by the GPT run of the same seed and settings."
    )


def paper_table(stats: pd.DataFrame, found: pd.DataFrame, verdict: AblationVerdict) -> None:
    """The paper's numbers beside ours: SPEN linear (else the first SPEN present) against the GPT."""
    spen, gpt = _first(stats, "spen"), _first(stats, "gpt")
    name = spen["variant"].iloc[0] if len(spen) else "SPEN"

    def ours(rows: pd.DataFrame, col: str, digits: int, n: str = "n") -> tuple[str, int]:
        if rows.empty or pd.isna(rows[f"{col}_mean"].iloc[0]):
            return "", 0
        r = rows.iloc[0]
        return mean_std(float(r[f"{col}_mean"]), float(r[f"{col}_std"]), digits), int(r[n])

    def measured(measure: str) -> tuple[str, int]:
        if measure not in found.index:
            return "", 0
        r = found.loc[measure]
        return mean_std(float(r["value_mean"]), float(r["value_std"])), int(r["n"])

    rows = [  # (measure, the paper's number, its source, ours, seeds, how ours is measured)
        ("SPEN perplexity", f"{PAPER_SPEN_PPL}", "[A] [S]", *ours(spen, "ppl", 1),
         f"{name}, final evaluation on our held-out text (the paper: C4)"),
        ("GPT perplexity", f"{PAPER_GPT_PPL} (GPT-2 Small)", "[A] [S]", *ours(gpt, "ppl", 1),
         "the GPT sized to SPEN, same data, tokenizer and budget"),
        ("Perplexity, SPEN ÷ GPT", f"{PAPER_RATIO:.1f} (260 / 33, “8×”)", "[A] [S]",
         *ours(spen, "ppl_ratio", 2, "pairs"), f"per seed: {name} ÷ the GPT of the same seed"),
        ("Bits per byte, SPEN ÷ GPT", f"{math.log(PAPER_SPEN_PPL) / math.log(PAPER_GPT_PPL):.2f} (ln 260 / ln 33)",
         "derived from [A]", *ours(spen, "bpb_ratio", 2, "pairs"),
         "per seed; on one text, bits per byte scale with the loss, so the paper's ratio holds if both models "
         "share a tokenizer"),
        # Not "identical" beside a number: the verdict of a stated rule (content_findings.VERDICT_RULE), from the
        # numbers of the ablation section, with the seeds its thinnest comparison had.
        ("Predictor ablation: attention predictors reading the state against SPEN linear", "identical",
         "[A] [S]", verdict.word if verdict.verdict != "untested" else "", verdict.claim_seeds,
         "the verdict of the rule under Predictor ablation: within the seeds' spread of SPEN linear, with the "
         "raw-token control better beyond it (the power check)"),
        ("Raw-token control (the power check): loss below the best state reader", "—", "ours",
         *measured("tokens_gain"), "per seed: best state reader − best raw-token control (nats/token)"),
        ("SPEN Wikipedia perplexity", "729", "[U]", "", 0, "not measured here"),
    ]
    table = pd.DataFrame(
        [{"measure": what, "paper": paper, "ours": value, "seeds": n, "source": source,
          "ours measured as": how if value or how == "not measured here" else f"{how} — not in these runs"}
         for what, paper, source, value, n, how in rows])
    st.table(unbroken(table, "ours"), hide_index=True)
    table_downloads(table, "content_paper_vs_ours", key="content_paper_dl",
                    caption="The paper's numbers beside ours (mean ± std across seeds). [A] abstract, "
                            "[S] seed summaries, [U] unverified extraction.", label="tab:content-paper")
    st.caption("Sources: [A] the abstract, [S] the detailed summaries, [U] an unverified automatic extraction of the "
               "paper's tables — shown, never tuned to.")


SPREAD = {  # measure of store.content.lm_ablation -> what the spread table calls it
    "spread_state": "spread across predictors reading the current state (max − min)",
    "noise_state": "seed noise: pooled std across seeds of those predictors",
    "spread_sequence": "spread across attention predictors reading past trace states",
    "sequence_gain": "best state reader − best sequence reader",
    "tokens_gain": "best state reader − best raw-token control",
}


def verdict_block(verdict: AblationVerdict) -> None:
    """The verdict in one line, then the rule, the comparisons it reads and its full sentence on demand."""
    st.markdown("##### Verdict")
    verdict_lines([ablation_score(verdict)], VERDICT_RULE, key="content_ablation_verdict")
    if verdict.comparisons:
        def number(v: float) -> str:
            return "" if math.isnan(v) else verdict_number(v)

        shown = pd.DataFrame([{
            "comparison": c.role, "variant": c.variant, "against": c.reference,
            "Δ loss (nats/token)": number(c.delta.mean), "std of Δ": number(c.delta.std),
            "threshold": number(c.threshold), "seeds paired": c.delta.n,
            "beyond the spread": {True: "yes", False: "no", None: "too few seeds"}[c.beyond],
        } for c in verdict.comparisons])
        with st.expander("The comparisons the rule reads"):
            st.table(shown, hide_index=True)
            table_downloads(shown, "content_ablation_verdict", key="content_verdict_dl",
                            caption="The predictor ablation's verdict: each comparison the rule reads (Δ = the "
                                    "variant's final validation loss − its reference's within each seed both hold, "
                                    f"averaged over those seeds; threshold = {VERDICT_K:g} × the std of Δ across "
                                    "them).", label="tab:content-ablation-verdict")


def _verdict_cell(v: float) -> str:
    return "" if math.isnan(v) else verdict_number(v)


def _gap_table(frame: pd.DataFrame, split, what: str) -> tuple[pd.DataFrame, list[str]]:
    """The gap table of a :class:`~ema_core.studies.content.findings.GapSplit` (its ``class_gap_frame``), shown on the
    page, and the n-gram baselines it holds a column of.  Shares as percentages, on screen and in the
    downloads alike; the baselines' columns beside the GPT's (the loss on each class with no network)."""
    table = frame.assign(token_share=[f"{100 * v:.1f}" if math.isfinite(v) else "" for v in frame["token_share"]],
                         share_mean=100 * frame["share_mean"], share_std=100 * frame["share_std"])
    table = _cells(table.drop(columns=["name"]), {"share": 1})
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
        table, baselines = _gap_table(frame, split, what)
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
            "claim": v.claim.what, "the paper predicts": v.claim.paper, "Δ (nats/token)": _verdict_cell(v.delta.mean),
            "std of Δ": _verdict_cell(v.delta.std), "threshold": _verdict_cell(v.threshold), "seeds": v.delta.n,
            "verdict": v.word} for v in verdicts])
        with st.expander("The claims' numbers as a table"):
            st.table(shown, hide_index=True)
            table_downloads(shown, "content_gap_verdict", key="content_gap_verdict_dl",
                            caption="Where the gap lives, judged: each claim's Δ per seed (gap per token on one pool "
                                    f"of classes − on another), mean and std across seeds; threshold = {VERDICT_K:g} "
                                    "× the std of Δ.", label="tab:content-gap-verdict")
    return records


def kept_models(done: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``done`` (finished lm runs) whose run kept its final weights (runs made since they are kept)."""
    home = emalab_home()
    return done[[RunDir.for_id(r, home).artifact_path(MODEL_ARTIFACT).is_file() for r in done["run_id"]]]


def _run_label(row) -> str:
    variant = lm_variant_label(row["model"], row["predictor"], row["attn_input"])
    return f"{variant} · seed {row['seed']} · {row['run_id']}"


def reeval_section(done: pd.DataFrame) -> None:
    """Launch re-evaluations of finished runs on another text; where SPEN's gap to the GPT lives there."""
    st.subheader("Evaluated again, on another text")
    st.markdown(
        "A finished run keeps its model, so it can be scored on any text the `lm` kind reads: a local `.txt` in "
        "the data folder, another of Austen's novels held out, a hub dataset. The text is cut into tokens by the "
        "run's own tokenizer, the frequency bands are those of the text the run trained on, and the loss is "
        "split by token class as in the run's own evaluations.")
    kept = kept_models(done)
    if kept.empty:
        st.info("None of these runs kept its final weights: runs launched now keep them.")
        return
    labels = {r["run_id"]: _run_label(r) for _, r in kept.iterrows()}
    with st.form("content_reeval_launch"):
        picked = st.multiselect("Runs to evaluate again", list(labels), format_func=labels.get,
                                key="content_reeval_runs")
        left, mid, right = st.columns([2, 1, 1])
        corpus = left.text_input("Text (corpus)", value="austen", key="content_reeval_corpus",
                                 help='"austen", a file or folder inside the data folder, or a hub dataset')
        val_doc = left.text_input("Austen: the novel to score", value="persuasion", key="content_reeval_val_doc")
        split = mid.radio("Which part", ["val", "all"], key="content_reeval_split",
                          format_func={"val": "its held-out part", "all": "all of it"}.get)
        tokens = right.number_input("Tokens (0: all)", min_value=0, value=65_536, step=16_384,
                                    key="content_reeval_tokens")
        go = st.form_submit_button("Evaluate", icon=":material/play_arrow:")
    if go and picked:
        def jobs():
            check_sources({"corpus": corpus})  # before the config, whose own check says what exists
            for run_id in picked:
                yield REEVAL_KIND, build_config(REEVAL_KIND, overrides={
                    "run": run_id, "corpus": corpus, "val_doc": val_doc, "split": split, "eval_tokens": int(tokens)})

        launch(jobs, None)

    try:
        reevals = lm_reevaluations()
    except StoreError as exc:
        st.error(str(exc))
        return
    reevals = reevals[reevals["source_run"].isin(set(done["run_id"]))]
    if reevals.empty:
        st.caption("No run here has been evaluated again yet.")
        return
    reevals = reevals.assign(variant=[lm_variant_label(*k) for k in
                                      zip(reevals["model"], reevals["predictor"], reevals["attn_input"])])
    shown = reevals[["corpus", "split", "tokens", "variant", "seed", "loss", "source_loss", "train_overlap", "run_id"]]
    st.dataframe(shown.rename(columns={
        "loss": "loss (nats/token)", "source_loss": "on its own held-out text",
        "train_overlap": "share seen in training",
        "tokens": "tokens scored", "run_id": "re-evaluation"}), hide_index=True)
    st.caption("*share seen in training*: the part of the text scored found whole in the run's training split "
               "(0 for a text the run never read; its own training text scores low for that reason alone).")

    paired = reevals[reevals["gpt_run_id"].notna()]
    if paired.empty:
        st.info("The gap needs a SPEN run and the GPT of its seed and settings, both evaluated again on the same text.")
        return
    settings = list(dict.fromkeys(paired["setting_id"]))
    describe = {s: (lambda r: f"{r['corpus']} · {'held-out part' if r['split'] == 'val' else 'all'} · "
                              f"{int(r['tokens']):,} tokens")(paired[paired["setting_id"] == s].iloc[0])
                for s in settings}
    setting = st.selectbox("Text evaluated", settings, format_func=describe.get, key="content_reeval_setting")
    partition = st.radio("Split the loss by", list(PARTITIONS), format_func=PARTITION_LABELS.get, horizontal=True,
                         key="content_reeval_partition")
    try:
        rows = lm_reeval_class_pairs(setting)
    except StoreError as exc:
        st.error(str(exc))
        return
    gaps = class_gaps(rows.to_dict("records"), partition)
    if gaps is None:
        st.info(f"No SPEN here has its GPT evaluated on this text, both split by {PARTITION_LABELS[partition]}.")
        return
    what = PARTITION_LABELS[partition]
    table, _ = _gap_table(class_gap_frame(gaps), gaps, what)
    table_downloads(table, f"content_reeval_gap_{partition}", key="content_reeval_gap_dl",
                    caption=f"Where the gap lives on {describe[setting]}, per {what}: {gaps.variant}'s loss per "
                            "token minus the GPT's of the same seed and settings, both evaluated again on this text, "
                            "mean ± std across seeds.", label=f"tab:content-reeval-gap-{partition}")
    st.caption(f"As in *Where the gap lives* above, on this text: *{ALL_TOKENS}* is the whole loss on it; a "
               "negative gap means SPEN is better on those tokens.")


@st.cache_resource(max_entries=4, show_spinner="Loading the model…")
def _trained(run_id: str, home: str) -> TrainedRun:
    # Kept for the server's life (a few MB at tiny): a finished run's model never changes.
    return load_trained(run_id, Path(home))


@st.cache_data(max_entries=16, show_spinner=False)
def _passages(data_json: str) -> list[str]:
    return held_out_passages(CorpusConfig.model_validate_json(data_json), 6, chars=500, seed=0)


def samples_section(done: pd.DataFrame) -> None:
    """A prompt continued by a SPEN run and a GPT run side by side."""
    st.subheader("Samples")
    st.markdown(
        "What each model writes after the same prompt. Each next token is drawn from the model's distribution "
        "(sharpened by the temperature, restricted to the *k* most likely); each model reads the last "
        "`seq_len` tokens, the window it was trained on: the GPT cannot read further, and SPEN's traces start "
        "empty at each window in training, so it is given the same window.")
    kept = kept_models(done)
    spen, gpt = kept[kept["model"] == "spen"], kept[kept["model"] == "gpt"]
    if spen.empty or gpt.empty:
        st.info("Samples need a finished SPEN run and a finished GPT run that kept their final weights "
                "(runs launched now keep them).")
        return
    labels = {r["run_id"]: _run_label(r) for _, r in kept.iterrows()}
    left, right = st.columns(2)
    spen_id = left.selectbox("SPEN run", list(spen["run_id"]), format_func=labels.get, key="content_sample_spen")
    gpt_id = right.selectbox("GPT run", list(gpt["run_id"]), format_func=labels.get, key="content_sample_gpt")
    home = str(emalab_home())
    try:
        # The configs only (no weights): the models load when a sample is asked for, not on every render.
        spen_cfg = trained_run(spen_id, Path(home))[1]
        trained_run(gpt_id, Path(home))  # refused here, before the form, if it cannot be loaded
    except ValueError as exc:
        st.error(str(exc))
        return
    source = st.radio("Prompt", ["passage", "typed"], horizontal=True, key="content_sample_source",
                      format_func={"passage": "a passage of the held-out text", "typed": "my own"}.get)
    if source == "passage":
        try:
            passages = _passages(spen_cfg.data.model_dump_json(include=set(CorpusConfig.model_fields)))
        except ValueError as exc:  # the run's text cannot be read now (moved, offline)
            st.warning(f"The held-out text cannot be read: {exc}")
            passages = []
        prompt = st.selectbox("Passage", passages, key="content_sample_passage",
                              format_func=lambda p: p[:120].replace("\n", " ") + "…") if passages else ""
    else:
        prompt = st.text_area("Prompt", value="It was a truth universally acknowledged", key="content_sample_prompt")
    with st.form("content_sample"):
        c1, c2, c3, c4 = st.columns(4)
        n_tokens = c1.slider("Tokens", 10, 300, 100, step=10, key="content_sample_tokens")
        temperature = c2.slider("Temperature", 0.0, 1.5, 0.8, step=0.05, key="content_sample_temperature",
                                help="0: the most likely token each time")
        top_k = c3.number_input("Top k (0: every token)", min_value=0, value=50, step=10, key="content_sample_top_k")
        seed = c4.number_input("Seed", min_value=0, value=0, step=1, key="content_sample_seed")
        go = st.form_submit_button("Sample", icon=":material/edit_note:")
    if not go:
        return
    try:
        spen_run, gpt_run = _trained(spen_id, home), _trained(gpt_id, home)
    except ValueError as exc:
        st.error(str(exc))
        return
    if prompt:
        st.markdown("**Prompt**")
        st.text(prompt)
    for col, run in zip(st.columns(2), (spen_run, gpt_run)):
        with col:
            st.markdown(f"**{lm_variant_label(run.config.model, run.config.predictor, run.config.attn_input)}**")
            with st.spinner("Sampling…"):
                text = run.sample(prompt, int(n_tokens), float(temperature), int(top_k) or None, int(seed))
            st.text(text)
    st.caption(f"{int(n_tokens)} tokens each, temperature {temperature:g}, top k {int(top_k) or 'all'}, seed "
               f"{int(seed)}: the same settings give the same text. `<|endoftext|>` is the model ending a "
               "document.")


def ablation_section(stats: pd.DataFrame, found: pd.DataFrame, verdict: AblationVerdict) -> None:
    st.subheader("Predictor ablation")
    st.markdown(
        "Every SPEN here has the same traces; only the predictor differs. **What to expect**: an attention "
        "predictor that reads only the *current trace state* sees exactly what the linear one sees, so the "
        "three should land within seed noise of each other (the paper: identical). Reading the *sequence* of "
        "past trace states can in principle undo an EMA ($x_t = (h_t - (1-\\alpha)h_{t-1})/\\alpha$), so a gain "
        "there would not contradict the paper. The *raw-token* control has no EMA bottleneck at all and should "
        "be clearly better: if it is not, the budget is too small to tell."
    )
    abl = lm_ablation_frame(stats)
    if abl.empty:
        st.info("These runs hold no SPEN variant.")
        return
    chart_col, table_col = st.columns([1.15, 1])
    with chart_col:
        show_gpt = st.toggle("GPT's loss as a reference line", value=True, key="content_gpt_line")
        gpt = _first(stats, "gpt")
        gpt_loss = float(gpt["loss_mean"].iloc[0]) if show_gpt and len(gpt) else None
        chart_with_downloads(lm_ablation_chart(abl, gpt_loss), "content_ablation", key="content_ablation_chart")
    with table_col:
        # One row per predictor, one mean ± std column per input its attention reads.
        grid = abl[["predictor"]].drop_duplicates().reset_index(drop=True)
        for label in [label for label in ATTN_INPUT_LABELS.values() if label in set(abl["attn_input"])]:
            part = abl.loc[abl["attn_input"] == label, ["predictor", "mean", "std"]]
            grid = grid.merge(part.rename(columns={"mean": f"{label}_mean", "std": f"{label}_std"}),
                              on="predictor", how="left")
        grid["seeds"] = grid["predictor"].map(abl.groupby("predictor")["n"].max())
        grid = mean_std_cells(grid)
        st.table(unbroken(grid, *grid.columns[1:-1]), hide_index=True)
        table_downloads(grid, "content_ablation", key="content_ablation_dl",
                        caption="Predictor ablation: SPEN's final validation loss (nats/token) per predictor and "
                                "what its attention reads, mean ± std across seeds.", label="tab:content-ablation")
        spread = found.loc[[m for m in SPREAD if m in found.index], ["value_mean", "value_std", "n"]]
        if len(spread):
            spread = mean_std_cells(spread.rename(index=SPREAD).rename_axis("measure").reset_index())
            spread = spread.rename(columns={"value": "nats/token"})
            st.table(unbroken(spread, "nats/token"), hide_index=True)
            table_downloads(spread, "content_ablation_spread", key="content_spread_dl",
                            caption="The ablation's spread (final validation loss, nats/token): formed per seed, "
                                    "then mean ± std across seeds.", label="tab:content-ablation-spread")
            st.caption("Differences are formed within a seed (same data order), then averaged; n counts seeds "
                       "(for the seed noise: the variants pooled). Whether they are within noise is the verdict's "
                       "to say, below.")
    verdict_block(verdict)


try:
    stats = lm_final_stats(picked)
    found = lm_ablation(picked).set_index("measure")
    finals = lm_final_losses(picked)
except StoreError as exc:
    st.error(str(exc))
    st.stop()
stats = stats.assign(variant=[lm_variant_label(*k) for k in zip(stats["model"], stats["predictor"],
                                                                 stats["attn_input"])])
st.subheader("Final evaluation, and the paper's numbers beside ours")
if stats.empty:
    st.info("These runs hold no final evaluation.")
else:
    verdict = ablation_verdict(finals.to_dict("records"))
    final_table(stats, sel)
    # The paper's headline, judged like every other claim: is SPEN worse than the same-size GPT?
    verdict_lines([headline_score(headline_verdict(finals.to_dict("records")))], HEADLINE_RULE,
                  key="content_headline")
    paper_table(stats, found, verdict)
    records = gap_section(picked, x_axis)
    if records:
        growth_section(picked)
    ablation_section(stats, found, verdict)
reeval_section(done)
samples_section(done)

launch_section()
