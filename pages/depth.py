"""Depth dilution: language models whose residual stream sums, weighs or selects its blocks, at several depths."""
from __future__ import annotations

import json

import pandas as pd
import streamlit as st

from ema_core.depth import RULE_LABELS, RULES
from ema_core.studies.depth.findings import (PREDICTED_ORDER, REMIX_SHARE, VERDICT_RULE, blocks, by_budget, claim_verdicts,
                                     claims_and_checks, depth_statement, measured_order)
from ema_core.experiments import build_config
from ema_core.studies.depth.figures import (DEPTH_METRICS, budget_chart, budget_frame, budget_label, budget_loss_frame,
                                    depth_frame, depth_metric_chart, rate_source, rates_frame, remix_frame,
                                    trajectory_chart, trajectory_frame, weights_frame, weights_map)
from ema_core.studies.depth.findings import scores as depth_scores
from ema_core.verdicts import VERDICT_MIN_SEEDS
from pages._grid import Axis, grid_launch, grid_runs
from pages._router import ensure_router
from pages._state import from_url, query, to_url
from pages._ui import chart_with_downloads, table_downloads, unbroken
from pages._verdicts import verdict_lines
from store import mean_std_cells
from store.depth import depth_remix, depth_results, depth_weight_steps, depth_weights

ensure_router()  # before anything is drawn: see pages/_router.py

KIND = "depth"
# What a preset's config cannot say: how long it takes.  Its depths, tokens and seeds are read from
# the config itself, so that the note cannot drift from what a launch runs.  The launch form offers the
# presets in this order, the shortest first.
PRESET_NOTES = {"quick": "about 10 minutes a seed on two CPU cores",
                "long": "about an hour a seed on two CPU cores, at the quick budget's rates read on purpose",
                "full": "for a GPU or a night"}


def preset_note(preset: str) -> str:
    cfg = build_config(KIND, preset=preset)
    tokens = cfg.train.steps * cfg.train.batch * cfg.train.seq_len  # what each model trains on
    depths = [str(L) for L in cfg.depths]
    grid = depths[0] if len(depths) == 1 else f"{', '.join(depths[:-1])} and {depths[-1]}"
    return f"{grid} blocks, {tokens:,} training tokens per model, {cfg.seeds} seed(s), {PRESET_NOTES[preset]}"


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
    grid_launch(KIND, "depth", cells="rule × depth", notes=PRESET_NOTES, describe=preset_note, choose_seeds=True,
                axes=(Axis("rules", "Residual rules", RULES, RULES, "rule", RULE_LABELS.get),))


st.title("Depth dilution")
st.markdown(
    """
The paper's second axis. In time, an EMA trace adds every token with a fixed weight; **in depth**, a
pre-norm residual stream adds every block's write with weight 1, so an early block's write becomes a
smaller and smaller part of what the last block reads. The paper predicts the order **fixed sum <
static learned weights < input-dependent selection**, with the gap growing with depth. Here four
small language models per depth share one body (GPT-2's blocks at the tiny width, the same
initial draws and batches per seed) and differ only in how the stream adds the blocks up: the
standard **fixed sum**, DenseFormer's **static depth-weighted average** of every earlier output, the
same plus an **input-dependent increment** per token, and an **input-dependent** per-token softmax
over them (selection). Parameters match within 1 %; each rule trains at its own rate at each depth,
chosen on a dev slice of the training text. The probes read what the last block's stream still
holds: the input token's identity, the previous token's, and block 1's own write.
"""
)

done, picked, picked_configs, configs, picked_rows = grid_runs(KIND, "depth", "depth comparison", launch_section,
                                                              depth_results, "These runs hold no cells.")
picked_remix = query(lambda: depth_remix(picked))
# Runs of different budgets (training tokens per model) are never pooled: the charts and tables show one
# budget, and the claims are judged at each apart.
budgets = by_budget(picked_rows, picked_remix)
shown_budget = next(iter(budgets))
if len(budgets) > 1:
    options = [str(t) for t in budgets]
    from_url("depth_budget", options)
    if st.session_state.get("depth_budget") not in options:
        st.session_state["depth_budget"] = options[-1]  # the longest: the best trained
    picked_budget = st.radio("Budget", options, horizontal=True, key="depth_budget",
                             format_func=lambda t: budget_label(None if t == "None" else int(t)))
    to_url("depth_budget", picked_budget, options[-1])
    shown_budget = list(budgets)[options.index(picked_budget)]
    st.caption(f"These runs hold {len(budgets)} budgets: the charts and tables show the one picked; the claims "
               "are judged at each budget apart.")
rows = pd.DataFrame(budgets[shown_budget][0], columns=picked_rows.columns)
remix = pd.DataFrame(budgets[shown_budget][1], columns=picked_remix.columns)
ids = sorted(set(rows["run_id"]))

frame = depth_frame(rows)
seeds = sorted({int(s) for s in rows["seed"].dropna()})
st.caption(f"{len(ids)} run(s) · seeds {', '.join(map(str, seeds))} · config {', '.join(picked_configs)} · "
           + ("every number is a mean over seeds; error bars and ± are the standard deviation across them"
              if len(seeds) > 1 else "one seed: no spread to show, so no error bars and no ±"))



def metric_chart(metric: str, key: str) -> None:
    """``metric`` against depth, or why there is none: runs stored before it was measured hold no value of it."""
    if (frame["metric"] == metric).any():
        chart_with_downloads(depth_metric_chart(frame, metric), f"depth_{metric}", key=key)
    else:
        st.info(f"These runs hold no {DEPTH_METRICS[metric][0]}: they were stored before it was measured.")


# -- loss against depth, and the rates trained at ----------------------------------------------------------
st.subheader("Loss against depth")
for column, (metric, key) in zip(st.columns(2), (("val_loss", "depth_loss_chart"), ("val_bpb", "depth_bpb_chart"))):
    with column:
        metric_chart(metric, key)
st.markdown("**The rates trained at**: each rule's peak learning rate at each depth")
st.dataframe(rates_frame(rows), hide_index=True, key="depth_rates")
summaries = {r.run_id: json.loads(r.summary) if isinstance(r.summary, str) and r.summary else {}
             for r in done.itertuples()}
st.caption("; ".join(dict.fromkeys(rate_source(configs[r] or {}, summaries.get(r)) for r in ids)) + ".")

# -- the probes ------------------------------------------------------------------------------------------
st.subheader("What the last stream still holds")
probe_charts = (("probe_early_resid", "depth_early_resid"), ("probe_prev", "depth_prev"),
                ("probe_token", "depth_token"), ("probe_early", "depth_early"))
for pair in (probe_charts[:2], probe_charts[2:]):
    for column, (metric, name) in zip(st.columns(2), pair):
        with column:
            metric_chart(metric, f"{name}_chart")
chances = {what: pd.to_numeric(rows[col], errors="coerce").mean()
           for what, col in (("token", "probe_token_chance"), ("previous-token", "probe_prev_chance"))}
st.caption("Dashed: the same model at initialisation, before any training (the baseline each probe is read "
           "against). The top two are what the claims read; the bottom two are the sanity checks' probes (the "
           "early-block probe reads block 1's whole write, which every stream keeps with the token). "
           + "".join(f"The {what} probe's chance (the commonest of its tokens) is {c:.3f}. "
                     for what, c in chances.items() if pd.notna(c))
           + " ".join(f"{DEPTH_METRICS[m][0][0].upper()}{DEPTH_METRICS[m][0][1:]}: {DEPTH_METRICS[m][1]}."
                      for m, _ in probe_charts))

table = results_table(frame, rows)
with st.expander("The results as a table"):
    st.dataframe(unbroken(table, *[c.removesuffix("_mean") for c in table.columns if c.endswith("_mean")]),
                 hide_index=True, key="depth_table")
table_downloads(table, "depth_results", key="depth_table_dl",
                caption=f"Depth dilution: held-out loss, bits per byte and the probes of the last stream per "
                        f"residual rule and depth, mean ± std across seeds (seeds {', '.join(map(str, seeds))}).",
                label="tab:depth-results")

# -- the learned depth weights, at the end and as they train ----------------------------------------------
st.subheader("The depth weights")
weights = query(lambda: depth_weights(ids))
steps = query(lambda: depth_weight_steps(ids))
if weights.empty and steps.empty:
    st.info("These runs hold no depth weights.")
else:
    # The depths the weights were stored at (as the URL holds them): a depth without weights has no map.
    options = [str(d) for d in sorted({int(d) for d in (*weights["depth"], *steps["depth"])})]
    from_url("depth_map_depth", options)
    if st.session_state.get("depth_map_depth") not in options:
        st.session_state["depth_map_depth"] = options[-1]  # the deepest: where the rules differ most
    shown = st.radio("Blocks", options, horizontal=True, key="depth_map_depth")
    to_url("depth_map_depth", shown, options[-1])
    L = int(shown)
    if (weights["depth"] == L).any():
        chart_with_downloads(weights_map(weights_frame(weights, L), L), "depth_weights", key="depth_weights_chart")
    else:
        st.info(f"These runs hold no final depth weights at {blocks(L)}.")
    moving = [r for r in RULES if r in set(steps.loc[steps["depth"] == L, "rule"])]  # never sum: it has none
    if moving:
        from_url("depth_traj_rule", moving)
        if st.session_state.get("depth_traj_rule") not in moving:
            st.session_state["depth_traj_rule"] = moving[-1]
        rule = st.radio("Rule whose weights are drawn as they train", moving, horizontal=True, key="depth_traj_rule",
                        format_func=lambda r: RULE_LABELS.get(r, r))
        to_url("depth_traj_rule", rule, moving[-1])
        chart_with_downloads(trajectory_chart(trajectory_frame(steps, rule, L), rule, L), "depth_weight_steps",
                             key="depth_traj_chart")
    else:
        st.info(f"These runs hold no weights recorded during training at {blocks(L)} (runs stored before they were).")
left, right = st.columns(2)
with left:
    metric_chart("mix_entropy", "depth_entropy_chart")
right.markdown("**How spread the weights are.** Per token and block, the entropy of the magnitudes of its weights "
               "over the outputs it reads, divided by its largest: **0** puts all the weight on one output, **1** "
               "spreads it evenly over all of them; averaged over the tokens, then the blocks. The fixed sum has no "
               "weights to spread (all on its own output).")

# -- the remix test --------------------------------------------------------------------------------------
st.subheader("The remix test")
mixed = remix_frame(rows, remix)
if mixed.empty:
    st.info("These runs hold no remix (runs stored before it was run, or without the fixed sum).")
else:
    share = mixed["share"].map(lambda x: "—" if pd.isna(x) else f"{x:.0%}")
    remix_table = mean_std_cells(mixed.drop(columns="share"), digits=4).assign(share=share)
    st.dataframe(unbroken(remix_table, "joint_gain", "remix_gain"), hide_index=True, key="depth_remix_table")
    table_downloads(remix_table, "depth_remix", key="depth_remix_dl", label="tab:depth-remix",
                    caption="The remix test: the held-out loss a jointly trained rule gains over the fixed sum, and "
                            "what the same rule's depth weights fitted on the frozen trained sum recover, mean ± std "
                            "across seeds.")
    st.markdown(
        "Each trained fixed sum is frozen, and only a rule's depth weights are fitted on top of it (starting as the "
        "sum itself): they can change how the last stream reads what the blocks wrote, nothing else. "
        "**joint_gain**: loss(fixed sum) − loss(the rule), each trained from the same start (per seed, at that "
        "depth); **remix_gain**: the frozen sum's held-out loss − the remixed one's; **share**: the remix's mean "
        "gain over the joint one's (— where the joint gain is not above 0). If the remix recovers most of the gap, "
        "the information was still in the stream and what the rule changes is access to it; if it recovers nothing, "
        "the gap comes from training the body with the rule. The claims below judge it at the deepest depth against "
        f"a share of {REMIX_SHARE:g}, a threshold fixed before the confirming run.")

# -- the paper beside ours -----------------------------------------------------------------------------
st.subheader("The paper's order and the measured one")
tiers = [" and ".join(RULE_LABELS[r] for r in tier) + (" (not ordered by the paper)" if len(tier) > 1 else "")
         for tier in PREDICTED_ORDER]
st.markdown("**The paper's order**, worst first\n\n" + "\n".join(f"{i}. {t}" for i, t in enumerate(tiers, 1)))
said: set[str] = set()
for tokens, (held, held_remix) in budgets.items():
    if len(budgets) > 1:
        st.markdown(f"#### At {budget_label(tokens)}")
    deepest = max(int(r["depth"]) for r in held)
    ours = measured_order(held, deepest)
    st.markdown(f"**Measured at {blocks(deepest)}**, worst first (mean held-out loss over seeds)\n\n"
                + ("\n".join(f"{i}. {RULE_LABELS.get(r, r)} — {loss:.4f}" for i, (r, loss) in enumerate(ours, 1))
                   or "—"))
    st.markdown(f"**Where the two axes meet.** {depth_statement(held)}")
    claims, checks = claims_and_checks(claim_verdicts(held, held_remix))
    st.markdown("**The paper's claims**, each of which these runs could refute")
    n_seeds = len({int(r["seed"]) for r in held})
    if n_seeds < VERDICT_MIN_SEEDS:
        st.info(f"These runs hold {n_seeds} seed(s): a claim is judged on {VERDICT_MIN_SEEDS} seeds or more, so "
                f"each says \"not judged: {n_seeds} seed{'' if n_seeds == 1 else 's'}\". Launch more seeds to "
                "judge them.")
    suffix = "" if len(budgets) == 1 else f"_{tokens}"
    said = verdict_lines(depth_scores(claims), VERDICT_RULE, key=f"depth_claims{suffix}", said=said)
    st.markdown("**Sanity checks**: they check the harness (a probe reads the token from a stream that holds it, "
                "and block 1's whole write, which every stream keeps with the token), so they say whether the probes "
                "can be read, not whether the paper is right")
    said = verdict_lines(depth_scores(checks), VERDICT_RULE, key=f"depth_checks{suffix}",
                         title="The checks' rule and numbers", said=said)

# -- the budget axis: every finished run in the store ------------------------------------------------------
st.subheader("The budget axis")
every = query(lambda: depth_results(list(done["run_id"])))
st.markdown("Every finished depth run in the store (not only the runs picked above), one row per budget: the fixed "
            "sum's mean held-out loss (nats/token, over the seeds holding both) at its shallowest and its deepest "
            "depth, whether the deepest beats the shallowest, and the verdict of \"the gap grows with depth\" at that "
            "budget. At budgets where the fixed sum's deepest model does not beat its shallowest, \"the gap grows "
            "with depth\" is not judged: deep models not yet trained.")
st.dataframe(budget_frame(every), hide_index=True, key="depth_budgets",
             column_config={c: st.column_config.NumberColumn(format="%.4f")
                            for c in ("sum at shallowest", "sum at deepest")})
chart_with_downloads(budget_chart(budget_loss_frame(every)), "depth_budgets", key="depth_budget_chart")

launch_section()
