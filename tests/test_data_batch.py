"""The batch contract: its checks and the defaults of its optional keys."""

import numpy as np
import pytest

from data import batch


def _good():
  row = {k: np.array([5, 6, 1, 0]) for k in batch.KEYS}
  row.update(doc_ids=np.array([1, 1, 1, 0]),
             sentence_ids=np.array([1, 1, 1, 0]),
             word_ids=np.array([1, 2, 3, 0]), phrase_ids=np.zeros(4, int),
             doc_keys=np.array([77, 77, 77, 0]))
  return row


def test_check_row_accepts_the_contract():
  batch.check_row(_good())


@pytest.mark.parametrize("key, value, message", [
    ("word_ids", [1, 2, 3, 4], "word_ids nonzero on padding"),
    ("sentence_ids", [2, 1, 1, 0], "sentence_ids decreases"),
    ("doc_keys", [77, 78, 77, 0], "doc_keys differ within document 1"),
    ("doc_keys", [77, 0, 77, 0], "doc_keys zero on a real piece"),
    ("tokens", [5, 0, 1, 0], "nonzero on padding"),
])
def test_check_row_names_the_problem(key, value, message):
  with pytest.raises(ValueError, match=message):
    batch.check_row({**_good(), key: np.array(value)})


def test_doc_key_is_a_nonzero_31_bit_hash_of_the_text():
  a, b = batch.doc_key("one document"), batch.doc_key("another document")
  assert a != b and 0 < a < 2**31 and 0 < b < 2**31
  assert batch.doc_key("one document") == a


def test_defaults_make_each_row_document_its_own():
  doc = np.array([[1, 1, 2, 0], [1, 1, 1, 1]])
  full = batch.with_defaults({"tokens": doc + 4, "doc_ids": doc,
                              "sentence_ids": doc, "word_ids": doc})
  keys = full["doc_keys"]
  assert (full["phrase_ids"] == 0).all()
  assert keys[0, 3] == 0 and keys[0, 0] == keys[0, 1] != keys[0, 2]
  assert keys[1, 0] not in keys[0]  # row 1's document is not row 0's
  with pytest.raises(ValueError, match="lacks"):
    batch.with_defaults({"tokens": doc})
