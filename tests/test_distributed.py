"""zoo.distributed's helpers on one process (tests/test_multihost.py and
tests/test_compare.py run them across two)."""

import numpy as np

from zoo import distributed


def test_arrays_cross_as_json_bit_for_bit():
  value = {"x": np.array([[1.5, np.nan], [-0.0, 3e-39]], np.float32),
           "rows": [np.arange(5, dtype=np.int64), {"n": 3}], "s": "a"}
  back = distributed._decode(distributed._encode(value))  # pylint: disable=protected-access
  assert back["x"].dtype == np.float32 and back["x"].shape == (2, 2)
  assert back["x"].tobytes() == value["x"].tobytes()
  np.testing.assert_array_equal(back["rows"][0], value["rows"][0])
  assert back["rows"][1] == {"n": 3} and back["s"] == "a"


def test_split_work_on_one_process_is_the_plain_loop():
  calls = []

  def fn(x):
    calls.append(x)
    return x * x
  assert distributed.split_work(fn, range(5)) == [0, 1, 4, 9, 16]
  assert calls == [0, 1, 2, 3, 4]


def test_main_first_on_one_process_runs_once():
  calls = []
  assert distributed.main_first(lambda: calls.append(1) or 7, "t") == 7
  assert calls == [1]
