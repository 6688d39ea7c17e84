"""The Content page's "Samples" section: a prompt continued by a SPEN run and a GPT run side by side, from
the final weights they kept."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st

from ema_core.lm.data import CorpusConfig
from ema_core.lm.trained import held_out_passages
from ema_core.rundir import emalab_home
from ema_core.studies.content.evaluation import TrainedRun, load_trained, trained_run
from ema_core.studies.content.shared import lm_variant_label
from pages._content_launch import kept_models, run_label


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
    labels = {r["run_id"]: run_label(r) for _, r in kept.iterrows()}
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
