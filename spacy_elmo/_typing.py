"""Type aliases shared by every layer (it imports nothing of spacy_elmo)."""

from pathlib import Path
from typing import Union

#: A file or directory argument: a str or a pathlib.Path. Not any os.PathLike: some functions tell a
#: path from other arguments with isinstance(x, (str, Path)) (Elmo.load_state_dict's state dict,
#: BiLMConfig.from_allennlp_options' dict), so another os.PathLike would be taken for those.
PathLike = Union[str, Path]
