"""The zoo: the BERT family of pre-training schemes as pure JAX functions."""
