"""Fine-tuning on the downstream tasks: one recipe for every family.

    from zoo import finetune
    metrics = finetune.finetune("bert", config, params, data.tasks.load("trec"),
                                tok, mode="full", steps=300, lr=1e-4)

One module per concern: `spec` (what a run is, checked), `arrays` (task
examples to fixed-shape arrays), `steps` (the jitted heads, losses and
train step), `run` (init, the training loop, `finetune`), `evaluate`
(predictions, generated text, metrics), `rank` (rank classification of
text-to-text models over a task's label strings), `distill` (a
fine-tuned teacher's soft labels), `ulmfit` (ULMFiT's recipe) and
`multitask` (every task at once on one shared backbone, each with its own
PALs or head).
"""

from zoo.finetune.multitask import finetune_many
from zoo.finetune.run import State, finetune, init_params, load_backbone
from zoo.finetune.spec import MODES, Spec, make_spec

__all__ = ["finetune", "finetune_many", "State", "Spec", "MODES", "make_spec",
           "init_params", "load_backbone"]
