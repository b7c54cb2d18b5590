"""HDF5 files written through a Python file object.

HDF5 writing to a path itself meets a full disk (or a file-size limit) while it flushes, raises a RuntimeError
("Can't decrement id ref count ... errno = 28") and the process then dies of a segmentation fault (h5py 3.x, many
small datasets: an ``embed`` part). Through a Python file object every write is Python's, so the same disk is an
OSError with its errno (ENOSPC) naming the file, and the process goes on to say so."""

from contextlib import contextmanager, suppress
from typing import Any, Iterator

from ._typing import PathLike
from .atomic import naming


@contextmanager
def hdf5_for_writing(path: PathLike) -> Iterator[Any]:
    """A new ``h5py.File`` at ``path`` (replaced if it exists), open for writing within, closed on exit."""
    import h5py  # the torch modules' readers import it too; not every caller needs it

    with naming(path):
        raw, handle = open(path, "w+b"), None  # "+": HDF5 reads back what it wrote
        try:
            handle = h5py.File(raw, "w")
            yield handle
            handle.close()
            raw.close()
        except BaseException:
            # Closing flushes, and on a full disk fails again: that error would replace the first (a Ctrl-C
            # reported as a write error). The file is discarded (atomic_write); the first error says why.
            for opened in (handle, raw):
                with suppress(Exception):
                    if opened is not None:
                        opened.close()
            raise
