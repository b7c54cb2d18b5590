"""HDF5 files written through a Python file object.

HDF5 writing to a path itself meets a full disk (or a file-size limit) while it flushes, raises a RuntimeError
("Can't decrement id ref count ... errno = 28") and the process then dies of a segmentation fault (h5py 3.x, many
small datasets: an ``embed`` part). Through a Python file object every write is Python's, so the same disk is an
OSError with its errno (ENOSPC) naming the file, and the process goes on to say so."""

from contextlib import contextmanager, suppress
from typing import Any, Iterator

from ._typing import PathLike
from .atomic import naming

#: The dataset of an embeddings file (``spacy-elmo embed``'s and ``allennlp elmo``'s layout) that maps each line's
#: text to the name of its dataset of vectors.
SENTENCE_TO_INDEX = "sentence_to_index"


def is_embeddings_file(path: PathLike) -> bool:
    """Whether ``path`` is an HDF5 file of ELMo vectors in the layout ``spacy-elmo embed`` and ``allennlp elmo``
    write (it holds :data:`SENTENCE_TO_INDEX`); False for any other file, one that cannot be read included."""
    import h5py

    try:
        with h5py.File(path, "r", locking=False) as handle:  # no lock, as the readers: NFS, Lustre
            return SENTENCE_TO_INDEX in handle
    except Exception:  # noqa: BLE001 - not HDF5, damaged, unreadable: not an embeddings file to name
        return False


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
