"""Long rows: Longformer and Reformer beside dense models of the same size.

    python -m zoo.compare --config configs/compare/long.py --workdir DIR

Four cells pre-train on rows of `SEQ_LEN` tokens for the demo's token
budget, then are read by the demo's three views: Longformer's MLM
(sliding window of `WINDOW` keys) beside a dense RoBERTa, and Reformer's
causal LM (LSH and local chunked layers) beside a dense GPT-2, each pair
of one depth, width and head count, and every family beside its own
random init. A tiny dense model still fits rows of `SEQ_LEN` on 2 CPU
cores, so the dense rows read the same length. The cells' pretrain.json
holds the loss, tokens and wall time (tokens/s).

The embedded sample's documents are shorter than a row (about 1,200
pieces on average), and attention never crosses documents, so a row here
holds several documents: these rows measure the cost of long rows more
than what a long context buys.
"""

from configs.compare import demo
from zoo.harness import cells as cells_lib

SEQ_LEN, BATCH = 4096, 4
WINDOW = 256  # Longformer keys per query (WINDOW / 2 on each side)
CHUNK = 64  # Reformer's local and LSH chunk length
# One depth, width and head count for every cell (the tiny sizes').
SHAPE = dict(num_layers=2, embed_dim=64, num_heads=4, mlp_dim=128)
CELLS = (
    ("longformer_mlm", "mlm", "longformer",
     dict(max_len=SEQ_LEN + 2, attention_window=WINDOW)),
    ("roberta_mlm", "mlm", "roberta", dict(max_len=SEQ_LEN + 2)),
    ("reformer_clm", "clm", "reformer",
     dict(max_len=SEQ_LEN, head_dim=16, axial_shape=(64, 64),
          axial_dims=(16, 48), local_chunk=CHUNK, lsh_chunk=CHUNK,
          num_buckets=2 * SEQ_LEN // CHUNK)),
    ("gpt2_clm", "clm", "gpt2", dict(max_len=SEQ_LEN)),
)


def get_config(arg: str | None = None):
  """The grid; `arg` takes the demo's `tokens=N`, `ft_steps=N` and `k=N`."""
  g = demo.grid([(n, o, m, "") for n, o, m, _ in CELLS], **demo.parse(arg))
  g.cells = [dict(name=n, objective=o, model=m, model_args=dict(SHAPE, **a))
             for n, o, m, a in CELLS]
  g.pretrain.seq_len, g.pretrain.batch_size = SEQ_LEN, BATCH
  g.pretrain.log_every = 5
  g.pretrain.checkpoint_every = 50
  g.pretrain.optimizer.warmup_steps = max(1, cells_lib.budget_steps(g) // 10)
  return g
