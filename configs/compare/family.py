"""Every registered pre-training scheme, each on its natural model family.

    python -m zoo.compare --config configs/compare/family.py --workdir DIR

Same budget, data, tasks and recipe as the demo grid, with one cell per
scheme in `objectives.names()` (aliases skipped; distillation schemes run
in `compress.py`, which trains their teacher), and a random-init row
for every family they use. A scheme
runs on the family its paper used (`PREFERRED`); a scheme registered later
without an entry there gets the first family in `FALLBACK` it can bind to.
Transformer-XL adds its own row (`EXTRA`): the causal LM that reads each
row's memory of the step before, as its paper trains it; so does FastText,
skip-gram over vectors built from character n-grams.
"""

import objectives
from configs.compare import demo

PREFERRED = {
    "mlm": "bert", "wwm": "bert", "phrase_mlm": "bert", "span_mlm": "bert",
    "nsp": "bert", "sop": "albert", "structbert": "bert",
    "quick_thought": "bert", "clm": "gpt2", "prefix_lm": "gpt2",
    "bilm": "elmo", "unilm": "unilm", "mass": "bart", "bart": "bart",
    "electra": "electra", "plm": "xlnet", "awd_lm": "awd_lstm",
    "skipgram": "word2vec", "skip_thought": "skip_thought", "cove_mt": "cove",
    "cbow": "word2vec", "ernie": "ernie", "grover": "gpt2", "mam": "mockingjay",
}
FALLBACK = ("bert", "gpt2", "t5", "bart", "electra", "elmo", "unilm",
            "albert")
# Each model family's own scheme: its paper's (the first PREFERRED entry
# naming it), T5's span corruption, MLM for RoBERTa and DistilBERT, and
# clm for Transformer-XL (its paper's LM, segment memory aside) and
# Reformer, MLM for Longformer (RoBERTa's recipe on long rows) and
# MobileBERT (its paper's teacher and student pre-train by MLM; the
# knowledge transfer from the teacher is not a scheme here).
FAMILY_SCHEME = {f: s for s, f in reversed(PREFERRED.items())}
FAMILY_SCHEME.update(t5="t5_span", roberta="mlm", distilbert="mlm",
                     transfo_xl="clm", longformer="mlm", reformer="clm",
                     mobilebert="mlm", fasttext="skipgram")

# Schemes that learn from a trained teacher (`objectives.distill`): they
# run in `configs/compare/compress.py`, beside the teacher they shrink.
TEACHER_SCHEMES = ("distil", "tinybert")
# Schemes of another modality, judged by their own views: the masked
# acoustic model reads speech (`data.speech`) and is probed on phones and
# voices (`zoo.harness.speech_probe`, `bench/speech.py`); none of
# the grid's text views applies to it.
SPEECH_SCHEMES = ("mam",)
# Schemes that pre-train on other data than the grid's rows, and where
# their rows read it: CoVe translates the parallel sample (`data.parallel`;
# the same tokenizer, so the views read it like any row); ERNIE reads the
# prose with WordNet's nouns linked (`data.linking`); Grover the BBC
# articles as fields (`data.articles`).
OTHER_DATA_SCHEMES = {"cove_mt": {"source": "parallel"},
                      "ernie": {"entities": "wordnet"},
                      "grover": {"source": "articles"}}

# Cells beyond one per scheme: a family whose paper's point is an option of
# a shared scheme.
# Fine-tuning a family's rows (its random init included) by its paper's
# recipe: ULMFiT's concat-pooling classifier, discriminative rates,
# slanted triangular schedule and gradual unfreezing (one layer group
# every 10 of the steps) for the AWD-LSTM; static tables stay frozen under
# a trained head, as their users read them (fine-tuned, a random table
# from near zero becomes a bag-of-words classifier: README, Pre-BERT rows),
# the head reading standardised pooled vectors at 10x the rate (mean-pooled
# static vectors share one large direction; raw, the head stays at the
# majority class: `bench/few_shot_recipe.py`, README block fewshot_static).
STATIC = dict(mode="frozen", standardize=True, head_lr=10.0)
BY_FAMILY = {"awd_lstm": dict(head="ulmfit", ulmfit=dict(unfreeze_every=10)),
             "word2vec": STATIC, "fasttext": STATIC}

EXTRA = (dict(name="clm_memory", objective="clm", model="transfo_xl",
              objective_args=dict(memory=True)),
         dict(name="fasttext", objective="skipgram", model="fasttext"))


def family_of(name: str) -> str:
  """The model family scheme `name` runs on in this grid."""
  if name in PREFERRED:
    return PREFERRED[name]
  if name.startswith("t5"):
    return "t5"
  specials = objectives.Specials(vocab_size=8000)
  for family in FALLBACK:
    try:
      objectives.build(name, model=family, size="tiny", specials=specials)
    except ValueError:
      continue
    return family
  raise ValueError(f"scheme {name!r} binds to none of {FALLBACK}")


def get_config(arg: str | None = None):
  """The grid; `arg` takes the demo's `tokens=N`, `ft_steps=N` and `k=N`,
  and `only=NAME+NAME...` to run just those cells (and their families'
  random-init rows), e.g. `only=plm+clm_memory+clm`."""
  only, rest = demo.split_only(arg)
  aliases = objectives.aliases()  # e.g. "t5" is t5_span: one cell
  cells = [(name, name, family_of(name), "") for name in objectives.names()
           if name not in aliases
           and name not in TEACHER_SCHEMES + SPEECH_SCHEMES]
  g = demo.grid(cells, **demo.parse(rest))
  g.cells = [dict(c, data=dict(OTHER_DATA_SCHEMES[c["objective"]]))
             if c["objective"] in OTHER_DATA_SCHEMES else c for c in g.cells]
  g.cells = list(g.cells) + [dict(c) for c in EXTRA]
  g = demo.select(g, only)
  families = {c["model"] for c in g.cells}
  g.few_shot.by_family = {f: dict(v) for f, v in BY_FAMILY.items()
                          if f in families}
  return g
