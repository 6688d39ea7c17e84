"""The boundary map (PAPER.md §4 item 4): every context mixer from a window to softmax attention, on structure
and content tasks at controlled distances."""
from ema_core.studies import Page, Study

KIND = "boundary"

STUDY = Study(
    name="boundary", learning_rates="learning_rates", title="Boundary map", experiments={KIND: "experiment"},
    claim="The boundary itself: fixed-decay EMA < fixed-decay linear attention < data-dependent decay < softmax "
          "attention, structure kept and content lost as the distance grows — argued in the paper, measured here on "
          "the same tasks for every mechanism.",
    source="title, discussion",
    pages=(Page("boundary", "Boundary map", ":material/grid_on:"),), judged_in_store=True,
    export_figures={"boundary_accuracy": "run_figures", "boundary_recall_state": "recall_figures"},
)
