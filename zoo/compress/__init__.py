"""Model compression: making a trained model smaller or sparser.

Modules:
  magnitude  gradual magnitude pruning (Zhu & Gupta 2017): an optax
             transformation keeping masks in its state; `zoo.optim.make`
             wraps the trainer's optimizer in it when `optimizer.prune`
             is on; `sparsity(params)` reports zeros.
  heads      attention-head pruning by importance (Michel et al. 2019):
             gradient importance of each head, then the least important
             heads physically removed from every layer's q/k/v/out.
  quant, quant_io, calibration  int8 quantisation (Q8BERT), its file
             format and post-training calibration; see their docstrings.

Distillation is a pre-training scheme (`objectives.distill`: `distil`,
`tinybert`) and a fine-tuning option (`zoo.finetune.distill`); the
compression grid that compares every method is
`configs/compare/compress.py` (`zoo.harness.compressed`).
"""
