"""The rows of the T5 paper's Tables 4 to 7, at small scale.

    python -m zoo.compare --config configs/compare/t5_tables.py --workdir DIR
    python -m zoo.compare --config configs/compare/t5_tables.py:tokens=1e7 ...

`PUBLISHED` holds the paper's own figures (Raffel et al. 2020, "Exploring
the Limits of Transfer Learning with a Unified Text-to-Text Transformer"):
T5-base pre-trained on 2^35 C4 tokens, then fine-tuned; GLUE and SuperGLUE
averages, CNN/DM ROUGE-2, SQuAD EM, and WMT BLEU. They are data quoted
from the paper, printed beside our rows for orientation, never our results:
our runs are orders of magnitude smaller and use other downstream tasks,
so only the ordering of rows can be compared.
"""

from configs.compare import demo

COLUMNS = ("GLUE", "CNNDM", "SQuAD", "SGLUE", "EnDe", "EnFr", "EnRo")


def _row(*values: float) -> dict[str, float]:
  return dict(zip(COLUMNS, values))


# "<table>/<row>" -> the paper's figures, transcribed from Tables 1 and 4-7.
_SPANS_15 = _row(83.28, 19.24, 80.88, 71.36, 26.98, 39.82, 27.65)
PUBLISHED = {
    "table1/no_pretraining": _row(66.22, 17.60, 50.31, 53.04, 25.86, 39.77,
                                  24.04),
    "table4/prefix_lm": _row(80.69, 18.94, 77.99, 65.27, 26.86, 39.73, 27.49),
    "table4/bert_style": _row(82.96, 19.17, 80.65, 69.85, 26.78, 40.03,
                              27.41),
    "table4/deshuffling": _row(73.17, 18.59, 67.61, 58.47, 26.11, 39.30,
                               25.62),
    "table5/mass_style": _row(82.32, 19.16, 80.10, 69.28, 26.79, 39.89,
                              27.55),
    "table5/replace_spans": _SPANS_15,
    "table5/drop_tokens": _row(84.44, 19.31, 80.52, 68.67, 27.07, 39.76,
                               27.82),
    "table6/rate_10": _row(82.82, 19.00, 80.38, 69.55, 26.87, 39.28, 27.44),
    "table6/rate_15": _SPANS_15,
    "table6/rate_25": _row(83.00, 19.54, 80.96, 70.48, 27.04, 39.83, 27.47),
    "table6/rate_50": _row(81.27, 19.32, 79.80, 70.33, 27.01, 39.90, 27.49),
    "table7/iid": _SPANS_15,
    "table7/span_2": _row(83.54, 19.39, 82.09, 72.20, 26.76, 39.99, 27.63),
    "table7/span_3": _row(83.49, 19.62, 81.84, 72.53, 26.86, 39.65, 27.62),
    "table7/span_5": _row(83.40, 19.24, 82.05, 72.23, 26.88, 39.40, 27.53),
    "table7/span_10": _row(82.85, 19.33, 81.84, 70.44, 26.79, 39.49, 27.69),
}

# Our cells: (name, objective, objective_args, the paper's row).
_ROWS = (
    ("random_t5", "", {}, "table1/no_pretraining"),
    ("prefix_lm", "t5_prefix_lm", {}, "table4/prefix_lm"),
    ("bert_style", "t5_bert", {}, "table4/bert_style"),
    ("deshuffling", "t5_deshuffle", {}, "table4/deshuffling"),
    ("mass_style", "t5_mass", {}, "table5/mass_style"),
    ("replace_spans", "t5_iid", {}, "table5/replace_spans"),
    ("drop_tokens", "t5_drop", {}, "table5/drop_tokens"),
    ("rate_10", "t5_iid", {"density": 0.10}, "table6/rate_10"),
    ("rate_25", "t5_iid", {"density": 0.25}, "table6/rate_25"),
    ("rate_50", "t5_iid", {"density": 0.50}, "table6/rate_50"),
    ("span_2", "t5_span", {"mean_length": 2.0}, "table7/span_2"),
    ("span_3", "t5_span", {"mean_length": 3.0}, "table7/span_3"),
    ("span_5", "t5_span", {"mean_length": 5.0}, "table7/span_5"),
    ("span_10", "t5_span", {"mean_length": 10.0}, "table7/span_10"),
)


def cells() -> list[dict]:
  """One T5 encoder-decoder cell per row of Tables 4 to 7."""
  return [dict(name=name, objective=obj, model="t5", objective_args=args,
               t5_row=row) for name, obj, args, row in _ROWS]


def get_config(arg: str | None = None):
  """The grid; `arg` takes the demo's `tokens=N`, `ft_steps=N` and `k=N`,
  and `only=NAME+NAME...` to run just those rows (with random_t5), e.g.
  `only=bert_style+deshuffling`."""
  only, rest = demo.split_only(arg)
  g = demo.get_config(rest)
  g.cells = cells()
  g.published = PUBLISHED
  return demo.select(g, only)
