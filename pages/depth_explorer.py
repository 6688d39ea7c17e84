"""Depth explorer: what a residual stream keeps of each layer's write, by how it adds the writes up; the
time axis's EMA trace beside it, in the same terms."""
from __future__ import annotations

from typing import get_args

import streamlit as st
from pydantic import ValidationError

from ema_core.config import config_error
from ema_core.depth import EXPLORER_RULES, RULE_LABELS
from ema_core.depth.explorer import (
    CODE_LABELS,
    CODES,
    DepthResult,
    ExplorerConfig,
    analytic_frame,
    analytic_summary,
    depth_limit_sentences,
    depth_limit_summary,
    embedding_sir_frame,
    explorer_footprint,
    measure_depth,
    time_alpha,
    time_config,
    twin_alpha,
)
from ema_core.dilution import IdentityResult, limit_sentences, limit_summary, measure_identity
from ema_core.dilution import analytic_frame as time_analytic_frame
from ema_core.dilution_config import Decoder, Precision
from ema_core.studies.depth.figures import (
    explorer_depth_sweep_chart,
    explorer_horizon_frame,
    explorer_identity_charts,
    explorer_sir_charts,
    explorer_trace_label,
    explorer_weight_charts,
)
from ema_core.studies.dilution.figures import horizon_frame
from pages._router import ensure_router
from pages._ui import (
    NOISE_STEPS,
    STREAM_LIMITS,
    chart_with_downloads,
    drop_bad_state,
    measure_cached,
    measured_caption,
    stop_if_oversized,
    stored_text,
    table_downloads,
)

ensure_router()  # before anything is drawn: see pages/_router.py

# Widget keys carry the page's name: Streamlit's session state is shared by every page of the app.
KEY = "depth_explorer_"
# name: (min, max, default) of every number the page takes.
LIMITS = {
    "layers": (1, 64, 16),
    "growth": (0.0, 1.0, 0.2),
    "gamma": (0.01, 0.99, 0.8),
    "sharpness": (0.0, 20.0, 4.0),
    **STREAM_LIMITS,
}
DECODERS = get_args(Decoder)  # linear first: the default
DECODER_LABELS = {"linear": "linear (trained)", "peel": "peel (knows the codes)"}
PRECISIONS = get_args(Precision)
# name: (options, default) of every choice the page offers.
CHOICES = {"decoder": (DECODERS, "linear"), "precision": (PRECISIONS, "float32"), "noise": (NOISE_STEPS, 0.0),
           "codes": (CODES, "per_layer")}


@st.cache_data(max_entries=32, show_spinner=False)
def _measure(cfg_json: str) -> tuple[DepthResult, IdentityResult]:
    # Keyed by the config's JSON: the config is the whole input of both measurements (seed included).
    cfg = ExplorerConfig.model_validate_json(cfg_json)
    return measure_depth(cfg), measure_identity(time_config(cfg))


def _number(name: str, label: str, step=None, fmt: str | None = None, help_text: str | None = None) -> None:
    st.slider(label, *LIMITS[name], step=step, format=fmt, key=KEY + name, help=help_text)


def _default(name: str) -> int:
    """The index of a choice's default among its options (a widget's starting value)."""
    options, default = CHOICES[name]
    return options.index(default)


st.title("Depth explorer")
st.markdown(
    r"""
The paper's second axis. An EMA trace adds every token with a fixed weight $\alpha(1-\alpha)^k$; a
pre-norm residual stream adds every layer's write with weight 1, while the writes' norms grow with
depth, so an early layer's write becomes a small part of the final stream. Here layer $j = 0..L$
($0$ is the embedding) writes $w_j = g_j\,e_j[x_j]$: a random token $x_j$ of $V$, coded by random
unit-energy codes, with norm $g_j = (1+\text{growth})^j$. The final stream is
$s = \sum_j c_j w_j$, scaled so that the weights $a_j = c_j g_j / \sum_i c_i g_i$ add to one (a trace's
weights do too), and each rule sets $c_j$:

- **fixed sum** (the pre-norm residual): $c_j = 1$. With growth, the weights fall by $1/(1+\text{growth})$
  per layer of distance from the top: an EMA over depth;
- **fixed decay over depth**: $c_j = \gamma^{L-j}$;
- **static learned weights**: $c_j \propto 1/g_j$, which undoes the growth: every layer gets
  $1/(L+1)$, the best any input-independent weighting does for its *worst* layer (DenseFormer's at best);
- **input-dependent selection**: the reader of layer $j$ gets a softmax over the writes (norms
  undone) with logit $\beta$ on layer $j$: $a_j = e^\beta/(e^\beta + L)$. $\beta = 0$ is the static
  rule; $\beta \to \infty$ reads the write alone.

Reading layer $j$, the others interfere: $\text{SIR}_j = a_j^2 / (\sum_i a_i^2 - a_j^2)$. The measured
panel names $x_j$ from the *stored* stream (computed in float64, noise $\sigma$ added, rounded to the
chosen precision) on held-out stacks, with the Trace dilution page's two decoders: a trained **linear**
read-out, or the **peel**, which knows the codes and weights and takes the writes off the stream,
largest first. Beside every depth chart, the time axis's EMA trace with $\alpha = 1-\gamma$ (the trace
the decay rule is, at equal norms), read at lag $k$ on the same axes.
"""
)

dropped = drop_bad_state(LIMITS, CHOICES, prefix=KEY)
with st.sidebar:
    st.subheader("The stack")
    _number("layers", "Layers L", help_text="layers above the embedding: the stream adds L + 1 writes")
    _number("growth", "Norm growth per layer", step=0.01, fmt="%.2f",
            help_text="g_j = (1 + growth)^j: how the writes' norms grow with depth; 0 = equal norms")
    _number("gamma", "Decay γ (decay rule)", step=0.01, fmt="%.2f",
            help_text="c_j = γ^(L − j); the time axis's trace has α = 1 − γ")
    _number("sharpness", "Selection sharpness β", step=0.5, fmt="%.1f",
            help_text="the select rule's softmax logit on the layer read: β = 0 is the static rule")
    st.radio("Codes", CODES, index=_default("codes"), key=KEY + "codes", format_func=CODE_LABELS.get,
             help="a layer's write in its own directions (its own table), or one table for every layer, as the "
                  "time axis's tokens: then equal weights say which tokens were written but not by which layer")
    st.subheader("Codes and decoder")
    _number("vocab", "Vocabulary size V")
    _number("dim", "Dimension D")
    decoder = st.radio("Decoder", DECODERS, index=_default("decoder"), key=KEY + "decoder",
                       format_func=DECODER_LABELS.get, horizontal=True,
                       help="linear: a ridge read-out trained on the stacks; peel: knows the codes and the weights, "
                            "takes the largest write off the stream, then the next")
    st.subheader("Stored stream")
    st.selectbox("Precision", PRECISIONS, index=_default("precision"), key=KEY + "precision",
                 help="the number format the stream is rounded to once computed (in float64)")
    st.select_slider("Noise σ per coordinate", NOISE_STEPS, value=CHOICES["noise"][1], key=KEY + "noise",
                     format_func=lambda v: "none" if v == 0 else f"{v:g}",
                     help="Gaussian noise added to the stored stream, drawn from the seed")
    st.number_input("Seed", *LIMITS["seed"], step=1, key=KEY + "seed")
if dropped:
    st.info(f"Out-of-range settings were reset to their defaults: {', '.join(dropped)}.")

ss = st.session_state
try:
    cfg = ExplorerConfig(
        layers=int(ss[KEY + "layers"]), growth=float(ss[KEY + "growth"]), gamma=float(ss[KEY + "gamma"]),
        sharpness=float(ss[KEY + "sharpness"]), codes=ss[KEY + "codes"], vocab=int(ss[KEY + "vocab"]),
        dim=int(ss[KEY + "dim"]), decoder=decoder, precision=ss[KEY + "precision"], noise=float(ss[KEY + "noise"]),
        seed=int(ss[KEY + "seed"]),
    )
    time_config(cfg)  # the time axis's config too: its bounds are its own
except ValidationError as err:
    st.error(f"These settings are not valid: {config_error(err)}")
    st.stop()

alpha = time_alpha(cfg)
twin = twin_alpha(cfg.growth)
st.caption(
    f"Time axis beside the stack: the EMA trace with α = 1 − γ = {alpha:g}. "
    + (f"With growth {cfg.growth:g}, the fixed sum's weights fall by 1/(1 + growth) = {1 - twin:.3g} per layer: "
       f"the weights of an EMA with α = {twin:.3g}, over L + 1 = {cfg.layers + 1} layers."
       if cfg.growth > 0 else "With equal norms the fixed sum weighs every layer alike: it is the static rule.")
)

st.subheader("Analytic")
summary = analytic_summary(cfg)
st.dataframe(summary, hide_index=True, key="depth_explorer_summary",
             column_config={c: st.column_config.NumberColumn(format="%.3g") for c in summary.columns[1:]})
table_downloads(summary, "depth_explorer_analytic", key="depth_explorer_summary_dl",
                caption=f"Weights and signal-to-interference read at the top (distance 0) and at the embedding "
                        f"(distance {cfg.layers}) of a stack of L = {cfg.layers} (growth {cfg.growth:g}, γ = "
                        f"{cfg.gamma:g}, β = {cfg.sharpness:g}), and of the EMA trace α = {alpha:g} at lags 0 and "
                        f"{cfg.layers}.",
                label="tab:depth-explorer-analytic")
depth_frame = analytic_frame(cfg)
time_frame = time_analytic_frame([alpha], cfg.layers)
for charts, stem in ((explorer_weight_charts(depth_frame, time_frame, cfg.layers), "weights"),
                     (explorer_sir_charts(depth_frame, time_frame, cfg.layers), "sir")):
    left, right = st.columns(2)
    with left:
        chart_with_downloads(charts[0], f"depth_{stem}", key=f"depth_explorer_{stem}")
    with right:
        chart_with_downloads(charts[1], f"time_{stem}", key=f"depth_explorer_time_{stem}")
chart_with_downloads(explorer_depth_sweep_chart(embedding_sir_frame(cfg), cfg.layers, alpha), "depth_sweep",
                     key="depth_explorer_sweep")

st.subheader("Measured")
stop_if_oversized(explorer_footprint(cfg), "Lower the number of layers, the dimension or the vocabulary.")

(depth, trace), cached = measure_cached(_measure, cfg, "Training the read-outs…" if cfg.decoder == "linear"
                                       else "Peeling the streams…", lambda r: r[0].seconds + r[1].seconds)

left, right = st.columns(2)
depth_chart, time_chart = explorer_identity_charts(
    depth.accuracy, trace.accuracy, depth.chance, cfg.layers, cfg.decoder,
    explorer_horizon_frame(depth.limits, cfg.layers), horizon_frame(trace.limits, cfg.layers))
with left:
    chart_with_downloads(depth_chart, "depth_identity", key="depth_explorer_identity")
with right:
    chart_with_downloads(time_chart, "time_identity", key="depth_explorer_time_identity")

# One row per distance from the top: each rule's accuracy at layer L − d, and the trace's at lag d.
table = depth.accuracy.assign(rule=depth.accuracy["rule"].map(RULE_LABELS)).pivot(
    index=["distance", "layer"], columns="rule", values="accuracy")
table = table[[RULE_LABELS[r] for r in EXPLORER_RULES if RULE_LABELS[r] in table.columns]].reset_index()
trace_label = explorer_trace_label(alpha) + " (lag = distance)"
lag_acc = trace.accuracy.set_index("lag")["accuracy"]
table[trace_label] = table["distance"].map(lag_acc)
table.columns.name = None
st.dataframe(table, hide_index=True, height=360, key="depth_explorer_table",
             column_config={c: st.column_config.NumberColumn(format="%.3f") for c in table.columns[2:]})
table_downloads(
    table, "depth_explorer_identity", key="depth_explorer_table_dl",
    caption=f"Identity accuracy of layer j's write by its distance L − j from the top ({cfg.decoder} decoder, "
            f"L = {cfg.layers}, growth {cfg.growth:g}, γ = {cfg.gamma:g}, β = {cfg.sharpness:g}, "
            f"{CODE_LABELS[cfg.codes]}, V = {cfg.vocab}, D = {cfg.dim}, {stored_text(cfg)}, seed {cfg.seed}), and of "
            f"the EMA trace α = {alpha:g} at lag k = distance; chance {depth.chance:.3g}.",
    label="tab:depth-explorer-identity",
)
measured_caption(cfg, depth.seconds + trace.seconds, cached, depth.chance,
                 held_out="stacks (and steps of the trace)", features="streams")
# Which limit applies, worded from the measured and analytic horizons, on both axes.
st.markdown(f"**Which limit applies in depth.** {depth_limit_summary(depth.limits)}\n\n"
            + "\n".join(depth_limit_sentences(depth.limits, cfg)))
st.markdown(f"**And in time** (the EMA trace α = {alpha:g}). {limit_summary(trace.limits)}\n\n"
            + "\n".join(limit_sentences(trace.limits, trace.config, cfg.decoder)))
