"""AllenNLP's ELMo API on spacy-elmo's biLM: change the import, keep the code (no spaCy here).

::

    # from allennlp.modules.elmo import Elmo, batch_to_ids
    from spacy_elmo.allennlp_compat import Elmo, batch_to_ids
    elmo = Elmo(options_file, weight_file, num_output_representations=2, dropout=0.5)
    out = elmo(batch_to_ids(sentences))  # {"elmo_representations": [(B, T, 2P)] * 2, "mask": (B, T)}

    # from allennlp.modules.token_embedders import ElmoTokenEmbedder
    from spacy_elmo.allennlp_compat import ElmoTokenEmbedder
    embedder = ElmoTokenEmbedder(options_file, weight_file, projection_dim=128)
    vectors = embedder(batch_to_ids(sentences))  # (B, T, 128); (B, T, 2P) without projection_dim

    # from allennlp.commands.elmo import ElmoEmbedder   (allennlp 0.9)
    from spacy_elmo.allennlp_compat import ElmoEmbedder
    ElmoEmbedder(options_file, weight_file).embed_sentence(tokens)  # float32 (L + 1, n, 2P)

:class:`Elmo` has allennlp 2.10.1's constructor and ``forward``: the same dict, shapes, masking,
dropout (one draw per representation, after the sentence markers are removed), layer norm (mixed
over the ``<S>`` / ``</S>`` positions too, one mean and variance per layer over the batch's unmasked
elements), ``keep_sentence_boundaries``, fixed ``scalar_mix_parameters`` and ``requires_grad``.
:class:`ElmoTokenEmbedder` is allennlp 2.10.1's: one such ``Elmo`` representation, optionally
projected by a trained ``Linear``. :meth:`Elmo.load_allennlp_state_dict` loads a trained AllenNLP
``Elmo``'s parameters (and :meth:`Elmo.allennlp_state_dict` gives ours by AllenNLP's names), and
:class:`ElmoTokenEmbedder`'s pair does the same for AllenNLP's ``ElmoTokenEmbedder``. Like
AllenNLP's, all three classes carry each batch row's final LSTM states into the next call
(``stateful=False``, keyword only, for vectors that do not depend on earlier calls;
``reset_states()`` forgets them). ``options_file`` may instead be a spacy-elmo model directory or
``"default"`` (the bundled model), with ``weight_file=None``. Each ``scalar_mix_k.scalar_parameters``
is one ``(L + 1,)`` tensor, not AllenNLP's list of ``(1,)`` tensors, and the biLM is ``elmo.bilm``
(AllenNLP's private ``elmo._elmo_lstm`` is an error naming ``elmo.reset_states()``). Not supported,
each a clear error:
``vocab_to_cache`` / ``word_inputs``, a ``module`` other than a spacy-elmo :class:`BiLM`, URLs in
place of local files, and ``ElmoEmbedder.embed_file`` (use :func:`spacy_elmo.embedding.embed_file`).
"""

import math
import os
import pickle
import warnings
from itertools import islice
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Mapping, NamedTuple, NoReturn, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch import Tensor, nn

from ._typing import PathLike
from .bilm import BiLM, ScalarMix
from .bilm.allennlp_io import (
    HDF5_SUFFIXES,
    allennlp_parameter_shapes,
    allennlp_state_from_datasets,
    copy_datasets,
    datasets_from_allennlp_state,
    datasets_from_state,
    projection_is_identity,
)
from .bilm.native_io import CONFIG_NAME, ModelPathIsFile, check_readable, check_weight, is_native_config, torch_load_error
from .bilm.config import check_bool, is_int
from .bilm.model import char_ids_type_error, remove_boundaries
from .chars import batch_rows, batch_to_ids, check_batch
from .embedding import embed_lines, empty_vectors
from .errors import Errors, Warnings, listed, with_article
from .paths import missing_path_error

__all__ = ["AllenNLPKeys", "Elmo", "ElmoEmbedder", "ElmoTokenEmbedder", "batch_to_ids"]

#: ``ElmoEmbedder.embed_sentences``' default batch size (allennlp 0.9's DEFAULT_BATCH_SIZE).
DEFAULT_BATCH_SIZE = 64
#: Where AllenNLP's ``Elmo`` keeps its ``_ElmoBiLm`` (the biLM's parameters) in its state_dict.
ALLENNLP_BILM = "_elmo_lstm."
#: A key that only an AllenNLP Elmo's state_dict has: what comes before it is the prefix of one.
ALLENNLP_MARK = ALLENNLP_BILM + "_token_embedder._char_embedding_weights"
#: AllenNLP keeps the sentence markers' character ids as plain attributes, never in its state_dict;
#: a state_dict that has them anyway (another AllenNLP version or a fork) must have this biLM's: checked.
ALLENNLP_MARKERS = (ALLENNLP_BILM + "_token_embedder._beginning_of_sentence_characters",
                    ALLENNLP_BILM + "_token_embedder._end_of_sentence_characters")
#: Where AllenNLP's ``ElmoTokenEmbedder`` keeps its ``Elmo`` and its projection (a plain ``Linear`` in
#: allennlp 0.9 to 2.10.1: the ``TimeDistributed`` around it is made in ``forward``, not stored).
ELMO_KEY = "_elmo."
PROJECTION_KEY = "_projection."
PROJECTION_WEIGHT, PROJECTION_BIAS = PROJECTION_KEY + "weight", PROJECTION_KEY + "bias"
LISTED_KEYS = 8  # keys named per kind in an error; the rest counted


class AllenNLPKeys(NamedTuple):
    """What ``load_allennlp_state_dict`` skipped (names without the prefix), as torch's ``load_state_dict``."""

    missing_keys: List[str]
    unexpected_keys: List[str]


class _ElmoState(NamedTuple):
    """What :meth:`Elmo._check_allennlp_state` found: the biLM's arrays (empty: not given), the given
    scalar-mix values by AllenNLP's names, and the skipped keys."""

    bilm: Dict[str, np.ndarray]
    mixes: Dict[str, Tensor]
    keys: AllenNLPKeys


def _listed(kind: str, names: Sequence[str]) -> str:
    return f"{kind} " + listed(list(names), LISTED_KEYS)


def _prefix_hint(state_dict: Mapping, prefix: str, mark: str = ALLENNLP_MARK, cls: str = "Elmo") -> str:
    """Where the state_dict holds AllenNLP ``cls`` weights (the keys ending in ``mark``), if not (only)
    under ``prefix``; "" otherwise."""
    found = sorted(k[: -len(mark)] for k in state_dict if isinstance(k, str) and k.endswith(mark))
    if not found or found == [prefix]:
        return ""
    return Errors.E_COMPAT_STATE_PREFIX_HINT.format(cls=cls, found=", ".join(repr(f) for f in found))


class _GivenState(NamedTuple):
    """A state_dict to load and what errors call it: its file's path, or "the state_dict"."""

    tensors: Mapping[str, Tensor]
    source: str


def _read_state(state_dict: Union[Mapping[str, Tensor], PathLike], cls: str) -> _GivenState:
    """A state_dict as given, or read from its file (``torch.load(weights_only=True)``; a file that is none,
    an hdf5 weight file say, is a clear error naming it, not torch's, which advises ``weights_only=False``)."""
    source = "the state_dict"
    if isinstance(state_dict, (str, Path)):
        path = Path(state_dict)
        if not path.exists():
            raise missing_path_error(path, Errors.E_COMPAT_STATE_FILE_MISSING.format(path=path))
        if path.is_dir():
            raise ValueError(Errors.E_COMPAT_STATE_FILE_IS_DIR.format(path=path, cls=cls))
        check_readable(path)
        try:
            state_dict = torch.load(path, map_location="cpu", weights_only=True)
        # a text file met torch's legacy unpickler, which fails on its first bytes with anything, IndexError and
        # KeyError too ("hello ..." gave a bare KeyError: 101)
        except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError, OSError, IndexError, KeyError) as err:
            raise ValueError(Errors.E_COMPAT_STATE_NOT_TORCH.format(path=path, cls=cls, error=torch_load_error(err))) from err
        source = str(path)
    if not isinstance(state_dict, Mapping):
        raise TypeError(Errors.E_COMPAT_STATE_TYPE.format(cls=cls, a_type=with_article(type(state_dict).__name__)))
    return _GivenState(state_dict, source)


def _check_values(given: Mapping[str, object], names: Iterable[str], prefix: str, source: str) -> None:
    """The tensors of ``given`` (by the keys ``names``) checked as the hdf5 and native readers check weights
    (:func:`~spacy_elmo.bilm.native_io.check_weight`: floating point and finite), an error naming the
    state_dict's key (``prefix`` + name) and ``source``. Finite in float32, as the native reader checks in the
    model's dtype: AllenNLP's weights are float32 and the biLM's pass through float32 arrays
    (``datasets_from_allennlp_state``), where a float64 1e39 became inf and loaded silently."""
    for name in names:
        value = given[name]
        if isinstance(value, Tensor):  # else _misfits refused it already
            check_weight(value, prefix + name, source, Errors.E_COMPAT_STATE_DTYPE, dtype=torch.float32)


def _under(state_dict: Mapping[str, Tensor], prefix: str) -> Dict[str, Tensor]:
    """The entries whose keys start with ``prefix``, by the rest of their keys."""
    return {k[len(prefix):]: v for k, v in state_dict.items() if isinstance(k, str) and k.startswith(prefix)}


def _misfits(given: Mapping[str, object], shapes: Mapping[str, Tuple[int, ...]]) -> List[Tuple[str, List[str]]]:
    """The values of ``given`` (those ``shapes`` has a key of) that are not tensors (``"name (an ndarray)"``) and
    the tensors not of their shape in ``shapes`` (``"name (found) (expected (...))"``), as ``(kind, problems)``."""
    found = [(k, v) for k, v in given.items() if k in shapes]
    not_tensors = [f"{k} ({with_article(type(v).__name__)})" for k, v in found if not isinstance(v, Tensor)]
    misshapen = [f"{k} {tuple(v.shape)} (expected {shapes[k]})" for k, v in found
                 if isinstance(v, Tensor) and tuple(v.shape) != shapes[k]]
    return [("not a tensor:", not_tensors), ("wrong shape:", misshapen)]


def _not_tensor_fix(misfits: List[Tuple[str, List[str]]]) -> str:
    """The fix for values that are not tensors among ``misfits`` (of :func:`_misfits`); "" when all are."""
    return Errors.E_COMPAT_STATE_NOT_TENSOR if misfits[0][1] else ""


def _check_char_ids(inputs: object, max_chars: int, cls: str, call: str) -> None:
    """A TypeError when ``inputs`` (given to ``cls``, called as ``call(ids)``) is not a tensor, a ValueError
    when it is not shaped ``(..., batch, timesteps, max_chars)``."""
    if not isinstance(inputs, Tensor):
        raise char_ids_type_error(inputs, cls, call, f"(batch, timesteps, {max_chars})")
    if inputs.dim() < 3 or inputs.shape[-1] != max_chars:
        raise ValueError(Errors.E_COMPAT_INPUT_SHAPE.format(cls=cls, max_chars=max_chars, shape=tuple(inputs.shape)))


def _expand_home(path: PathLike) -> PathLike:
    """``path`` with a leading ``~`` expanded, as AllenNLP's cached_path does (``"default"`` unchanged)."""
    return Path(path).expanduser() if isinstance(path, Path) else os.path.expanduser(path)


def load_bilm(
    cls_name: str, options_file: Optional[PathLike], weight_file: Optional[PathLike], stateful: bool, backend: str
) -> BiLM:
    """The biLM of AllenNLP's two files, or of a model directory / ``"default"`` given as
    ``options_file`` with ``weight_file=None``."""
    if options_file is None:
        raise ValueError(Errors.E_COMPAT_NO_MODEL.format(cls=cls_name))
    for path in (options_file, weight_file):
        if isinstance(path, str) and "://" in path:
            raise ValueError(Errors.E_COMPAT_URL.format(path=path))
    # AllenNLP reads both through cached_path, which expands a leading ~: code written for it passes
    # "~/elmo/options.json". Only here: spacy-elmo's own loaders take paths as given (paths.py).
    options_file = _expand_home(options_file)
    weight_file = None if weight_file is None else _expand_home(weight_file)
    if weight_file is None:
        try:
            return BiLM.load(options_file, stateful=stateful, backend=backend)
        except ModelPathIsFile as err:  # Elmo(options.json, None, ...): BiLM.from_allennlp is not the fix here
            # a spacy-elmo model's file (its config.json, or any file beside it) has no weight file to pass; an
            # AllenNLP file (an options .json, a .hdf5) beside a spacy-elmo model is AllenNLP's: its directory
            # would load the native model, not the files named
            path = Path(options_file)
            suffix = path.suffix.lower()
            allennlp_file = suffix in HDF5_SUFFIXES or (suffix == ".json" and path.name != CONFIG_NAME)
            native = is_native_config(path) or (not allennlp_file and is_native_config(path.parent / CONFIG_NAME))
            raise err.advising(Errors.E_MODEL_PATH_FIX_DIR if native else Errors.E_MODEL_PATH_FIX_COMPAT) from None
    return BiLM.from_allennlp(options_file, weight_file, stateful=stateful, backend=backend)


class Elmo(nn.Module):
    """``num_output_representations`` ELMo mixes of one biLM run (allennlp 2.10.1's ``Elmo``).

    options_file, weight_file: the released ``options.json`` and ``.hdf5`` (or a spacy-elmo model
    directory or ``"default"`` and ``None``; a leading ``~`` is expanded, as AllenNLP's ``cached_path``
    expands it); requires_grad: fine-tune the biLM (otherwise only the
    mixes learn); do_layer_norm: normalise each layer before mixing; dropout: applied to each
    representation; keep_sentence_boundaries: keep the ``<S>`` / ``</S>`` positions (``T + 2``);
    scalar_mix_parameters: fixed pre-softmax layer weights (not trained, gamma fixed at 1);
    module: a ready :class:`BiLM` (both files None; its ``requires_grad`` flags, ``stateful`` and
    backend are left as they are, as AllenNLP leaves a given module's). Keyword only, not in
    AllenNLP: stateful (default True, AllenNLP's behaviour) and backend (``"auto"``: the fused
    kernels when compiled).
    """

    def __init__(
        self,
        options_file: Optional[PathLike],
        weight_file: Optional[PathLike],
        num_output_representations: int,
        requires_grad: bool = False,
        do_layer_norm: bool = False,
        dropout: float = 0.5,
        vocab_to_cache: Optional[List[str]] = None,
        keep_sentence_boundaries: bool = False,
        scalar_mix_parameters: Optional[List[float]] = None,
        module: Optional[nn.Module] = None,
        *,
        stateful: bool = True,
        backend: str = "auto",
    ) -> None:
        super().__init__()
        if vocab_to_cache is not None:
            raise ValueError(Errors.E_COMPAT_VOCAB_TO_CACHE.format(cls="Elmo"))
        if not is_int(num_output_representations) or num_output_representations < 0:
            raise ValueError(Errors.E_COMPAT_NUM_OUTPUTS.format(value=num_output_representations))
        for name, value in (("requires_grad", requires_grad), ("do_layer_norm", do_layer_norm),
                            ("keep_sentence_boundaries", keep_sentence_boundaries), ("stateful", stateful)):
            check_bool(name, value)
        if module is not None:
            if options_file is not None or weight_file is not None:
                raise ValueError(Errors.E_COMPAT_MODULE_WITH_FILES)
            if not isinstance(module, BiLM):
                raise TypeError(Errors.E_COMPAT_MODULE_TYPE.format(a_type=with_article(type(module).__name__)))
            self.bilm = module
        else:
            self.bilm = load_bilm("Elmo", options_file, weight_file, stateful, backend)
            self.bilm.requires_grad_(requires_grad)
        n_layers = self.bilm.config.n_output_layers
        if scalar_mix_parameters is not None and len(scalar_mix_parameters) != n_layers:
            example = [-9e10] * n_layers
            example[1] = 1
            raise ValueError(Errors.E_COMPAT_MIX_PARAMETERS.format(
                found=len(scalar_mix_parameters), expected=n_layers, example=example))
        self._keep_sentence_boundaries = keep_sentence_boundaries
        self._dropout = nn.Dropout(p=dropout)
        self._num_output_representations = int(num_output_representations)
        for k in range(num_output_representations):
            mix = ScalarMix(n_layers, do_layer_norm=do_layer_norm, initial_weights=scalar_mix_parameters,
                            trainable=scalar_mix_parameters is None)
            self.add_module(f"scalar_mix_{k}", mix)  # AllenNLP's names

    @property
    def _scalar_mixes(self) -> List[ScalarMix]:
        """The mixes by their registered names (AllenNLP's ``getattr(self, f"scalar_mix_{k}")``): a list
        kept as an attribute would be shared by nn.DataParallel's replicas (a shallow copy of the
        attributes), each replica then mixing with the original's parameters, on the original's device."""
        return [getattr(self, f"scalar_mix_{k}") for k in range(self._num_output_representations)]

    def __getattr__(self, name: str) -> Union[Tensor, nn.Module]:
        """nn.Module's lookup (parameters, buffers, submodules); AllenNLP's private ``_elmo_lstm`` (code
        from allennlp-models calls ``elmo._elmo_lstm._elmo_lstm.reset_states()``) gets an error naming
        what to use instead, not a bare AttributeError."""
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name == ALLENNLP_BILM.rstrip("."):
                raise AttributeError(Errors.E_COMPAT_ELMO_LSTM.format(cls=type(self).__name__, name=name)) from None
            raise

    def get_output_dim(self) -> int:
        """Width of each representation: ``2 * projection_dim`` (1024 for the original ELMo)."""
        return self.bilm.config.output_dim

    def reset_states(self) -> None:
        """Forget the LSTM states carried from earlier calls (stateful mode)."""
        self.bilm.reset_states()

    def _allennlp_shapes(self) -> Dict[str, Tuple[int, ...]]:
        """Every parameter of AllenNLP's ``Elmo`` equal to this one, by its name there, with its shape."""
        shapes = {ALLENNLP_BILM + k: v for k, v in allennlp_parameter_shapes(self.bilm.config).items()}
        for k, mix in enumerate(self._scalar_mixes):
            shapes[f"scalar_mix_{k}.gamma"] = (1,)
            shapes.update({f"scalar_mix_{k}.scalar_parameters.{j}": (1,) for j in range(mix.n_layers)})
        return shapes

    def load_allennlp_state_dict(
        self, state_dict: Union[Mapping[str, Tensor], PathLike], strict: bool = True, prefix: str = ""
    ) -> AllenNLPKeys:
        """Load the parameters of AllenNLP's ``Elmo`` (its trained scalar mixes, and its biLM, fine-tuned
        or not): ``state_dict`` is its ``state_dict()`` or a file of one (``best.th``, read with
        ``torch.load(weights_only=True)``); ``prefix`` selects it in a whole model's, e.g.
        ``"_text_field_embedder.token_embedder_elmo._elmo."``. Build this Elmo from the options file
        the AllenNLP model was built from, with its ``num_output_representations``.

        strict (default): a key missing or left over is an error naming them. strict=False skips
        unexpected keys and keeps the current values of missing scalar-mix keys. Either way a shape
        mismatch, or a biLM only partly present, is an error, and nothing is changed then. A loaded
        biLM forgets its carried states and any fitted initial state (AllenNLP's starts from zeros).
        Returns the skipped keys.
        """
        check_bool("strict", strict)
        given = _read_state(state_dict, "Elmo")
        state = self._check_allennlp_state(given.tensors, strict, prefix, given.source)
        self._apply_allennlp_state(state)
        return state.keys

    def _check_allennlp_state(
        self, state_dict: Mapping[str, Tensor], strict: bool, prefix: str, source: str = "the state_dict"
    ) -> "_ElmoState":
        """What :meth:`load_allennlp_state_dict` loads, every check done (the errors raised here) and
        nothing changed yet; ``source`` names the state_dict (its file) in the errors."""
        given = _under(state_dict, prefix)
        if not given:
            raise ValueError(Errors.E_COMPAT_STATE_PREFIX.format(prefix=prefix, hint=_prefix_hint(state_dict, prefix)))
        shapes = self._allennlp_shapes()
        missing = [k for k in shapes if k not in given]
        unexpected = [k for k in given if k not in shapes and k not in ALLENNLP_MARKERS]
        misfits = _misfits(given, shapes)
        bilm_missing = [k for k in missing if k.startswith(ALLENNLP_BILM)]
        bilm_given = len(bilm_missing) < sum(k.startswith(ALLENNLP_BILM) for k in shapes)
        refused = [("missing:", missing if strict else bilm_missing if bilm_given else []),
                   ("unexpected:", unexpected if strict else []), *misfits]
        problems = [_listed(kind, names) for kind, names in refused if names]
        if problems:
            raise ValueError(Errors.E_COMPAT_STATE_KEYS.format(
                prefix=prefix, n=len(self._scalar_mixes), problems="; ".join(problems),
                hint=_prefix_hint(state_dict, prefix) + _not_tensor_fix(misfits)))
        for name, expected in zip(ALLENNLP_MARKERS, self.bilm.marker_ids.cpu()):
            found = given.get(name)
            if found is not None and not torch.equal(torch.as_tensor(found).cpu().long(), expected.long()):
                raise ValueError(Errors.E_COMPAT_STATE_MARKERS.format(
                    name=name, found=torch.as_tensor(found).tolist(), expected=expected.tolist()))
        _check_values(given, [k for k in given if k in shapes], prefix, source)
        config, arrays = self.bilm.config, {}
        if bilm_given:
            arrays = datasets_from_allennlp_state(config, {k[len(ALLENNLP_BILM):]: v for k, v in given.items()
                                                           if k in shapes and k.startswith(ALLENNLP_BILM)})
            if config.n_filters == config.projection_dim and not projection_is_identity(config, arrays):
                raise ValueError(Errors.E_COMPAT_STATE_PROJECTION.format(n=config.projection_dim))
        mixes = {k: v for k, v in given.items() if k in shapes and not k.startswith(ALLENNLP_BILM)}
        return _ElmoState(arrays, mixes, AllenNLPKeys(missing, unexpected))

    def _apply_allennlp_state(self, state: "_ElmoState") -> None:
        """Load what :meth:`_check_allennlp_state` checked: the biLM's weights (if given; it then forgets
        its carried states and fitted initial state) and the scalar mixes' given values."""
        if state.bilm:
            copy_datasets(self.bilm, state.bilm)
            self.bilm.set_initial_state(None)
            self.bilm.reset_states()
        with torch.no_grad():
            for k, mix in enumerate(self._scalar_mixes):
                weights = mix.scalar_parameters.detach().clone()
                for j in range(mix.n_layers):
                    weights[j] = state.mixes.get(f"scalar_mix_{k}.scalar_parameters.{j}", weights[j:j + 1])[0]
                mix.scalar_parameters.copy_(weights)
                mix.gamma.copy_(state.mixes.get(f"scalar_mix_{k}.gamma", mix.gamma))

    def allennlp_state_dict(self) -> Dict[str, Tensor]:
        """This Elmo's parameters by AllenNLP's names (float32 copies, on the CPU): AllenNLP's ``Elmo`` built
        from the same options file and ``num_output_representations`` loads it with ``load_state_dict``.
        A fitted initial state has no place there (a warning says so)."""
        config = self.bilm.config
        if self.bilm.initial_state is not None:
            warnings.warn(Warnings.W_INITIAL_STATE_NOT_EXPORTED.format(path="the AllenNLP state_dict"),
                          UserWarning, stacklevel=2)
        arrays = datasets_from_state(config, dict(self.bilm.named_parameters()))
        out = {ALLENNLP_BILM + k: v for k, v in allennlp_state_from_datasets(config, arrays).items()}
        for k, mix in enumerate(self._scalar_mixes):
            out[f"scalar_mix_{k}.gamma"] = mix.gamma.detach().cpu().float().clone()
            for j, weight in enumerate(mix.scalar_parameters.detach().cpu().float()):
                out[f"scalar_mix_{k}.scalar_parameters.{j}"] = weight.reshape(1).clone()
        return out

    def forward(self, inputs: Tensor, word_inputs: Optional[Tensor] = None) -> Dict[str, Union[Tensor, List[Tensor]]]:
        """inputs: character ids ``(batch, timesteps, 50)`` from :func:`batch_to_ids` (more leading
        dimensions are flattened and restored, as in AllenNLP).

        Returns ``{"elmo_representations": [(batch, timesteps, 2P)] * num_output_representations,
        "mask": BoolTensor (batch, timesteps)}`` (``timesteps + 2`` with keep_sentence_boundaries).
        """
        if word_inputs is not None:
            raise ValueError(Errors.E_COMPAT_WORD_INPUTS.format(cls="Elmo"))
        _check_char_ids(inputs, self.bilm.config.max_characters_per_token, "Elmo", "elmo")
        leading = tuple(inputs.shape[:-2])
        # math.prod, not -1: a batch of empty sentences (timesteps 0) has no element to infer it from
        out = self.bilm(inputs.reshape(math.prod(leading), *inputs.shape[-2:]), keep_boundaries=True)
        representations = []
        for mix in self._scalar_mixes:
            mixed = mix(out.activations, out.mask)  # over the markers too, as AllenNLP mixes
            if not self._keep_sentence_boundaries:
                mixed = remove_boundaries(mixed, out.mask)[0]
            representations.append(self._dropout(mixed))
        mask = out.mask if self._keep_sentence_boundaries else out.mask[:, 2:]
        return {
            "elmo_representations": [r.reshape(*leading, *r.shape[1:]) for r in representations],
            "mask": mask.reshape(*leading, mask.shape[-1]),
        }


class ElmoTokenEmbedder(nn.Module):
    """allennlp 2.10.1's ``ElmoTokenEmbedder`` (a ``TokenEmbedder`` of a ``TextFieldEmbedder``): one
    ELMo representation per token, ``(batch, timesteps, 2P)``, or projected to ``projection_dim``.

    It wraps ``Elmo(options_file, weight_file, 1, ...)`` as ``self._elmo`` (AllenNLP's name), with
    its defaults and ``keep_sentence_boundaries=False``. options_file, weight_file: as for
    :class:`Elmo`; the default, as :class:`ElmoEmbedder`'s, is the bundled model (2.10.1's downloaded
    the original ELMo: pass its files for that). requires_grad fine-tunes the biLM (the mix
    learns either way, unless ``scalar_mix_parameters`` fixes it); do_layer_norm, dropout,
    scalar_mix_parameters as for :class:`Elmo`. projection_dim: a trained ``torch.nn.Linear(2P,
    projection_dim)`` applied to each position's vector (``self._projection``; None or 0: none).
    Keyword only, not in AllenNLP: stateful and backend, as for :class:`Elmo`.
    """

    def __init__(
        self,
        options_file: Optional[PathLike] = "default",
        weight_file: Optional[PathLike] = None,
        do_layer_norm: bool = False,
        dropout: float = 0.5,
        requires_grad: bool = False,
        projection_dim: Optional[int] = None,
        vocab_to_cache: Optional[List[str]] = None,
        scalar_mix_parameters: Optional[List[float]] = None,
        *,
        stateful: bool = True,
        backend: str = "auto",
    ) -> None:
        super().__init__()
        if vocab_to_cache is not None:
            raise ValueError(Errors.E_COMPAT_VOCAB_TO_CACHE.format(cls="ElmoTokenEmbedder"))
        if projection_dim is not None and (not is_int(projection_dim) or projection_dim < 0):
            raise ValueError(Errors.E_COMPAT_PROJECTION_DIM.format(value=projection_dim))
        self._elmo = Elmo(options_file, weight_file, 1, requires_grad=requires_grad, do_layer_norm=do_layer_norm,
                          dropout=dropout, scalar_mix_parameters=scalar_mix_parameters, stateful=stateful,
                          backend=backend)
        projection_dim = None if projection_dim is None else int(projection_dim)
        # AllenNLP: ``if projection_dim:``, so 0 means no projection as None does
        self._projection = nn.Linear(self._elmo.get_output_dim(), projection_dim) if projection_dim else None
        self.output_dim = projection_dim or self._elmo.get_output_dim()

    def get_output_dim(self) -> int:
        """Width of each token's vector: projection_dim, or the ELMo width ``2P`` without one."""
        return self.output_dim

    def reset_states(self) -> None:
        """Forget the LSTM states carried from earlier calls (stateful mode)."""
        self._elmo.reset_states()

    def load_allennlp_state_dict(
        self, state_dict: Union[Mapping[str, Tensor], PathLike], strict: bool = True, prefix: str = ""
    ) -> AllenNLPKeys:
        """Load the parameters of AllenNLP's ``ElmoTokenEmbedder``: its ``_elmo.`` keys as
        :meth:`Elmo.load_allennlp_state_dict` loads them, and its projection's ``_projection.weight`` /
        ``_projection.bias``. ``state_dict`` is its ``state_dict()`` or a file of one (``best.th``);
        ``prefix`` selects it in a whole model's, e.g. ``"_text_field_embedder.token_embedder_elmo."``.
        Build this embedder from the options file and with the ``projection_dim`` (or none) the
        AllenNLP model was built with.

        strict (default): a key missing or left over is an error naming them (a projection in the
        state_dict but not in this embedder, or the reverse, says which projection_dim to build it
        with). strict=False skips unexpected keys (a projection this embedder lacks included) and keeps
        the current values of missing scalar-mix keys and of a missing projection. Either way a shape
        mismatch, or a biLM or projection only partly present, is an error, and nothing is changed
        then. Returns the skipped keys (names after ``prefix``).
        """
        check_bool("strict", strict)
        state_dict, source = _read_state(state_dict, "ElmoTokenEmbedder")
        given = _under(state_dict, prefix)
        if not any(k.startswith(ELMO_KEY) for k in given):
            raise ValueError(Errors.E_COMPAT_TOKEN_STATE_PREFIX.format(prefix=prefix, hint=_prefix_hint(
                state_dict, prefix, mark=ELMO_KEY + ALLENNLP_MARK, cls="ElmoTokenEmbedder")))
        elmo = self._elmo._check_allennlp_state(state_dict, strict, prefix + ELMO_KEY, source)
        projection = {} if self._projection is None else dict(self._projection.named_parameters())
        shapes = {PROJECTION_KEY + k: tuple(v.shape) for k, v in projection.items()}
        found = {k: v for k, v in given.items() if k in (PROJECTION_WEIGHT, PROJECTION_BIAS)}
        missing = [k for k in shapes if k not in found]
        unexpected = [k for k in given if not k.startswith(ELMO_KEY) and k not in shapes]
        misfits = _misfits(found, shapes)
        # a projection only partly given is refused either way, as a partly given biLM is
        refused = [("missing:", missing if strict or found else []), ("unexpected:", unexpected if strict else []),
                   *misfits]
        problems = [_listed(kind, names) for kind, names in refused if names]
        if problems:
            raise ValueError(Errors.E_COMPAT_TOKEN_STATE_KEYS.format(
                prefix=prefix, problems="; ".join(problems),
                fix=self._projection_fix(found) + _not_tensor_fix(misfits)))
        _check_values(found, list(found) if projection else [], prefix, source)
        self._elmo._apply_allennlp_state(elmo)
        if projection and found:
            with torch.no_grad():
                for k, parameter in projection.items():
                    parameter.copy_(found[PROJECTION_KEY + k])
        return AllenNLPKeys([ELMO_KEY + k for k in elmo.keys.missing_keys] + missing,
                            [ELMO_KEY + k for k in elmo.keys.unexpected_keys] + unexpected)

    def _projection_fix(self, found: Mapping[str, Tensor]) -> str:
        """How to build this embedder for the state_dict's projection keys ``found``; "" when it is built so."""
        if not found:
            return "" if self._projection is None else Errors.E_COMPAT_TOKEN_STATE_NO_PROJECTION
        weight = found.get(PROJECTION_WEIGHT)
        if not isinstance(weight, Tensor) or weight.dim() != 2:
            return ""
        dim = weight.shape[0]
        ours = None if self._projection is None else self._projection.out_features
        return "" if dim == ours else Errors.E_COMPAT_TOKEN_STATE_PROJECTION_DIM.format(dim=dim)

    def allennlp_state_dict(self) -> Dict[str, Tensor]:
        """This embedder's parameters by AllenNLP's names (float32, on the CPU): AllenNLP's
        ``ElmoTokenEmbedder`` built from the same options file and ``projection_dim`` loads it with
        ``load_state_dict``."""
        out = {ELMO_KEY + k: v for k, v in self._elmo.allennlp_state_dict().items()}
        if self._projection is not None:
            for k, parameter in self._projection.named_parameters():
                out[PROJECTION_KEY + k] = parameter.detach().cpu().float().clone()
        return out

    def forward(self, elmo_tokens: Tensor, word_inputs: Optional[Tensor] = None) -> Tensor:
        """elmo_tokens: character ids ``(batch, timesteps, 50)`` from :func:`batch_to_ids` (more
        leading dimensions are kept, as in AllenNLP). Returns ``(batch, timesteps, get_output_dim())``,
        zeros at padded positions without a projection (its bias there with one, as in AllenNLP)."""
        if word_inputs is not None:
            raise ValueError(Errors.E_COMPAT_WORD_INPUTS.format(cls="ElmoTokenEmbedder"))
        _check_char_ids(elmo_tokens, self._elmo.bilm.config.max_characters_per_token, "ElmoTokenEmbedder", "embedder")
        representation = self._elmo(elmo_tokens)["elmo_representations"][0]
        if self._projection is None:
            return representation
        return self._projection(representation)  # per position: AllenNLP's TimeDistributed(Linear)


class ElmoEmbedder:
    """allennlp 0.9's ``ElmoEmbedder``: every layer of a sentence as NumPy float32 ``(L + 1, n, 2P)``
    (``(3, n, 1024)`` for the original ELMo), the sentence markers removed; an empty sentence gives
    ``(L + 1, 0, 2P)``.

    options_file, weight_file: as for :class:`Elmo`; the default is the bundled model (0.9's
    default downloaded the original ELMo: pass its files for that). cuda_device: -1 for the CPU,
    else the CUDA device's index. Keyword only: stateful (default True, as 0.9 carried each batch
    row's states into the next batch) and backend. The biLM is ``self.elmo_bilm``.
    """

    def __init__(
        self,
        options_file: Optional[PathLike] = "default",
        weight_file: Optional[PathLike] = None,
        cuda_device: int = -1,
        *,
        stateful: bool = True,
        backend: str = "auto",
    ) -> None:
        if not is_int(cuda_device) or cuda_device < -1:
            raise ValueError(Errors.E_COMPAT_CUDA_DEVICE.format(value=cuda_device))
        if cuda_device >= torch.cuda.device_count():  # before loading: torch's AssertionError came after it
            raise ValueError(Errors.E_COMPAT_NO_CUDA_DEVICE.format(value=cuda_device, count=torch.cuda.device_count()))
        cuda_device = int(cuda_device)
        check_bool("stateful", stateful)
        self.elmo_bilm = load_bilm("ElmoEmbedder", options_file, weight_file, stateful, backend)
        self.elmo_bilm.requires_grad_(False).eval()
        if cuda_device >= 0:
            self.elmo_bilm.to(torch.device("cuda", cuda_device))
        self.cuda_device = cuda_device

    def reset_states(self) -> None:
        """Forget the LSTM states carried from earlier batches."""
        self.elmo_bilm.reset_states()

    @torch.no_grad()
    def batch_to_embeddings(self, batch: Sequence[Sequence[str]]) -> Tuple[Tensor, Tensor]:
        """``(activations (B, L + 1, T, 2P), mask (B, T))`` as torch tensors on the biLM's device; the
        mask is int64 (1: a token, 0: padding), as 0.9's was (``1 - mask`` works), not bool as in 2.x."""
        ids = batch_to_ids(batch, self.elmo_bilm.config.max_characters_per_token)
        out = self.elmo_bilm(ids.to(self.elmo_bilm.marker_ids.device))
        return torch.stack(out.activations, 1), out.mask.long()

    def embed_sentence(self, sentence: Sequence[str]) -> np.ndarray:
        """One sentence's layers: float32 ``(L + 1, n, 2P)``."""
        return self.embed_batch([sentence])[0]

    def embed_batch(self, batch: Sequence[Sequence[str]]) -> List[np.ndarray]:
        """Each sentence's layers, one biLM call for the batch; none for the batch of one empty sentence
        (``[[]]``), as in 0.9."""
        rows = batch_rows(batch)  # the tokens here: embed_lines's run_rows sees no empty rows when not stateful
        if len(rows) == 1 and len(rows[0]) == 0:
            # 0.9's embed_batch answered the batch [[]] with its empty embedding and ran nothing (its biLM raised on
            # it): row 0's carried states stay as they were. Empty rows of a larger batch run as <S> </S>, as there.
            return [empty_vectors(self.elmo_bilm)]
        return embed_lines(self.elmo_bilm, rows, layers="all")

    def embed_sentences(
        self, sentences: Iterable[Sequence[str]], batch_size: int = DEFAULT_BATCH_SIZE
    ) -> Iterator[np.ndarray]:
        """A generator of each sentence's layers, computed ``batch_size`` sentences at a time. ``batch_size`` and
        ``sentences`` (not a set, a mapping or a string) are checked at the call, as the eager methods check theirs;
        the sentences are read and embedded as the generator is consumed."""
        if not is_int(batch_size) or batch_size < 1:
            raise ValueError(Errors.E_COMPAT_BATCH_SIZE.format(value=batch_size))
        check_batch(sentences)  # a set: its sentences' vectors in hash order
        return self._embedded(iter(sentences), batch_size)

    def _embedded(self, iterator: Iterator[Sequence[str]], batch_size: int) -> Iterator[np.ndarray]:
        while True:
            batch = list(islice(iterator, batch_size))
            if not batch:
                return
            yield from self.embed_batch(batch)

    def embed_file(self, *args, **kwargs) -> NoReturn:
        """Not provided: :func:`spacy_elmo.embedding.embed_file` writes the same HDF5 layout."""
        raise NotImplementedError(Errors.E_COMPAT_EMBED_FILE)
