"""The Content page's launches: runs of the language models (one per variant and seed), and finished runs
evaluated again on another text, with where SPEN's gap to the GPT lives there."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from ema_core.experiments import REGISTRY, build_config
from ema_core.lm.trained import MODEL_ARTIFACT
from ema_core.palette import LM_VARIANTS
from ema_core.rundir import RunDir, emalab_home
from ema_core.studies.content.evaluation import KIND as REEVAL_KIND
from ema_core.studies.content.figures import class_gap_frame
from ema_core.studies.content.gap import PARTITION_LABELS, PARTITIONS, class_gaps
from ema_core.studies.content import KIND
from ema_core.studies.content.shared import ALL_TOKENS, lm_variant_label
from pages._content_gap import gap_table
from pages._sources import check_sources
from pages._state import launch
from pages._ui import table_downloads
from store import StoreError
from store.content import lm_reeval_class_pairs, lm_reevaluations

LAUNCH_DEFAULT = ["GPT", "SPEN linear", "SPEN softmax attention (state)", "SPEN softmax attention (tokens)"]


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


def kept_models(done: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``done`` (finished lm runs) whose run kept its final weights (runs made since they are kept)."""
    home = emalab_home()
    return done[[RunDir.for_id(r, home).artifact_path(MODEL_ARTIFACT).is_file() for r in done["run_id"]]]


def run_label(row) -> str:
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
    labels = {r["run_id"]: run_label(r) for _, r in kept.iterrows()}
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
    table, _ = gap_table(class_gap_frame(gaps), gaps, what)
    table_downloads(table, f"content_reeval_gap_{partition}", key="content_reeval_gap_dl",
                    caption=f"Where the gap lives on {describe[setting]}, per {what}: {gaps.variant}'s loss per "
                            "token minus the GPT's of the same seed and settings, both evaluated again on this text, "
                            "mean ± std across seeds.", label=f"tab:content-reeval-gap-{partition}")
    st.caption(f"As in *Where the gap lives* above, on this text: *{ALL_TOKENS}* is the whole loss on it; a "
               "negative gap means SPEN is better on those tokens.")
