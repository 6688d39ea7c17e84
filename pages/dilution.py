"""Trace dilution explorer: what is left of the token at lag k in an EMA trace, on paper and measured."""
from __future__ import annotations

from typing import get_args

import streamlit as st
from pydantic import ValidationError

from ema_core.config import PAPER_ALPHAS
from ema_core.dilution_config import Decoder, DilutionConfig, Precision
from ema_core.dilution import (
    IdentityResult,
    analytic_frame,
    effective_window,
    half_life,
    interference_energy,
    limit_sentences,
    limit_summary,
    measure_footprint,
    measure_identity,
)
from ema_core.studies.dilution.figures import horizon_frame, identity_chart, lag_weight_chart, rate_roles, sir_chart
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

RATES = (("fast", "alpha_fast"), ("medium", "alpha_medium"), ("slow", "alpha_slow"))
# key: (min, max, default) of every number the page takes.
LIMITS = {
    **{key: (0.001, 1.0, alpha) for (_, key), alpha in zip(RATES, PAPER_ALPHAS)},
    **STREAM_LIMITS,
    "max_lag": (1, 128, 24),
    "window": (2, 32, 8),
}
DECODERS = get_args(Decoder)  # linear first: the default
DECODER_LABELS = {"linear": "linear (trained)", "peel": "peel (knows the table)"}
PRECISIONS = get_args(Precision)
# key: (options, default) of every choice the page offers.
CHOICES = {"decoder": (DECODERS, "linear"), "precision": (PRECISIONS, "float32"), "noise": (NOISE_STEPS, 0.0)}
METRICS = (  # label, help: one per column of the metrics table
    ("Half-life", "ln ½ / ln(1 − α): the lag at which a token's weight has halved"),
    ("95 % window", "the fewest recent tokens that carry 95 % of the trace's weight"),
    ("Interference α/(2−α)", "steady-state trace energy Σ w_k² = α/(2 − α) for unit-energy i.i.d. inputs"),
)


@st.cache_data(max_entries=64, show_spinner=False)
def _measure(cfg_json: str) -> IdentityResult:
    # Keyed by the config's JSON: the config is the whole input of the measurement (seed included).
    return measure_identity(DilutionConfig.model_validate_json(cfg_json))


def _validation_message(err: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'config'}: {e['msg']}" for e in err.errors())


st.title("Trace dilution")
st.markdown(
    r"""
Every token that enters an EMA trace $h_t = (1-\alpha)\,h_{t-1} + \alpha\,x_t$ is still there $k$ steps
later with weight $\alpha(1-\alpha)^k$, **whatever the token**, while the trace's steady-state
interference energy stays at $\alpha/(2-\alpha)$: the *weight* of the token at lag $k$ fades. Whether
its *identity* is lost depends on who reads the trace and how precisely it is stored.
The measured panel names the token at lag $k$ from the stored traces and scores it on held-out steps
(chance is $1/V$), by one of two decoders:

- **linear**: a ridge read-out trained on the stream. From a single decreasing-weight trace it tends
  to name the most recent occurrence, which is why one fast rate alone can fall to chance right after
  lag 0. With *window* on it reads the last $w$ trace states; an EMA *sequence* is invertible
  ($x_t = (h_t - (1-\alpha)h_{t-1})/\alpha$), so recent lags come back exactly — the paper's caveat.
- **peel**: knows the embedding table and the rates, and takes the newest tokens off the current
  state one at a time ($h/\alpha \approx e_{x_t} + (1-\alpha)\,e_{x_{t-1}} + \dots$: name the nearest
  embedding, subtract it, divide by $1-\alpha$, repeat). No training.

The trace is computed in float64, then *stored*: Gaussian noise of $\sigma$ per coordinate added,
and rounded to the chosen precision. Its error $\sigma$ per coordinate sets the analytic horizon
$k^* = \ln(\sigma/\alpha)/\ln(1-\alpha)$, the lag where the token's weight falls to the error (dashed
on the chart, beside the measured one, where it lies within the lags shown).
"""
)

dropped = drop_bad_state(LIMITS, CHOICES)
with st.sidebar:
    st.subheader("Rates")
    for name, key in RATES:
        st.slider(f"α {name}", *LIMITS[key], step=0.001, format="%.3f", key=key)
    st.subheader("Stream and decoder")
    st.slider("Vocabulary size V", *LIMITS["vocab"], key="vocab")
    st.slider("Embedding dimension D", *LIMITS["dim"], key="dim")
    st.slider("Max lag", *LIMITS["max_lag"], key="max_lag")
    decoder = st.radio("Decoder", DECODERS, index=DECODERS.index(CHOICES["decoder"][1]), key="decoder",
                       format_func=DECODER_LABELS.get, horizontal=True,
                       help="linear: a ridge read-out trained on the stream; peel: knows the embedding table and "
                            "the rates, takes the newest tokens off the current state one by one")
    # The peel reads the current state only (the config refuses a window with it).
    window_mode = st.toggle("Decode from a window of past trace states", key="window_mode",
                            disabled=decoder == "peel", help="the linear decoder only")
    if window_mode and decoder == "linear":
        st.slider("Window w (trace states)", *LIMITS["window"], key="window")
    st.subheader("Stored trace")
    st.selectbox("Precision", PRECISIONS, index=PRECISIONS.index(CHOICES["precision"][1]), key="precision",
                 help="the number format the trace is rounded to once computed (in float64)")
    st.select_slider("Noise σ per coordinate", NOISE_STEPS, value=CHOICES["noise"][1], key="noise",
                     format_func=lambda v: "none" if v == 0 else f"{v:g}",
                     help="Gaussian noise added to the stored trace, drawn from the seed")
    st.number_input("Seed", *LIMITS["seed"], step=1, key="seed")
if dropped:
    st.info(f"Out-of-range settings were reset to their defaults: {', '.join(dropped)}.")

ss = st.session_state
slider_alphas = [float(ss[key]) for _, key in RATES]
# Two sliders on the same rate would give two feature sets with one name; decode it once.
alphas = tuple(dict.fromkeys(slider_alphas))
try:
    cfg = DilutionConfig(
        alphas=alphas,
        vocab=int(ss["vocab"]),
        dim=int(ss["dim"]),
        max_lag=int(ss["max_lag"]),
        window=int(ss["window"]) if window_mode and decoder == "linear" else 1,
        decoder=decoder,
        precision=ss["precision"],
        noise=float(ss["noise"]),
        seed=int(ss["seed"]),
    )
except ValidationError as err:
    st.error(f"These settings are not valid: {_validation_message(err)}")
    st.stop()

hl, ew, ie = half_life(slider_alphas), effective_window(slider_alphas), interference_energy(slider_alphas)
with st.container(border=True):
    for i, (name, _) in enumerate(RATES):
        values = (f"{hl[i]:.2f} steps", f"{ew[i]} steps", f"{ie[i]:.4f}")
        # One row per rate, read as a table: the labels show on the first row only.
        with st.container(key=f"rate_{name}"):
            head, *cells = st.columns([1, 1, 1, 1], vertical_alignment="bottom")
            head.markdown(f"**{name}** · α = {slider_alphas[i]:.3f}")
            for cell, (label, help_text), value in zip(cells, METRICS, values):
                cell.metric(
                    label, value, help=help_text if i == 0 else None,
                    label_visibility="visible" if i == 0 else "collapsed",
                )
if len(alphas) < len(slider_alphas):
    st.info("Two sliders are on the same rate; it is drawn and decoded once.")
# A larger α forgets sooner: the sliders are named for fast ≥ medium ≥ slow, and a swapped pair would make
# "slow" the trace with the shorter memory.  Said, not prevented: an out-of-order grid is still a valid one.
swapped = [(i, j) for i in range(len(RATES)) for j in range(i + 1, len(RATES)) if slider_alphas[j] > slider_alphas[i]]
if swapped:
    pairs = "; ".join(
        f"α {RATES[j][0]} = {slider_alphas[j]:.3f} is faster than α {RATES[i][0]} = {slider_alphas[i]:.3f} "
        f"(half-life {hl[j]:.2f} against {hl[i]:.2f} steps)" for i, j in swapped)
    st.warning(f"The rates are out of order: {pairs}. A larger α forgets sooner, so the names fast, medium and "
               "slow no longer describe these traces; the charts and the table label each trace by its α.",
               icon=":material/swap_vert:")

st.subheader("Analytic")
analytic = analytic_frame(cfg.alphas, cfg.max_lag)
# Each trace coloured by its slider (fast, medium, slow), not by its α: moving a slider keeps the colour.
roles = rate_roles(slider_alphas, [name for name, _ in RATES])
left, right = st.columns(2)
with left:
    chart_with_downloads(lag_weight_chart(analytic, roles), "lag_weights", key="weights")
with right:
    chart_with_downloads(sir_chart(analytic, roles), "sir", key="sir")

st.subheader("Measured")
stop_if_oversized(measure_footprint(cfg), "Lower the window, the embedding dimension, the vocabulary or the max lag.")

result, cached = measure_cached(_measure, cfg, "Training the decoders…" if cfg.decoder == "linear"
                                else "Peeling the traces…", lambda r: r.seconds)
order = list(dict.fromkeys(result.accuracy["feature"]))
table = result.accuracy.pivot(index="lag", columns="feature", values="accuracy")[order].reset_index()
table.columns.name = None

window_text = f"window {cfg.window}" if cfg.window > 1 else "current state only"
chart_col, table_col = st.columns([3, 2])
with chart_col:
    chart_with_downloads(identity_chart(result.accuracy, result.chance, cfg.decoder,
                                        horizon_frame(result.limits, cfg.max_lag), roles),
                         "identity_accuracy", key="identity")
with table_col:
    st.dataframe(
        table,
        hide_index=True,
        height=360,
        column_config={c: st.column_config.NumberColumn(format="%.3f") for c in order},
        key="identity_table",
    )
    table_downloads(
        table,
        "identity_accuracy",
        key="identity_table_dl",
        caption=f"Identity accuracy at lag k ({cfg.decoder} decoder, V={cfg.vocab}, D={cfg.dim}, {window_text}, "
                f"{stored_text(cfg)}, seed {cfg.seed}); chance {result.chance:.3g}.",
        label="tab:identity-accuracy",
    )
measured_caption(cfg, result.seconds, cached, result.chance, held_out="steps", features="traces", window=window_text)
# Which limit applies, worded from the measured and analytic horizons (ema_core.dilution.limit_frame).
st.markdown(f"**Which limit applies here.** {limit_summary(result.limits)}\n\n"
            + "\n".join(limit_sentences(result.limits, cfg, cfg.decoder)))
