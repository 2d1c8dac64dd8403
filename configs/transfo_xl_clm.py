"""transfo_xl pre-trained with the clm objective.

    python -m zoo.train --config configs/transfo_xl_clm.py:tiny \
        --workdir /tmp/transfo_xl_clm [--config.objective_args.memory=True \
        --config.data.mode=stream]

By default each row is one segment, read with mems=None: a plain causal
LM. With `objective_args.memory` the train state carries each row's
segment memory (the last mem_len states of its stream) to the next step,
where the row goes on (`objectives.memory`); `data.mode="stream"` reads
every document whole.
"""

from configs import common


def get_config(arg: str | None = None):
  """The config; `arg` is "tiny", a size name, or "key=value,..."."""
  c = common.base_config()
  c.model = "transfo_xl"
  c.objective = "clm"
  # Carry each row's memory across steps (the paper's recurrence); a
  # query reads only its own document's memory unless told otherwise.
  c.objective_args.memory = False
  c.objective_args.reset_memory_at_documents = True
  return common.finish(c, arg)
