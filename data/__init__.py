"""Data: sources, tokenizer, row annotations, packing, the loader, tasks.

    loader = data.pretrain_loader(cfg, seq_len=128, batch_size=8, seed=0)
    batch = next(loader)           # int32 [8, 128]: tokens, doc_ids, ...
    state = loader.get_state()     # JSON; loader.set_state(state) resumes
    tok = data.load_tokenizer(cfg) # encode/decode/specials/save/load

`cfg` fields are documented in `default_config()`. Nothing here imports the
zoo runtime or the objectives.
"""

from data.config import data_dir, default_config
from data.loader import PretrainLoader, load_tokenizer, pretrain_loader
from data.tokenizer import (SentencePieceTokenizer, Tokenizer,
                            WordPieceTokenizer)

__all__ = ["data_dir", "default_config", "pretrain_loader", "load_tokenizer",
           "PretrainLoader", "Tokenizer", "SentencePieceTokenizer",
           "WordPieceTokenizer"]
