"""Depth dilution: language models whose residual stream sums, weighs or selects its blocks, at several depths."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from ema_core.depth import RULE_LABELS, RULES
from ema_core.depth_findings import (PREDICTED_ORDER, VERDICT_RULE, claim_verdicts, claims_and_checks, depth_statement,
                                     measured_order)
from ema_core.experiments import REGISTRY, build_config
from ema_core.experiments.depth import PRESET_RULES
from ema_core.figures.depth import DEPTH_METRICS, depth_frame, depth_metric_chart, weights_frame, weights_map
from ema_core.scoreboard import depth_scores
from ema_core.verdicts import VERDICT_MIN_SEEDS
from pages._router import ensure_router
from pages._state import finished_runs, from_url, launch, pick_config_seeds, query, read_store, to_url
from pages._ui import chart_with_downloads, table_downloads, unbroken
from pages._verdicts import verdict_lines
from store import list_runs, mean_std_cells
from store.depth import depth_results, depth_weights

ensure_router()  # before anything is drawn: see pages/_router.py

KIND = "depth"
# What a preset's config cannot say: how long it takes.  Its depths, tokens and seeds are read from
# the config itself, so that the note cannot drift from what a launch runs.
PRESET_NOTES = {"quick": "about 20 minutes a seed on two CPU cores", "full": "for a GPU or a night"}


def preset_note(preset: str) -> str:
    cfg = build_config(KIND, preset=preset)
    tokens = cfg.train.steps * cfg.train.batch * cfg.train.seq_len  # what each model trains on
    depths = [str(L) for L in cfg.depths]
    grid = depths[0] if len(depths) == 1 else f"{', '.join(depths[:-1])} and {depths[-1]}"
    return (f"`{preset}`: {grid} blocks, {tokens:,} training tokens per model, {cfg.seeds} seed(s), "
            f"{PRESET_NOTES[preset]}")


def results_table(frame: pd.DataFrame, rows: pd.DataFrame) -> pd.DataFrame:
    """One row per (rule, depth): its parameters and learning rate (the cell's, the same in every seed
    of a config), then every metric's mean ± std across seeds, and the probes at init."""
    wide = frame.assign(col=frame["metric"] + frame["when"].map({"trained": "", "at init": "_init"}))
    out = None
    for col, part in wide.groupby("col", sort=False):
        part = part[["rule", "depth", "mean", "std", "n"]].rename(
            columns={"mean": f"{col}_mean", "std": f"{col}_std", "n": "seeds"})
        out = part if out is None else out.merge(part.drop(columns="seeds"), on=["rule", "depth"], how="outer")
    out["rule"] = pd.Categorical(out["rule"], [r for r in RULES if r in set(out["rule"])] +
                                 sorted(set(out["rule"]) - set(RULES)), ordered=True)
    out = out.sort_values(["rule", "depth"]).reset_index(drop=True)
    out["rule"] = out["rule"].astype(str)
    # The page's intro says the rules match in size and each trains at its own rate: the table shows both.
    setting = [c for c in ("params", "lr") if c in rows]
    if setting:
        out = out.merge(rows.groupby(["rule", "depth"], as_index=False)[setting].first(), on=["rule", "depth"],
                        how="left")
    cols = ["rule", "depth", "seeds", *setting]
    cols += [c for c in out.columns if c not in cols]
    return mean_std_cells(out[cols], digits=4)


def launch_section() -> None:
    st.subheader("Launch")
    exp = REGISTRY[KIND]
    presets = sorted(exp.presets, key=lambda p: (p != "quick", p != "full", p))
    st.markdown("One run holds every cell (rule × depth × its seeds) and runs as a background job; the page "
                "shows it once it is done. "
                + "; ".join(preset_note(p) for p in PRESET_NOTES if p in presets)
                + f". The claims are judged on {VERDICT_MIN_SEEDS} seeds or more.")
    with st.form("depth_launch"):
        left, mid, right = st.columns(3)
        preset = left.selectbox("Preset", presets, key="depth_preset")
        seed = mid.number_input("Seed", min_value=0, max_value=2**31 - 33, value=0, step=1, key="depth_seed",
                                help="the first seed; a run of several seeds counts up")
        seeds = right.number_input("Seeds", min_value=1, max_value=32, value=1, step=1, key="depth_seeds",
                                   help=f"seeds in this run (the claims need {VERDICT_MIN_SEEDS})")
        rules = st.multiselect("Residual rules", list(RULES), default=list(PRESET_RULES), key="depth_rules",
                               format_func=lambda r: RULE_LABELS[r])
        launched = st.form_submit_button("Launch", type="primary", icon=":material/play_arrow:")
    if launched:
        if not rules:
            st.warning("Pick at least one rule.")
            return
        chosen = [r for r in RULES if r in rules]  # the rules' own order: the same choice is the same config
        launch(lambda: [(KIND, build_config(KIND, preset=preset, seed=int(seed),
                                            overrides={"rules": chosen, "seeds": int(seeds)}))],
               preset, seed_key="depth_seed")


st.title("Depth dilution")
st.markdown(
    """
The paper's second axis. In time, an EMA trace adds every token with a fixed weight; **in depth**, a
pre-norm residual stream adds every block's write with weight 1, so an early block's write becomes a
smaller and smaller part of what the last block reads. The paper predicts the order **fixed sum <
static learned weights < input-dependent selection**, with the gap growing with depth. Here three
small language models per depth share one body (GPT-2's blocks at the tiny width, the same
initial draws and batches per seed) and differ only in how the stream adds the blocks up: the
standard **fixed sum**, DenseFormer's **static depth-weighted average** of every earlier output, and
an **input-dependent** per-token softmax over them. Parameters match within 1 %; each rule trains at
its own rate, chosen on a dev slice of the training text. The probes read what the last block's
stream still holds: the input token's identity, and block 1's write.
"""
)

runs = read_store(lambda: list_runs(kind=KIND, limit=None))
done = finished_runs(runs, "depth comparison", "one run per preset and seed", launch_section)
picked, picked_configs, configs, _ = pick_config_seeds(done, KIND, "Runs (default: every run of the newest config)",
                                                      "depth_runs", launch_section)

rows = query(lambda: depth_results(picked))
if rows.empty:
    st.info("These runs hold no cells.")
    launch_section()
    st.stop()

frame = depth_frame(rows)
seeds = sorted({int(s) for s in rows["seed"].dropna()})
depths = sorted({int(d) for d in rows["depth"]})
st.caption(f"{len(picked)} run(s) · seeds {', '.join(map(str, seeds))} · config {', '.join(picked_configs)} · "
           + ("every number is a mean over seeds; error bars and ± are the standard deviation across them"
              if len(seeds) > 1 else "one seed: no spread to show, so no error bars and no ±"))

# -- loss and probes against depth ---------------------------------------------------------------------
st.subheader("Loss against depth")
left, right = st.columns(2)
with left:
    chart_with_downloads(depth_metric_chart(frame, "val_loss"), "depth_val_loss", key="depth_loss_chart")
with right:
    chart_with_downloads(depth_metric_chart(frame, "val_bpb"), "depth_val_bpb", key="depth_bpb_chart")

st.subheader("What the last stream still holds")
left, right = st.columns(2)
with left:
    chart_with_downloads(depth_metric_chart(frame, "probe_token"), "depth_probe_token", key="depth_token_chart")
with right:
    chart_with_downloads(depth_metric_chart(frame, "probe_early"), "depth_probe_early", key="depth_early_chart")
chance = pd.to_numeric(rows["probe_token_chance"], errors="coerce").mean() if "probe_token_chance" in rows else None
st.caption("Dashed: the same model at initialisation, before any training (the baseline each probe is read "
           "against). "
           + (f"The token probe's chance (the commonest of its tokens) is {chance:.3f}. " if pd.notna(chance) else "")
           + " ".join(f"{DEPTH_METRICS[m][0][0].upper()}{DEPTH_METRICS[m][0][1:]}: {DEPTH_METRICS[m][1]}."
                      for m in ("probe_token", "probe_early")))

table = results_table(frame, rows)
with st.expander("The results as a table"):
    st.dataframe(unbroken(table, *[c.removesuffix("_mean") for c in table.columns if c.endswith("_mean")]),
                 hide_index=True, key="depth_table")
table_downloads(table, "depth_results", key="depth_table_dl",
                caption=f"Depth dilution: held-out loss, bits per byte and the probes of the last stream per "
                        f"residual rule and depth, mean ± std across seeds (seeds {', '.join(map(str, seeds))}).",
                label="tab:depth-results")

# -- the learned depth weights -------------------------------------------------------------------------
st.subheader("The depth weights")
weights = query(lambda: depth_weights(picked))
if weights.empty:
    st.info("These runs hold no depth weights.")
else:
    # The depths the weights were stored at (as the URL holds them): a depth without weights has no map.
    options = [str(d) for d in sorted({int(d) for d in weights["depth"]})]
    from_url("depth_map_depth", options)
    if st.session_state.get("depth_map_depth") not in options:
        st.session_state["depth_map_depth"] = options[-1]  # the deepest: where the rules differ most
    shown = st.radio("Blocks", options, horizontal=True, key="depth_map_depth")
    to_url("depth_map_depth", shown, options[-1])
    chart_with_downloads(weights_map(weights_frame(weights, int(shown)), int(shown)), "depth_weights",
                         key="depth_weights_chart")

# -- the paper beside ours -----------------------------------------------------------------------------
st.subheader("The paper's order and the measured one")
deepest = depths[-1]
paper_col, ours_col = st.columns(2)
with paper_col:
    st.markdown("**The paper's order**, worst first\n\n"
                + "\n".join(f"{i}. {RULE_LABELS[r]}" for i, r in enumerate(PREDICTED_ORDER, 1)))
with ours_col:
    ours = measured_order(rows, deepest)
    st.markdown(f"**Measured at {deepest} blocks**, worst first (mean held-out loss over seeds)\n\n"
                + ("\n".join(f"{i}. {RULE_LABELS.get(r, r)} — {loss:.4f}" for i, (r, loss) in enumerate(ours, 1))
                   or "—"))
st.markdown(f"**Where the two axes meet.** {depth_statement(rows)}")
claims, checks = claims_and_checks(claim_verdicts(rows))
st.markdown("**The paper's claims**, each of which these runs could refute")
if len(seeds) < VERDICT_MIN_SEEDS:
    st.info(f"These runs hold {len(seeds)} seed(s): a claim is judged on {VERDICT_MIN_SEEDS} seeds or more, so "
            f"each says \"not judged: {len(seeds)} seed{'' if len(seeds) == 1 else 's'}\". Launch more seeds to "
            "judge them.")
said = verdict_lines(depth_scores(claims), VERDICT_RULE, key="depth_claims")
st.markdown("**Sanity check**: it checks the harness (a probe reads the token from a stream that holds it), so it "
            "says whether the probes can be read, not whether the paper is right")
verdict_lines(depth_scores(checks), VERDICT_RULE, key="depth_checks", title="The check's rule and numbers", said=said)

launch_section()
