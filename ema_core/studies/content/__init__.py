"""Content (PAPER.md §4): SPEN, a language model of EMA traces only, with its predictor ablation, against
the same-size GPT, on real text; where the gap lives, and how it grows with tokens and size."""
from ema_core.studies import Page, Study

KIND = "content"  # its language models' runs (kind "lm" before the study had its folder: still read)
EVAL_KIND = "lm_eval"  # a finished run's model evaluated again

STUDY = Study(
    name="content", learning_rates="learning_rates", title="Content", experiments={KIND: "experiment", EVAL_KIND: "evaluation"},
    claim="Traces lose content: an EMA-only language model reaches C4 perplexity 260 against GPT-2's 33, and "
          "swapping its predictor for attention changes nothing.",
    source="abstract, summaries",
    pages=(Page("content", "Content", ":material/menu_book:"),), judged_in_store=True,
)
