"""The order `make test` deals its files in: longest first, from a record."""

import pathlib
import subprocess
import sys

from tests import durations
from tests.child_env import REPO, child_env

LOG = """\
============================= slowest durations ==============================
85.45s setup    tests/test_b.py::test_grid
48.89s call     tests/test_b.py::test_grid
0.26s teardown  tests/test_b.py::test_grid
12.00s call     tests/test_a.py::test_one[x-y]
3.50s call      tests/test_c.py::test_c
1.00s call      tests/test_a.py::test_two
=========== 3 passed in 150.00s ===========
"""


def test_parse_sums_each_files_phases():
  got = durations.parse(LOG)
  assert got == {"tests/test_b.py": 85.45 + 48.89 + 0.26,
                 "tests/test_a.py": 13.0, "tests/test_c.py": 3.5}


def test_longest_files_come_first_with_their_tests_in_order():
  paths = ["tests/test_a.py", "tests/test_a.py", "tests/test_c.py",
           "tests/test_new.py", "tests/test_b.py", "tests/test_b.py"]
  order = durations.longest_first(paths, durations.parse(LOG))
  # b (134.6 s), then a (13 s) and the unrecorded file counted as the
  # median (13 s) in their given order, then c (3.5 s).
  assert order == [4, 5, 0, 1, 3, 2]


def test_the_record_names_test_files_that_exist():
  record = durations.load()
  assert len(record) > 50
  root = pathlib.Path(__file__).parent.parent
  missing = [p for p in record if not (root / p).is_file()]
  assert not missing, f"tests/durations.json names removed files {missing}"
  assert all(s >= 0 for s in record.values())


def test_collection_runs_the_longest_recorded_file_first():
  """`conftest.py` orders a session's tests by `longest_first`: the
  shortest recorded file, named first, is collected last."""
  record = durations.load()
  ranked = sorted((p for p in record if p != "tests/test_durations.py"),
                  key=record.get)
  short, long_ = ranked[0], ranked[-1]
  out = subprocess.run(
      [sys.executable, "-m", "pytest", "--collect-only", "-q",
       "-p", "no:cacheprovider", short, long_],
      cwd=REPO, env=child_env(None, 1), capture_output=True, text=True,
      check=True).stdout
  files = [line.split("::")[0] for line in out.splitlines() if "::" in line]
  assert files[0] == long_ and files[-1] == short, files
