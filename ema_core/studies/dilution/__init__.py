"""Trace dilution (PAPER.md §4 item 3): what an EMA trace keeps of a token's identity, rate by rate and lag by lag.

Closed form on its page (:mod:`ema_core.dilution`), and a sweep of decoders trained with gradients
(``experiment.py``).  It judges no claim: its limits hold by construction.
"""
from ema_core.studies import Page, Study

KIND = "dilution"

STUDY = Study(
    name="dilution", title="Trace dilution", experiments={KIND: "experiment"},
    claim="Fixed-decay traces dilute token identity: the token at lag k keeps weight α(1−α)^k, whatever it was.",
    source="abstract",
    pages=(Page("dilution", "Trace dilution", ":material/blur_on:"),
           Page("depth_explorer", "Depth explorer", ":material/layers:")),
    not_judged="Computed in closed form and by decoders trained on the spot: the weights hold by construction, so "
               "nothing here is judged as a reproduction.",
    export_figures={"dilution_accuracy": "run_figures"},
)
