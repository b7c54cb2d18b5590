"""Reading and writing AllenNLP/bilm-tf ELMo weight files (hdf5, TF layout).

Dataset names and shapes (elmo-spec §6); D char dim, F filters, P projection,
C cells, I = P (every LSTM layer input has the projection width):

    char_embed                                   (261, D)
    CNN/W_cnn_{i}, CNN/b_cnn_{i}                 (1, width_i, D, count_i), (count_i,)
    CNN_high_{k}/W_carry, W_transform            (F, F)
    CNN_high_{k}/b_carry, b_transform            (F,)
    CNN_proj/W_proj, CNN_proj/b_proj             (F, P), (P,)
    RNN_{d}/RNN/MultiRNNCell/Cell{l}/LSTMCell/   d 0 forward, 1 backward
        W_0 (I + P, 4C), B (4C,), W_P_0 (C, P)

Two layouts differ between the tools, and the writer picks the one every loader reads:

- F == P: bilm-tf has no token projection then (it neither creates nor reads CNN_proj),
  but AllenNLP always reads CNN_proj. The writer stores the identity and zero bias, which
  is what bilm-tf computes; the reader accepts a file without CNN_proj, or with exactly
  that identity (any other CNN_proj means different models to the two tools: refused).
- n_layers == 1: bilm-tf's training dump writes RNN_{d}/RNN/LSTMCell/... (no MultiRNNCell
  level), but both inference loaders (bilm-tf's model.py and AllenNLP's elmo_lstm.py) read
  RNN_{d}/RNN/MultiRNNCell/Cell0/LSTMCell/...: the writer uses that; the reader takes either.
"""

import json
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Dict, Iterator, List, Optional, Tuple

import h5py
import numpy as np
import torch

from .._typing import PathLike
from ..atomic import atomic_write
from ..chars import DEFAULT_MAX_CHARS, N_CHAR_IDS
from ..errors import Errors, Warnings
from ..hdf5 import hdf5_for_writing
from ..paths import missing_path_error, refuse_empty_path
from .config import BiLMConfig
from .native_io import CONFIG_NAME, cast_for_save, check_readable, check_weight, is_native_config

if TYPE_CHECKING:  # model.py imports this module when it reads or writes
    from .model import BiLM


def lstm_prefix(direction: int, layer: int) -> str:
    """Where the weights of one LSTM layer live (and are written): what both inference loaders read."""
    return f"RNN_{direction}/RNN/MultiRNNCell/Cell{layer}/LSTMCell"


#: What h5py raises for damaged metadata, from whichever access meets it (a damaged link name: UnicodeDecodeError,
#: h5py decoding names as UTF-8).
HDF5_ERRORS = (OSError, KeyError, RuntimeError, UnicodeDecodeError)


def training_dump_name(name: str) -> str:
    """Where a 1-layer bilm-tf training dump stores the dataset written as ``name``: it has no MultiRNNCell level."""
    return name.replace("/MultiRNNCell/Cell0/", "/")


def file_names(config: BiLMConfig, name: str) -> Tuple[str, ...]:
    """The names dataset ``name`` may have in a file, the written one first: a 1-layer
    bilm-tf training dump has no MultiRNNCell level."""
    if config.n_layers == 1 and "/MultiRNNCell/Cell0/" in name:
        return name, training_dump_name(name)
    return (name,)


def lstm_layers_in(weight_file: PathLike) -> Optional[int]:
    """The LSTM layers per direction that the weight file holds (forward ``W_0`` datasets counted from layer 0), for
    an error about options that do not say; None where it cannot be read or holds none."""
    try:
        with h5py.File(weight_file, "r", locking=False) as handle:
            n = 0
            while f"{lstm_prefix(0, n)}/W_0" in handle:
                n += 1
            if n == 0 and training_dump_name(f"{lstm_prefix(0, 0)}/W_0") in handle:
                n = 1
    except (*HDF5_ERRORS, ValueError):  # not hdf5, damaged: no count (reading it says so once the options are fixed)
        return None
    return n or None


def identity_projection(config: BiLMConfig) -> Dict[str, np.ndarray]:
    """The CNN_proj written when F == P: exactly no projection (bilm-tf has none there)."""
    P = config.projection_dim
    return {"CNN_proj/W_proj": np.eye(P, dtype=np.float32), "CNN_proj/b_proj": np.zeros(P, dtype=np.float32)}


def expected_datasets(config: BiLMConfig) -> Iterator[Tuple[str, Tuple[int, ...]]]:
    """Every dataset of a weight file for ``config``, with its shape, in file order (as written)."""
    D, F, P, C = config.char_embedding_dim, config.n_filters, config.projection_dim, config.cell_dim
    yield "char_embed", (N_CHAR_IDS, D)
    for i, (width, count) in enumerate(config.filters):
        yield f"CNN/W_cnn_{i}", (1, width, D, count)
        yield f"CNN/b_cnn_{i}", (count,)
    for k in range(config.n_highway):
        yield f"CNN_high_{k}/W_carry", (F, F)
        yield f"CNN_high_{k}/b_carry", (F,)
        yield f"CNN_high_{k}/W_transform", (F, F)
        yield f"CNN_high_{k}/b_transform", (F,)
    yield "CNN_proj/W_proj", (F, P)
    yield "CNN_proj/b_proj", (P,)
    for d in range(2):
        for layer in range(config.n_layers):
            prefix = lstm_prefix(d, layer)
            yield f"{prefix}/W_0", (P + P, 4 * C)
            yield f"{prefix}/B", (4 * C,)
            yield f"{prefix}/W_P_0", (C, P)


def dataset_names(handle: h5py.File) -> List[str]:
    """The names of every dataset in an open hdf5 file (groups left out)."""
    names: List[str] = []
    handle.visititems(lambda name, obj: names.append(name) if isinstance(obj, h5py.Dataset) else None)
    return names


#: The last part of the names of a weight file's large matrices (``W_cnn_{i}`` by prefix): one all zeros is no
#: trained weight but, most likely, the zero-filled tail of a download into a pre-allocated file.
LARGE_MATRICES = ("char_embed", "W_cnn_", "W_carry", "W_transform", "W_0", "W_P_0")


def is_large_matrix(name: str) -> bool:
    """Whether the dataset ``name`` (as :func:`expected_datasets` yields it) is one of :data:`LARGE_MATRICES`."""
    last = name.rsplit("/", 1)[-1]
    return last in LARGE_MATRICES or last.startswith("W_cnn_")


#: Names of a hdf5 file's datasets shown in an error; the rest counted.
LISTED_DATASETS = 5


def refuse_foreign(handle: h5py.File, path: Path) -> None:
    """An error naming what the open hdf5 file holds when it has no dataset of an ELMo weight file at all (an
    embeddings file of ``spacy-elmo embed`` or ``allennlp elmo``, say): not options that do not fit it."""
    names = dataset_names(handle)
    if "char_embed" in names or any(n.startswith(("CNN", "RNN_")) for n in names):
        return
    more = len(names) - LISTED_DATASETS
    shown = ", ".join(repr(n) for n in names[:LISTED_DATASETS]) + (f" and {more} more" if more > 0 else "")
    raise ValueError(Errors.E_NOT_ELMO_WEIGHTS.format(path=path, datasets=shown or "no dataset"))


#: The names' endings of hdf5 files (as :meth:`pathlib.Path.suffix`, lower case).
HDF5_SUFFIXES = (".hdf5", ".h5")


def _not_hdf5(path: Path, error: OSError) -> str:
    """Why the weight file ``path`` cannot be opened as HDF5 (h5py's ``error``): a spacy-elmo model's file or a
    safetensors file is named as what it is, with how to load it (not "damaged, or not hdf5"). A .hdf5/.h5 file
    is damaged even beside a spacy-elmo model (a directory may hold both): by its name, not by the HDF5 signature,
    which a truncated download may not reach and a user block moves away from the file's start."""
    if path.suffix.lower() in HDF5_SUFFIXES:
        return Errors.E_WEIGHT_FILE_NOT_HDF5.format(path=path, error=error)
    if is_native_config(path.parent / CONFIG_NAME):
        what = Errors.E_WEIGHT_FILE_WHAT_NATIVE.format(directory=path.parent)
    elif path.suffix == ".safetensors":
        what = Errors.E_WEIGHT_FILE_WHAT_SAFETENSORS
    else:
        return Errors.E_WEIGHT_FILE_NOT_HDF5.format(path=path, error=error)
    return Errors.E_WEIGHT_FILE_IS_NATIVE.format(path=path, what=what)


def read_datasets(config: BiLMConfig, weight_file: PathLike) -> Dict[str, np.ndarray]:
    """All datasets for ``config`` as float32 arrays, shape-checked with clear errors;
    a dataset that ``config`` does not describe is an error too."""
    refuse_empty_path(weight_file, Errors.E_PATH_EMPTY_WEIGHTS)  # Path(""): the current directory
    path = Path(weight_file)
    if not path.exists():
        raise missing_path_error(path, Errors.E_WEIGHT_FILE_MISSING.format(path=path))
    if path.is_dir():
        raise ValueError(Errors.E_WEIGHT_FILE_IS_DIR.format(path=path))
    check_readable(path)
    try:
        # Read without HDF5's file lock: a file another process holds open for writing (h5py "r+", a
        # notebook inspecting it) or a filesystem without locks (NFS, Lustre) refused the read as
        # "damaged, or not hdf5". h5py >= 3.5 takes locking= (pyproject requires 3.8).
        handle = h5py.File(path, "r", locking=False)
    except OSError as err:
        raise ValueError(_not_hdf5(path, err)) from err
    arrays, stored, zeros = {}, set(), []
    no_projection = config.n_filters == config.projection_dim
    # h5py reports damaged metadata as any of HDF5_ERRORS
    try:
        with handle:
            refuse_foreign(handle, path)
            for name, shape in expected_datasets(config):
                found = [n for n in file_names(config, name) if n in handle and isinstance(handle[n], h5py.Dataset)]
                if not found:
                    if no_projection and name.startswith("CNN_proj/"):
                        continue  # bilm-tf writes none when F == P
                    raise ValueError(Errors.E_DATASET_MISSING.format(path=path, dataset=name, expected=shape))
                data = handle[found[0]]
                if tuple(data.shape) != shape:
                    if name == "char_embed" and tuple(data.shape) == (N_CHAR_IDS + 1, shape[1]):
                        # AllenNLP's table in memory (its padding row 0 added): AllenNLP and bilm-tf read such a
                        # file shifted by a row, so it is refused as the other files two tools read apart are
                        message = Errors.E_CHAR_EMBED_PADDING_ROW if not data[0].any() else Errors.E_CHAR_EMBED_ROWS
                        raise ValueError(message.format(path=path, rows=N_CHAR_IDS + 1, expected=N_CHAR_IDS))
                    raise ValueError(
                        Errors.E_DATASET_SHAPE.format(dataset=found[0], path=path, found=tuple(data.shape), expected=shape)
                    )
                if data.dtype.kind != "f":  # before reading it: torch takes no unsigned, string or compound array
                    raise ValueError(Errors.E_DATASET_DTYPE.format(name=found[0], path=path, dtype=data.dtype.name))
                # cast as the native reader casts (check_weight): a finite float64 value beyond float32's range is
                # E_WEIGHT_DTYPE_OVERFLOW there, not a NaN in a damaged file with NumPy's overflow warning
                raw = data[...]
                if raw.dtype.itemsize > 8 or not raw.dtype.isnative:  # torch reads neither long double nor big-endian
                    with np.errstate(over="ignore"):  # a long double beyond float64's range: inf, reported as such
                        raw = raw.astype(np.float64 if raw.dtype.itemsize > 8 else raw.dtype.newbyteorder("="))
                weight = check_weight(torch.from_numpy(raw), found[0], path, Errors.E_DATASET_DTYPE, dtype=torch.float32)
                arrays[name] = weight.numpy()
                stored.add(found[0])
                if is_large_matrix(name) and not arrays[name].any():
                    zeros.append(found[0])
            unexpected = sorted(set(dataset_names(handle)) - stored)
    except HDF5_ERRORS as err:
        raise ValueError(Errors.E_WEIGHT_FILE_DAMAGED.format(path=path, error=err)) from err
    if unexpected:
        raise ValueError(Errors.E_DATASET_UNEXPECTED.format(path=path, datasets=", ".join(unexpected)))
    if zeros:  # a warning, not an error: the file is well formed, and the model is what it holds
        one = len(zeros) == 1
        said = Warnings.W_WEIGHTS_ALL_ZERO.format(matrices="matrix" if one else "matrices", names=", ".join(zeros),
                                                  path=path, are="is" if one else "are")
        warnings.warn(said, UserWarning, stacklevel=4)
    if no_projection:
        if not projection_is_identity(config, arrays):
            raise ValueError(Errors.E_PROJECTION_NOT_IDENTITY.format(path=path, n=config.projection_dim))
        arrays.update(identity_projection(config))
    return arrays


def projection_is_identity(config: BiLMConfig, arrays: Dict[str, np.ndarray]) -> bool:
    """Whether the CNN_proj in ``arrays`` (if any) is exactly :func:`identity_projection`: all that a
    biLM with F == P can hold (it has no projection)."""
    identity = identity_projection(config)
    return all(name not in arrays or np.array_equal(arrays[name], value) for name, value in identity.items())


def tensors_from_datasets(config: BiLMConfig, arrays: Dict[str, np.ndarray]) -> Dict[str, torch.Tensor]:
    """Convert TF-layout datasets to this project's state-dict names and layouts."""
    P = config.projection_dim
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a))  # noqa: E731
    out = {"token_encoder.char_embedding": t(arrays["char_embed"])}
    for i in range(len(config.filters)):
        # (1, width, D, count) -> (count, D, width): nn.Conv1d layout.
        out[f"token_encoder.conv_weights.{i}"] = t(arrays[f"CNN/W_cnn_{i}"][0].transpose(2, 1, 0))
        out[f"token_encoder.conv_biases.{i}"] = t(arrays[f"CNN/b_cnn_{i}"])
    for k in range(config.n_highway):
        g = f"CNN_high_{k}"
        out[f"token_encoder.highway_weights.{k}"] = t(
            np.concatenate([arrays[f"{g}/W_transform"].T, arrays[f"{g}/W_carry"].T], 0)
        )
        out[f"token_encoder.highway_biases.{k}"] = t(np.concatenate([arrays[f"{g}/b_transform"], arrays[f"{g}/b_carry"]]))
    if config.n_filters != P:  # F == P: the identity, checked by read_datasets
        out["token_encoder.projection.weight"] = t(arrays["CNN_proj/W_proj"].T)
        out["token_encoder.projection.bias"] = t(arrays["CNN_proj/b_proj"])
    for d, direction in enumerate(("forward_layers", "backward_layers")):
        for layer in range(config.n_layers):
            prefix = lstm_prefix(d, layer)
            w0 = arrays[f"{prefix}/W_0"]
            key = f"lstm.{direction}.{layer}"
            out[f"{key}.w_input"] = t(w0[:P])
            out[f"{key}.w_recurrent"] = t(w0[P:])
            out[f"{key}.bias"] = t(arrays[f"{prefix}/B"])
            out[f"{key}.w_proj"] = t(arrays[f"{prefix}/W_P_0"])
    return out


def datasets_from_state(config: BiLMConfig, state: Dict[str, torch.Tensor]) -> Dict[str, np.ndarray]:
    """Inverse of :func:`tensors_from_datasets`: TF-layout float32 arrays (an error for a value beyond
    float32's range: as inf, the written file read back as damaged)."""
    P = config.projection_dim
    fix = Errors.E_SAVE_DTYPE_OVERFLOW_ALLENNLP
    a = lambda name: cast_for_save(name, state[name].detach().cpu(), torch.float32, fix).numpy()  # noqa: E731
    out = {"char_embed": a("token_encoder.char_embedding")}
    for i in range(len(config.filters)):
        out[f"CNN/W_cnn_{i}"] = a(f"token_encoder.conv_weights.{i}").transpose(2, 1, 0)[None]
        out[f"CNN/b_cnn_{i}"] = a(f"token_encoder.conv_biases.{i}")
    F = config.n_filters
    for k in range(config.n_highway):
        w = a(f"token_encoder.highway_weights.{k}")
        b = a(f"token_encoder.highway_biases.{k}")
        out[f"CNN_high_{k}/W_carry"] = w[F:].T
        out[f"CNN_high_{k}/b_carry"] = b[F:]
        out[f"CNN_high_{k}/W_transform"] = w[:F].T
        out[f"CNN_high_{k}/b_transform"] = b[:F]
    if F != P:
        out["CNN_proj/W_proj"] = a("token_encoder.projection.weight").T
        out["CNN_proj/b_proj"] = a("token_encoder.projection.bias")
    else:
        out.update(identity_projection(config))
    for d, direction in enumerate(("forward_layers", "backward_layers")):
        for layer in range(config.n_layers):
            prefix = lstm_prefix(d, layer)
            key = f"lstm.{direction}.{layer}"
            out[f"{prefix}/W_0"] = np.concatenate([a(f"{key}.w_input"), a(f"{key}.w_recurrent")], 0)
            out[f"{prefix}/B"] = a(f"{key}.bias")
            out[f"{prefix}/W_P_0"] = a(f"{key}.w_proj")
    return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in out.items()}


# -- AllenNLP's module layout: the state_dict of its _ElmoBiLm (Elmo's ``_elmo_lstm``) -----------------
# What AllenNLP 2.10.1's loaders (_ElmoCharacterEncoder._load_*, ElmoLstm.load_weights) make of the
# datasets, and back. Its character table has an extra row 0 (id 0, padding: only whole padded tokens,
# whose outputs are masked); the highway's carry half is negated; each LSTM gate block is in the order
# input, forget, cell, output (TF's: input, cell, forget, output) and the forget bias holds TF's +1.
ALLENNLP_LSTM_DIRECTIONS = ("forward", "backward")


def allennlp_parameter_shapes(config: BiLMConfig) -> Dict[str, Tuple[int, ...]]:
    """Every parameter of AllenNLP's ``_ElmoBiLm`` for ``config`` (names as in its ``state_dict``), with its shape."""
    D, F, P, C = config.char_embedding_dim, config.n_filters, config.projection_dim, config.cell_dim
    shapes: Dict[str, Tuple[int, ...]] = {"_token_embedder._char_embedding_weights": (N_CHAR_IDS + 1, D)}
    for i, (width, count) in enumerate(config.filters):
        shapes[f"_token_embedder.char_conv_{i}.weight"] = (count, D, width)
        shapes[f"_token_embedder.char_conv_{i}.bias"] = (count,)
    for k in range(config.n_highway):
        shapes[f"_token_embedder._highways._layers.{k}.weight"] = (2 * F, F)
        shapes[f"_token_embedder._highways._layers.{k}.bias"] = (2 * F,)
    shapes["_token_embedder._projection.weight"] = (P, F)
    shapes["_token_embedder._projection.bias"] = (P,)
    for layer in range(config.n_layers):
        for direction in ALLENNLP_LSTM_DIRECTIONS:
            cell = f"_elmo_lstm.{direction}_layer_{layer}"
            shapes[f"{cell}.input_linearity.weight"] = (4 * C, P)
            shapes[f"{cell}.state_linearity.weight"] = (4 * C, P)
            shapes[f"{cell}.state_linearity.bias"] = (4 * C,)
            shapes[f"{cell}.state_projection.weight"] = (P, C)
    return shapes


def _swap_gates(array: np.ndarray, cell_dim: int) -> np.ndarray:
    """TF's gate blocks (i, j, f, o) along axis 0 in AllenNLP's order (i, f, j, o), and back (its own inverse)."""
    C = cell_dim
    return np.concatenate([array[:C], array[2 * C : 3 * C], array[C : 2 * C], array[3 * C :]], 0)


def allennlp_state_from_datasets(config: BiLMConfig, arrays: Dict[str, np.ndarray]) -> Dict[str, torch.Tensor]:
    """The ``_ElmoBiLm`` state_dict AllenNLP builds from TF-layout datasets (float32, as its loaders
    compute it), in tensors of its own: the arrays of :func:`datasets_from_state` may be views of a
    model's live parameters, and an exported state_dict must not move with them."""
    D, P, C = config.char_embedding_dim, config.projection_dim, config.cell_dim
    t = lambda a: torch.tensor(np.asarray(a, dtype=np.float32))  # noqa: E731  (a copy, C-contiguous)
    out = {"_token_embedder._char_embedding_weights": t(np.concatenate([np.zeros((1, D), np.float32),
                                                                         arrays["char_embed"]]))}
    for i in range(len(config.filters)):
        out[f"_token_embedder.char_conv_{i}.weight"] = t(arrays[f"CNN/W_cnn_{i}"][0].transpose(2, 1, 0))
        out[f"_token_embedder.char_conv_{i}.bias"] = t(arrays[f"CNN/b_cnn_{i}"])
    for k in range(config.n_highway):
        g, highway = f"CNN_high_{k}", f"_token_embedder._highways._layers.{k}"
        out[f"{highway}.weight"] = t(np.concatenate([arrays[f"{g}/W_transform"].T, -arrays[f"{g}/W_carry"].T], 0))
        out[f"{highway}.bias"] = t(np.concatenate([arrays[f"{g}/b_transform"], -arrays[f"{g}/b_carry"]]))
    out["_token_embedder._projection.weight"] = t(arrays["CNN_proj/W_proj"].T)
    out["_token_embedder._projection.bias"] = t(arrays["CNN_proj/b_proj"])
    for layer in range(config.n_layers):  # in AllenNLP's order (its state_dict's)
        for d, direction in enumerate(ALLENNLP_LSTM_DIRECTIONS):
            prefix, cell = lstm_prefix(d, layer), f"_elmo_lstm.{direction}_layer_{layer}"
            w0 = _swap_gates(arrays[f"{prefix}/W_0"].T, C)
            bias = np.array(arrays[f"{prefix}/B"], dtype=np.float32)
            bias[2 * C : 3 * C] += 1  # TF's forget_bias, in float32 as AllenNLP adds it
            out[f"{cell}.input_linearity.weight"] = t(w0[:, :P])
            out[f"{cell}.state_linearity.weight"] = t(w0[:, P:])
            out[f"{cell}.state_linearity.bias"] = t(_swap_gates(bias, C))
            out[f"{cell}.state_projection.weight"] = t(arrays[f"{prefix}/W_P_0"].T)
    return out


def datasets_from_allennlp_state(config: BiLMConfig, state: Dict[str, torch.Tensor]) -> Dict[str, np.ndarray]:
    """Inverse of :func:`allennlp_state_from_datasets` (shapes checked by the caller against
    :func:`allennlp_parameter_shapes`): TF-layout float32 arrays, for :func:`tensors_from_datasets`.
    Row 0 of AllenNLP's character table is dropped; the forget bias loses its +1 in float64 (exact:
    :func:`allennlp_state_from_datasets` gives AllenNLP's float32 value back)."""
    C = config.cell_dim
    a = lambda name: state[name].detach().cpu().double().numpy()  # noqa: E731
    out = {"char_embed": a("_token_embedder._char_embedding_weights")[1:]}
    for i in range(len(config.filters)):
        out[f"CNN/W_cnn_{i}"] = a(f"_token_embedder.char_conv_{i}.weight").transpose(2, 1, 0)[None]
        out[f"CNN/b_cnn_{i}"] = a(f"_token_embedder.char_conv_{i}.bias")
    F = config.n_filters
    for k in range(config.n_highway):
        g, highway = f"CNN_high_{k}", f"_token_embedder._highways._layers.{k}"
        w, b = a(f"{highway}.weight"), a(f"{highway}.bias")
        out[f"{g}/W_transform"], out[f"{g}/W_carry"] = w[:F].T, -w[F:].T
        out[f"{g}/b_transform"], out[f"{g}/b_carry"] = b[:F], -b[F:]
    out["CNN_proj/W_proj"] = a("_token_embedder._projection.weight").T
    out["CNN_proj/b_proj"] = a("_token_embedder._projection.bias")
    for d, direction in enumerate(ALLENNLP_LSTM_DIRECTIONS):
        for layer in range(config.n_layers):
            prefix, cell = lstm_prefix(d, layer), f"_elmo_lstm.{direction}_layer_{layer}"
            w0 = np.concatenate([a(f"{cell}.input_linearity.weight"), a(f"{cell}.state_linearity.weight")], 1)
            out[f"{prefix}/W_0"] = _swap_gates(w0, C).T
            bias = _swap_gates(a(f"{cell}.state_linearity.bias"), C)
            bias[2 * C : 3 * C] -= 1
            out[f"{prefix}/B"] = bias
            out[f"{prefix}/W_P_0"] = a(f"{cell}.state_projection.weight").T
    return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in out.items()}


def read_allennlp(model: "BiLM", weight_file: PathLike) -> None:
    """Load an hdf5 weight file into ``model`` (a :class:`~spacy_elmo.BiLM`) in place."""
    copy_datasets(model, read_datasets(model.config, weight_file))


def copy_datasets(model: "BiLM", arrays: Dict[str, np.ndarray]) -> None:
    """Copy TF-layout datasets (checked) into ``model``'s parameters in place."""
    tensors = tensors_from_datasets(model.config, arrays)
    with torch.no_grad():
        params = dict(model.named_parameters())
        for name, value in tensors.items():
            params[name].copy_(value)


def allennlp_refusals(config: BiLMConfig) -> List[str]:
    """Why AllenNLP (2.10.1) will not run a file of ``config`` that bilm-tf and this project read; [] if none."""
    reasons = []
    if not config.use_skip_connections:
        reasons.append(Warnings.W_ALLENNLP_REASON_NO_SKIP)
    if config.max_characters_per_token != DEFAULT_MAX_CHARS:
        reasons.append(Warnings.W_ALLENNLP_REASON_MAX_CHARS.format(value=config.max_characters_per_token))
    return reasons


def bilm_tf_refusals(config: BiLMConfig) -> List[str]:
    """What bilm-tf's model.py does with a file of ``config`` that AllenNLP and this project run, when that
    is not this model; [] if none. bilm-tf builds its LSTM cells with the projection only when
    projection_dim < dim (P < C), and a char-CNN projection only when n_filters != projection_dim,
    asserting n_filters > projection_dim then."""
    reasons = []
    F, P, C = config.n_filters, config.projection_dim, config.cell_dim
    if F < P:
        reasons.append(Warnings.W_BILM_TF_REASON_FEW_FILTERS.format(n_filters=F, projection_dim=P))
    if P == C:
        reasons.append(Warnings.W_BILM_TF_REASON_P_EQUALS_C.format(projection_dim=P))
    elif P > C:
        reasons.append(Warnings.W_BILM_TF_REASON_P_ABOVE_C.format(projection_dim=P, dim=C))
    return reasons


#: The tokenizer block of ``spacy.blank("en")``, which a reader of AllenNLP files (``evaluate``'s default, AllenNLP's
#: released English models) reads their text with (tests/training/test_cli.py checks it against spaCy).
ENGLISH_TOKENIZER = {"@tokenizers": "spacy.Tokenizer.v1"}


def _reading_settings(provenance: dict) -> Dict[str, str]:
    """What ``provenance`` (config.json's) records of how the model reads text that AllenNLP files drop:
    ``{"what": ..., "readers": ...}`` (``readers``: how ``embed`` and, where it reads otherwise, ``evaluate``
    read the export's text, and the options that give the model's reading back), or {} for a model that records
    no language (read the same way with or without the record). ``embed`` splits the lines of a model without a
    language at whitespace (AllenNLP's ``allennlp elmo``), the native model's with spaCy's tokenizer of its
    language (``Hello,`` against ``Hello`` ``,``): so an English stream model warns too, naming ``embed --lang
    en``; ``evaluate``'s defaults (English, spaCy's English tokenizer, one stream) read that model as recorded."""
    lang, tokenizer, reading = provenance.get("lang"), provenance.get("tokenizer"), provenance.get("reading")
    if not lang:
        return {}
    what, flags = [f"language {lang!r}"], []
    if lang != "en":
        flags.append(f"--lang {lang}")
    if tokenizer and (lang != "en" or tokenizer != ENGLISH_TOKENIZER):
        what.append("its tokenizer")
    if reading == "sentences":
        what.append("every sentence read alone")
        flags.append("--per-sentence")
    readers = Warnings.W_PROVENANCE_EMBED.format(lang=lang)
    if len(what) > 1 or flags:  # evaluate's defaults read otherwise too
        readers = Warnings.W_PROVENANCE_EVALUATE.format(flags=" ".join(flags) or "--lang, --per-sentence") + ", " + readers
    return {"what": ", ".join(what), "readers": readers}


def write_allennlp(
    model: "BiLM", options_file: PathLike, weight_file: PathLike, shown_as: Optional[PathLike] = None
) -> None:
    """Write ``options.json`` and the hdf5 weight file of ``model`` in the released layout.

    Warnings name ``shown_as`` (the final path, when writing into a temporary directory) or ``weight_file``."""
    refuse_empty_path(options_file, Errors.E_PATH_EMPTY_OPTIONS)
    refuse_empty_path(weight_file, Errors.E_PATH_EMPTY_WEIGHTS)
    config = model.config
    shown = weight_file if shown_as is None else shown_as
    if getattr(model, "initial_state", None) is not None:
        warnings.warn(Warnings.W_INITIAL_STATE_NOT_EXPORTED.format(path=shown), UserWarning, stacklevel=3)
    lost = _reading_settings(getattr(model, "provenance", None) or {})
    if lost:
        warnings.warn(Warnings.W_PROVENANCE_NOT_EXPORTED.format(path=shown, what=lost["what"], readers=lost["readers"]),
                      UserWarning, stacklevel=3)
    reasons = allennlp_refusals(config)
    if reasons:
        warnings.warn(Warnings.W_ALLENNLP_WILL_NOT_LOAD.format(path=shown, reasons="; ".join(reasons)),
                      UserWarning, stacklevel=3)
    reasons = bilm_tf_refusals(config)
    if reasons:
        warnings.warn(Warnings.W_BILM_TF_WILL_NOT_RUN.format(path=shown, reasons="; ".join(reasons)),
                      UserWarning, stacklevel=3)
    arrays = datasets_from_state(config, dict(model.named_parameters()))

    def write_h5(tmp: Path) -> None:
        # Through Python's file (hdf5_for_writing): a full disk killed the process, leaving the export's
        # temporary directory behind.
        with hdf5_for_writing(tmp) as fout:
            for name, _ in expected_datasets(config):
                fout.create_dataset(name, data=arrays[name])
        # The pair is written in two renames: the old options go before the new weights take the old ones'
        # place, so a kill between them leaves weights without options (an error to load), never the new
        # weights under the old options (other clips or activation, loading silently). A write that failed
        # (a full disk) never got here: the old pair is intact.
        Path(options_file).unlink(missing_ok=True)

    def write_json(tmp: Path) -> None:
        tmp.write_text(json.dumps(config.to_allennlp_options(), indent=2), encoding="utf-8")

    atomic_write(weight_file, write_h5)
    atomic_write(options_file, write_json)
