"""hdf5_for_writing: HDF5 written through Python's file object (spacy_elmo/hdf5.py)."""

import signal
import subprocess
import sys

import h5py
import numpy as np
import pytest

from spacy_elmo.hdf5 import hdf5_for_writing

#: In a process whose files may not grow past 4 KiB (a full disk): datasets, then an error raised in the block.
_FULL = """
import resource, signal, sys
import numpy as np
from spacy_elmo.hdf5 import hdf5_for_writing
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
try:
    with hdf5_for_writing(sys.argv[1]) as f:
        for i in range(200):
            try:
                f.create_dataset(str(i), data=np.zeros(8, "float32"))
            except OSError:
                pass
        raise KeyboardInterrupt
except BaseException as err:
    print(type(err).__name__)
"""


def test_a_file_written_and_read_back(tmp_path):
    path = tmp_path / "x.hdf5"
    with hdf5_for_writing(path) as f:
        f.create_dataset("a", data=np.arange(6, dtype="float32").reshape(2, 3))
    with h5py.File(path, "r") as f:
        np.testing.assert_array_equal(f["a"][()], np.arange(6, dtype="float32").reshape(2, 3))


@pytest.mark.skipif(not hasattr(signal, "SIGXFSZ"), reason="POSIX file-size limits")
def test_the_error_raised_in_the_block_is_the_one_that_escapes(tmp_path):
    """On a full disk closing the file fails too: that error replaced the block's own, so a Ctrl-C during an
    embed was reported as "File too large" with exit 1, not as the interruption it was."""
    result = subprocess.run([sys.executable, "-c", _FULL, str(tmp_path / "x.hdf5")], capture_output=True, text=True,
                            timeout=120)
    assert result.stdout.strip() == "KeyboardInterrupt", (result.stdout, result.stderr[-2000:])
