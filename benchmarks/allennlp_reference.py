"""Run AllenNLP's own ELMo code (allennlp 2.10.1) without installing allennlp.

The real ``allennlp`` package drags in transformers, spaCy, dill, wandb and
more. The ELMo numerics need none of it, so this module

1. downloads the wheel once (``pip download --no-deps allennlp==2.10.1``, hash
   pinned below) into a cache directory and unzips it (:func:`fetch_allennlp`);
2. loads AllenNLP's real source files for the ELMo path, unmodified, under
   their real module names, after putting minimal stand-ins into
   ``sys.modules`` for the heavy modules they import but never use at run
   time (:func:`load_allennlp_elmo`);
3. removes every ``allennlp*`` entry it added from ``sys.modules`` again, so
   the process is left as it was (the loaded modules keep working: their
   globals were bound at import).

Real AllenNLP files executed as they are (nothing of them is copied here):

* ``allennlp/modules/elmo.py`` (``_ElmoCharacterEncoder``, ``_ElmoBiLm``,
  weight loading, marker handling),
* ``allennlp/modules/elmo_lstm.py`` (``ElmoLstm``, ``load_weights``),
* ``allennlp/modules/lstm_cell_with_projection.py``,
* ``allennlp/modules/encoder_base.py`` (``_EncoderBase``: sorting, stateful
  state bookkeeping),
* ``allennlp/modules/token_embedders/elmo_token_embedder.py`` (``ElmoTokenEmbedder``),
  ``allennlp/modules/token_embedders/token_embedder.py`` (its base class),
  ``allennlp/modules/time_distributed.py`` (its projection per position),
* ``allennlp/modules/highway.py``, ``allennlp/modules/scalar_mix.py``,
* ``allennlp/nn/util.py`` (``add_sentence_boundary_token_ids``,
  ``remove_sentence_boundaries``, ``sort_batch_by_length``, ...),
* ``allennlp/nn/initializers.py`` (``block_orthogonal``),
* ``allennlp/common/checks.py`` (``ConfigurationError``),
* ``allennlp/data/tokenizers/token_class.py`` (``Token``),
* ``allennlp/data/token_indexers/elmo_indexer.py`` (``ELMoCharacterMapper``,
  ``ELMoTokenCharactersIndexer``).

Five small helpers of ``allennlp/common/util.py`` (``int_to_device``,
``is_distributed``, ``is_global_primary``, ``lazy_groups_of``,
``pad_sequence_to_length``) are AllenNLP's own function definitions too: that
file imports spaCy at the top, so the five ``def`` statements are cut out of
it with ``ast`` and executed alone.

Stand-ins (no numerics; used only for class definitions or never called):
``allennlp.common.FromParams`` / ``Registrable`` (empty base classes, ``register``
is a no-op decorator), ``allennlp.common.file_utils.cached_path`` (identity:
local paths only), ``allennlp.data.{Instance, Vocabulary, Batch, TextField}``
(raise if instantiated: only AllenNLP's ``batch_to_ids`` uses them; this module
builds the same tensor with AllenNLP's indexer instead, see
:func:`allennlp_batch_to_ids`), ``allennlp.data.token_indexers.token_indexer.TokenIndexer``
(base class storing ``token_min_padding_length``).
"""

import ast
import importlib.util
import os
import subprocess
import sys
import tempfile
import types
import zipfile
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Union

from benchmarks.fetch import sha256_file
from spacy_elmo import switches

ALLENNLP_VERSION = "2.10.1"
WHEEL_NAME = f"allennlp-{ALLENNLP_VERSION}-py3-none-any.whl"
WHEEL_SHA256 = "d840f2cb285ded77f48fbe5c8f52fe955dc48d4462cae2baf4668eca10dd42fb"

PathLike = Union[str, Path]

# Real files loaded, in dependency order: module name -> path inside the wheel.
_REAL_FILES = [
    ("allennlp.common.checks", "allennlp/common/checks.py"),
    ("allennlp.data.tokenizers.token_class", "allennlp/data/tokenizers/token_class.py"),
    ("allennlp.nn.util", "allennlp/nn/util.py"),
    ("allennlp.nn.initializers", "allennlp/nn/initializers.py"),
    ("allennlp.data.token_indexers.elmo_indexer", "allennlp/data/token_indexers/elmo_indexer.py"),
    ("allennlp.modules.highway", "allennlp/modules/highway.py"),
    ("allennlp.modules.scalar_mix", "allennlp/modules/scalar_mix.py"),
    ("allennlp.modules.encoder_base", "allennlp/modules/encoder_base.py"),
    ("allennlp.modules.lstm_cell_with_projection", "allennlp/modules/lstm_cell_with_projection.py"),
    ("allennlp.modules.elmo_lstm", "allennlp/modules/elmo_lstm.py"),
    ("allennlp.modules.elmo", "allennlp/modules/elmo.py"),
    ("allennlp.modules.time_distributed", "allennlp/modules/time_distributed.py"),
    ("allennlp.modules.token_embedders.token_embedder", "allennlp/modules/token_embedders/token_embedder.py"),
    ("allennlp.modules.token_embedders.elmo_token_embedder",
     "allennlp/modules/token_embedders/elmo_token_embedder.py"),
]
_UTIL_FUNCTIONS = ("int_to_device", "is_distributed", "is_global_primary", "lazy_groups_of", "pad_sequence_to_length")

_LOADED: Dict[str, Dict[str, types.ModuleType]] = {}


class AllenNLPUnavailable(RuntimeError):
    """The allennlp wheel could not be downloaded or extracted."""


# -- fetching -----------------------------------------------------------------
def default_cache_dir() -> Path:
    return Path(switches.read(switches.CACHE)).expanduser() / f"allennlp-{ALLENNLP_VERSION}"


def fetch_allennlp(cache_dir: Optional[PathLike] = None, timeout: float = 300.0) -> Path:
    """Download (once) and unzip the allennlp 2.10.1 wheel; return the directory holding
    the ``allennlp`` package. Idempotent and safe against concurrent callers.

    cache_dir: default ``~/.cache/spacy-elmo/allennlp-2.10.1`` (``$SPACY_ELMO_CACHE``
    replaces ``~/.cache/spacy-elmo``). Raises :class:`AllenNLPUnavailable`.
    """
    cache = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    site = cache / "site"
    if (site / "allennlp" / "modules" / "elmo.py").is_file():
        return site
    cache.mkdir(parents=True, exist_ok=True)
    wheel = cache / WHEEL_NAME
    if not wheel.is_file() or sha256_file(wheel) != WHEEL_SHA256:
        with tempfile.TemporaryDirectory(dir=cache) as tmp:
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
                   "--only-binary", ":all:", f"allennlp=={ALLENNLP_VERSION}", "-d", tmp]
            try:
                result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
            except (OSError, subprocess.TimeoutExpired) as err:
                raise AllenNLPUnavailable(f"pip download failed: {err}") from err
            got = Path(tmp) / WHEEL_NAME
            if result.returncode != 0 or not got.is_file():
                tail = (result.stderr or result.stdout).strip().splitlines()[-3:]
                raise AllenNLPUnavailable("pip download allennlp failed: " + " | ".join(tail))
            if sha256_file(got) != WHEEL_SHA256:
                raise AllenNLPUnavailable(f"{WHEEL_NAME}: sha256 mismatch (expected {WHEEL_SHA256})")
            os.replace(got, wheel)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        out = Path(tmp) / "site"
        try:
            with zipfile.ZipFile(wheel) as zf:
                zf.extractall(out)
        except (OSError, zipfile.BadZipFile) as err:
            raise AllenNLPUnavailable(f"cannot unzip {wheel}: {err}") from err
        try:
            os.replace(out, site)  # atomic; loses harmlessly to a concurrent extraction
        except OSError:
            if not (site / "allennlp" / "modules" / "elmo.py").is_file():
                raise
    return site


# -- loading --------------------------------------------------------------------
def _package(name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__path__ = []  # a package whose unknown submodules fail to import
    return module


def _stub_modules(site: Path) -> Dict[str, types.ModuleType]:
    import itertools
    import typing

    import torch
    import torch.distributed

    mods: Dict[str, types.ModuleType] = {}
    for name in ("allennlp", "allennlp.common", "allennlp.data", "allennlp.data.tokenizers",
                 "allennlp.data.token_indexers", "allennlp.modules", "allennlp.modules.token_embedders", "allennlp.nn"):
        mods[name] = _package(name)

    class FromParams:
        """Stand-in: AllenNLP's config-file construction machinery (unused here)."""

    class Registrable(FromParams):
        """Stand-in: ``register`` is a no-op decorator."""

        @classmethod
        def register(cls, name, constructor=None, exist_ok=False):
            return lambda subclass: subclass

    # The stand-ins' attributes are set with setattr: a type checker knows a ModuleType's attributes
    # only from a source file, and these modules have none.
    common = mods["allennlp.common"]
    setattr(common, "FromParams", FromParams)
    setattr(common, "Registrable", Registrable)

    # allennlp/common/util.py imports spaCy and dill at the top: execute only the
    # five real function definitions the ELMo files use.
    util = types.ModuleType("allennlp.common.util")
    source = (site / "allennlp" / "common" / "util.py").read_text(encoding="utf-8")
    tree = ast.parse(source)
    defs = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name in _UTIL_FUNCTIONS]
    if sorted(d.name for d in defs) != sorted(_UTIL_FUNCTIONS):
        raise AllenNLPUnavailable("allennlp/common/util.py: expected helper functions not found")
    namespace = {name: getattr(typing, name) for name in typing.__all__}
    namespace.update(torch=torch, dist=torch.distributed, islice=itertools.islice, A=typing.TypeVar("A"),
                     __name__=util.__name__)
    exec(compile(ast.Module(body=[*defs], type_ignores=[]), str(site / "allennlp/common/util.py"), "exec"), namespace)
    for name in _UTIL_FUNCTIONS:
        setattr(util, name, namespace[name])
    mods[util.__name__] = util

    file_utils = types.ModuleType("allennlp.common.file_utils")
    setattr(file_utils, "cached_path", lambda path, *args, **kwargs: path)  # local files only
    mods[file_utils.__name__] = file_utils

    def unavailable(qualname):
        def __init__(self, *args, **kwargs):
            raise NotImplementedError(f"{qualname} is a stand-in in benchmarks.allennlp_reference")

        return type(qualname.rsplit(".", 1)[1], (), {"__init__": __init__})

    for modname, clsname in (("allennlp.data.instance", "Instance"), ("allennlp.data.vocabulary", "Vocabulary"),
                             ("allennlp.data.batch", "Batch"), ("allennlp.data.fields", "TextField")):
        module = types.ModuleType(modname)
        setattr(module, clsname, unavailable(f"{modname}.{clsname}"))
        mods[modname] = module

    token_indexer = types.ModuleType("allennlp.data.token_indexers.token_indexer")

    class TokenIndexer(Registrable):
        """Stand-in base class of AllenNLP's token indexers."""

        def __init__(self, token_min_padding_length: int = 0) -> None:
            self._token_min_padding_length = token_min_padding_length

    setattr(token_indexer, "TokenIndexer", TokenIndexer)
    setattr(token_indexer, "IndexedTokenList", Dict[str, List[typing.Any]])
    mods[token_indexer.__name__] = token_indexer
    return mods


def load_allennlp_elmo(cache_dir: Optional[PathLike] = None) -> Dict[str, types.ModuleType]:
    """AllenNLP's real modules for ELMo: ``{"allennlp.modules.elmo": <module>, ...}``."""
    site = fetch_allennlp(cache_dir)
    key = str(site.resolve())
    if key in _LOADED:
        return _LOADED[key]
    mods = _stub_modules(site)
    saved = {name: module for name, module in sys.modules.items() if name == "allennlp" or name.startswith("allennlp.")}
    for name in saved:
        del sys.modules[name]
    try:
        sys.modules.update(mods)
        for name, relpath in _REAL_FILES:
            spec = importlib.util.spec_from_file_location(name, site / relpath)
            assert spec is not None and spec.loader is not None  # a .py path always gets a source loader
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
            mods[name] = module
            if name == "allennlp.data.tokenizers.token_class":
                setattr(mods["allennlp.data.tokenizers"], "Token", module.Token)
    finally:
        for name in [n for n in sys.modules if n == "allennlp" or n.startswith("allennlp.")]:
            del sys.modules[name]
        sys.modules.update(saved)
    _LOADED[key] = mods
    return mods


def load_elmo_bilm(options_file: PathLike, weight_file: PathLike, requires_grad: bool = False, cache_dir=None):
    """The real ``allennlp.modules.elmo._ElmoBiLm`` for an options/weights pair.

    Note: it is always stateful (``_elmo_lstm.reset_states()`` to forget), and its
    ``activations`` include the ``<S>``/``</S>`` positions.
    """
    elmo = load_allennlp_elmo(cache_dir)["allennlp.modules.elmo"]
    return elmo._ElmoBiLm(str(options_file), str(weight_file), requires_grad=requires_grad)


def allennlp_remove_sentence_boundaries(tensor, mask):
    """AllenNLP's own ``nn.util.remove_sentence_boundaries``."""
    util = load_allennlp_elmo()["allennlp.nn.util"]
    return util.remove_sentence_boundaries(tensor, mask)


def allennlp_batch_to_ids(sentences: Sequence[Sequence[str]]):
    """Character ids as AllenNLP's ``batch_to_ids`` builds them, with AllenNLP's own
    ``ELMoTokenCharactersIndexer`` (``tokens_to_indices`` + ``as_padded_tensor_dict``,
    i.e. ``ELMoCharacterMapper``); AllenNLP's Instance/Batch plumbing around it only
    computes the padding length, done here as ``max(len(s))``."""
    import torch

    mods = load_allennlp_elmo()
    indexer_mod = mods["allennlp.data.token_indexers.elmo_indexer"]
    Token = mods["allennlp.data.tokenizers.token_class"].Token
    indexer = indexer_mod.ELMoTokenCharactersIndexer()
    max_len = max((len(s) for s in sentences), default=0)
    rows = []
    for sentence in sentences:
        indexed = indexer.tokens_to_indices([Token(t) for t in sentence], None)
        rows.append(indexer.as_padded_tensor_dict(indexed, {"elmo_tokens": max_len})["elmo_tokens"])
    if not rows:
        return torch.zeros((0, 0, indexer_mod.ELMoCharacterMapper.max_word_length), dtype=torch.long)
    return torch.stack([r.view(max_len, indexer_mod.ELMoCharacterMapper.max_word_length) for r in rows])
