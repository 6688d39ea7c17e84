"""Structure (PAPER.md §2): SPCN, a Hebbian sparse model, on a synthetic grammar, probed role by role
against a supervised BiGRU and an n-gram window."""
from ema_core.studies import Page, Study

KIND = "structure"

STUDY = Study(
    name="structure", title="Structure", experiments={KIND: "experiment"},
    claim="Traces keep structure: SPCN reaches ≈ 96% of a supervised BiGRU on grammatical roles with zero labels.",
    source="abstract, summaries",
    pages=(Page("structure", "Structure", ":material/account_tree:"),), judged_in_store=True,
)
