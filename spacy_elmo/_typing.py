"""Type aliases shared by every layer (it imports nothing of spacy_elmo)."""

from pathlib import Path
from typing import Union

#: A file or directory argument: a str or a pathlib.Path. Not any os.PathLike: Elmo.load_state_dict tells a
#: path from a state dict with isinstance(x, (str, Path)), so another os.PathLike would be taken for a dict.
PathLike = Union[str, Path]
