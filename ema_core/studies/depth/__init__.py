"""Dilution in depth (PAPER.md §4 item 5): language models whose residual stream sums, weighs or selects
its blocks, at several depths."""
from ema_core.studies import Page, Study

KIND = "depth"

STUDY = Study(
    name="depth", learning_rates="learning_rates", title="Depth dilution", experiments={KIND: "experiment"},
    claim="Fixed-coefficient accumulation dilutes across depth too: a residual stream adds every block's write with "
          "weight 1, and only learned, input-dependent selection fixes it (fixed sum < static weights < "
          "input-dependent, the gap growing with depth).",
    source="abstract, summaries",
    pages=(Page("depth", "Depth dilution", ":material/stacked_line_chart:"),), judged_in_store=True,
    export_figures={"depth_results": "run_figures", "depth_weights": "weights_figures"},
)
