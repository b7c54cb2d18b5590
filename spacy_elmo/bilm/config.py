"""BiLMConfig: every hyperparameter of an ELMo biLM, and its AllenNLP options form."""

import errno
import math
import numbers
import reprlib
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

from ..chars import DEFAULT_MAX_CHARS, N_CHAR_IDS
from ..errors import Errors, with_article
from ..paths import missing_path_error, read_json_file, refuse_empty_path

#: The first bytes of an HDF5 file (at offset 0, where h5py writes it): a weight file given as the options.
HDF5_MAGIC = b"\x89HDF"


def is_hdf5(raw: bytes) -> bool:
    """Whether ``raw``, the bytes of a file given as ELMo options, are an HDF5 file (a weight file given where the
    options.json goes): decoded as UTF-8 it fails with "can't decode byte 0x89", which names neither file."""
    return raw.startswith(HDF5_MAGIC)

RELEASED_FILTERS: List[Tuple[int, int]] = [(1, 32), (2, 32), (3, 64), (4, 128), (5, 256), (6, 512), (7, 1024)]

_PRESETS = {
    # name: (cell_dim C, projection_dim P, n_highway)
    "small": (1024, 128, 1),
    "medium": (2048, 256, 1),
    "original": (4096, 512, 2),
}


def is_int(value: Any) -> bool:
    """A whole number (a Python or NumPy integer: any ``numbers.Integral``), not a bool (JSON ``true`` is
    not a size). Store what it accepts as ``int(value)``: a NumPy integer is no JSON number."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_real(value: Any) -> bool:
    """A real number (a Python or NumPy one: any ``numbers.Real``; ``np.float32`` is no float subclass), not a
    bool. Store what it accepts as ``float(value)`` unless it is an int or float already."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def read_options_bytes(path: Union[str, Path]) -> bytes:
    """The bytes of the options file at ``path``: a ValueError of E_OPTIONS_IS_DIR for a directory (a directory
    named like an options file too) and of E_OPTIONS_UNREADABLE for an OSError (no read permission, an I/O error:
    not "pass the options.json", it is that file); FileNotFoundError (removed since its caller looked) is the
    caller's to say, and so is a loop of symbolic links (ELOOP: no file to read, not a permission to fix)."""
    if Path(path).is_dir():
        raise ValueError(Errors.E_OPTIONS_IS_DIR.format(path=path))
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise  # an OSError too: kept from the clause below, as its caller names the missing file
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise FileNotFoundError(err.errno, err.strerror, err.filename) from err
        raise ValueError(Errors.E_OPTIONS_UNREADABLE.format(path=path, error=err)) from err


#: What a value of a JSON (or Python) type is, for a message naming the type of a value where a number belongs.
VALUE_KINDS = {str: "a string", bool: "a boolean", type(None): "null", float: "a float", list: "a list", dict: "an object"}


def none_or_zero(value: Any, none: Any) -> Any:
    """An options.json value that may say "none" (a clip, ``n_highway``): ``none`` for null (or a missing key,
    ``.get``'s None) and for the number 0; any other value as it is, for validation to accept or refuse by name
    (``or none`` took false, "", [] and {} for none too, silently)."""
    return none if value is None or (is_real(value) and value == 0) else value


#: The most bytes one torch tensor can have (its size is a signed 64-bit integer: more is torch's "Storage size
#: calculation overflowed", or a TypeError from C++ for a dimension past 2**63 - 1).
MOST_TENSOR_BYTES = 2**63 - 1


def _digits(n: int) -> int:
    """The decimal digits of ``n`` (``abs``), counted without ``str``: Python refuses to write an int of more than
    4,300 digits ("Exceeds the limit (4300 digits) for integer string conversion")."""
    n, digits = abs(n), (max(abs(n).bit_length() - 1, 0) * 301029) // 1000000 + 1  # at most log10(2): never more
    while n >= 10**digits:
        digits += 1
    return digits


def big_number(n: int) -> str:
    """``n`` for messages: ``"93,600,000"``, or where it has more than 40 digits ``"1.33e5003"`` (3 significant
    digits), which Python writes for an int of any size (``f"{n:,}"`` refuses one past 4,300 digits)."""
    if abs(n) < 10**40:
        return f"{n:,}"
    exponent = _digits(n) - 1
    mantissa = (2 * abs(n) // 10 ** (exponent - 2) + 1) // 2  # 3 digits, rounded half up
    if mantissa == 1000:
        mantissa, exponent = 100, exponent + 1
    return f"{'-' if n < 0 else ''}{mantissa // 100}.{mantissa % 100:02d}e{exponent}"


class _ShortRepr(reprlib.Repr):
    """``reprlib``'s shortened repr (6 items of a list, 40 digits of an int), of an int of any size: its own
    ``repr_int`` calls ``repr``, which refuses an int of more than 4,300 digits."""

    def repr_int(self, x: int, level: int) -> str:
        if abs(x) < 10**self.maxlong:
            return super().repr_int(x, level)
        keep = max(0, (self.maxlong - 3) // 2)  # reprlib's own cut: the first and last digits, "..." between
        sign = "-" if x < 0 else ""  # one of the first characters reprlib keeps
        lead, tail = abs(x) // 10 ** (_digits(x) - (keep - len(sign))), abs(x) % 10 ** (self.maxlong - 3 - keep)
        return f"{sign}{lead}...{tail:0{self.maxlong - 3 - keep}d}"


def short_repr(value: Any) -> str:
    """``value``'s repr for a message, shortened as :func:`reprlib.repr` does (2,000 filters are 6 and ``...``,
    a 5,000-digit int its first and last digits), for an int of any size."""
    return _ShortRepr().repr(value)


def byte_size(n: int) -> str:
    """``n`` bytes in binary units, for messages: ``"357.0 MiB"``, ``"8.0 EiB"``; past 10**40 EiB, the EiB as
    :func:`big_number` writes them (``float`` holds no int past 1.8e308)."""
    if n >> 60 >= 10**40:
        return f"{big_number(n >> 60)} EiB"
    size, unit = float(n), "bytes"
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if round(size, 1) < 1024 or unit == "EiB":  # as shown: 1,048,575 bytes is 1.0 MiB, not 1,024.0 KiB
            break
        size /= 1024
    return f"{n} bytes" if unit == "bytes" else f"{size:,.1f} {unit}"


def check_bool(name: str, value: Any) -> None:
    """TypeError naming ``name`` unless ``value`` is True or False: a string such as ``"false"`` is truthy."""
    if not isinstance(value, bool):
        raise TypeError(Errors.E_FLAG_NOT_BOOL.format(name=name, value=value))


class UnknownConfigFields(ValueError):
    """:meth:`BiLMConfig.from_dict` given keys that are no field: ``names`` (repr'd, comma-separated) and the
    fields there are, ``choices``; said in the Python API's words, which ``pretrain --options`` rewords as its own."""

    def __init__(self, names: str, choices: str) -> None:
        super().__init__(Errors.E_CONFIG_UNKNOWN_FIELD.format(names=names, choices=choices))
        self.names, self.choices = names, choices

    def __reduce__(self):
        # pickled (a worker process's error) with its own arguments: the default passes the message alone
        return type(self), (self.names, self.choices)


class InvalidConfigValue(ValueError):
    """A value no biLM can have, refused by :meth:`BiLMConfig.validate`: its message, and the ``field`` that holds
    it (for :meth:`BiLMConfig.from_allennlp_options` to name the options key instead)."""

    def __init__(self, field: str, message: str, together: Tuple[str, ...] = (), alone: Tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.field = field
        #: the sizes too large together that the message names (``field`` the first), each of which may shrink:
        #: empty where the message names the one value to fix
        self.together = together
        #: the sizes each too large alone that the message names where it names several (``field`` the first),
        #: each of which must shrink: empty otherwise
        self.alone = alone

    def __reduce__(self):
        # pickled (a worker process's error) with its own arguments: the default passes the message alone
        return type(self), (self.field, str(self), self.together, self.alone)


#: The options.json key of each BiLMConfig field (``n_characters`` and the rest under ``char_cnn``).
OPTIONS_KEYS = {
    "projection_dim": "lstm.projection_dim",
    "cell_dim": "lstm.dim",
    "n_layers": "lstm.n_layers",
    "cell_clip": "lstm.cell_clip",
    "proj_clip": "lstm.proj_clip",
    "use_skip_connections": "lstm.use_skip_connections",
    "char_embedding_dim": "char_cnn.embedding.dim",
    "filters": "char_cnn.filters",
    "n_highway": "char_cnn.n_highway",
    "activation": "char_cnn.activation",
    "n_characters": "char_cnn.n_characters",
    "max_characters_per_token": "char_cnn.max_characters_per_token",
}


def n_layers_fix(weight_file: Optional[Union[str, Path]]) -> str:
    """How to fix options that lack ``lstm.n_layers``: the layer count the weight file holds, where it says."""
    if weight_file is not None:
        from .allennlp_io import lstm_layers_in  # allennlp_io imports this module: imported here

        found = lstm_layers_in(weight_file)
        if found is not None:
            return Errors.E_OPTIONS_N_LAYERS_IN_FILE.format(path=weight_file, n=found)
    return Errors.E_OPTIONS_N_LAYERS_UNKNOWN


#: The fields that size a biLM's tensors (:func:`_tensor_bytes`).
SIZE_FIELDS = ("projection_dim", "cell_dim", "n_layers", "char_embedding_dim", "n_highway", "filters",
               "max_characters_per_token")
#: :func:`_tensor_bytes`'s part of the ``<S>``/``</S>`` char ids: no parameters.
CHAR_IDS_PART = ("max_characters_per_token",)


def _tensor_bytes(sizes: Dict[str, Any]) -> Dict[Tuple[str, ...], int]:
    """The bytes of a new BiLM's tensors, by part, each keyed by the :data:`SIZE_FIELDS` its count multiplies: the
    float32 char-CNN (char embedding, filters, highway layers, projection where ``F != P``), both directions'
    LSTM layers (``w_input`` and ``w_recurrent`` ``(P, 4C)``, bias ``(4C,)``, ``w_proj`` ``(C, P)``), and the
    int64 char ids of ``<S>`` and ``</S>`` ``(2, max_characters_per_token)``."""
    E, P, C, L = sizes["char_embedding_dim"], sizes["projection_dim"], sizes["cell_dim"], sizes["n_layers"]
    F = sum(count for _, count in sizes["filters"])
    return {
        ("char_embedding_dim",): 4 * N_CHAR_IDS * E,
        ("char_embedding_dim", "filters"): 4 * sum(count * E * width + count for width, count in sizes["filters"]),
        ("n_highway", "filters"): 4 * sizes["n_highway"] * (2 * F * F + 2 * F),
        ("projection_dim", "filters"): 4 * (F * P + P) if F != P else 0,
        ("projection_dim", "cell_dim", "n_layers"): 4 * 2 * L * (2 * P * 4 * C + 4 * C + C * P),
        CHAR_IDS_PART: 8 * 2 * sizes["max_characters_per_token"],
    }


def _total_bytes(sizes: Dict[str, Any]) -> int:
    """The bytes of a new BiLM's tensors of ``sizes``, all parts (:func:`_tensor_bytes`)."""
    return sum(_tensor_bytes(sizes).values())


@dataclass
class BiLMConfig:
    """Hyperparameters of the biLM (names follow the AllenNLP options file).

    ``cell_clip`` / ``proj_clip`` of ``None`` mean no clipping.
    ``n_characters`` is the size of the shifted id space (262; 261 in bilm-tf
    training options, which describe the same 261 stored embedding rows).
    """

    projection_dim: int = 128
    cell_dim: int = 1024
    n_layers: int = 2
    cell_clip: Optional[float] = 3.0
    proj_clip: Optional[float] = 3.0
    use_skip_connections: bool = True
    char_embedding_dim: int = 16
    filters: List[Tuple[int, int]] = field(default_factory=lambda: list(RELEASED_FILTERS))
    n_highway: int = 1
    activation: str = "relu"
    n_characters: int = 262
    max_characters_per_token: int = DEFAULT_MAX_CHARS

    def __post_init__(self) -> None:
        if isinstance(self.filters, (list, tuple)):  # JSON lists -> tuples; validate() reports anything else
            # validate() refuses anything but pairs of ints: the checker cannot see the length
            self.filters = [tuple(f) if isinstance(f, (list, tuple)) else f for f in self.filters]  # type: ignore[misc]
        self.validate()

    # -- derived sizes ---------------------------------------------------
    @property
    def n_filters(self) -> int:
        """F: the width of the char-CNN output (sum of filter counts)."""
        return sum(count for _, count in self.filters)

    @property
    def output_dim(self) -> int:
        """2P: the width of every output layer."""
        return 2 * self.projection_dim

    @property
    def n_output_layers(self) -> int:
        """L + 1: the layers of a BiLMOutput (the token layer, then one per biLSTM layer)."""
        return self.n_layers + 1

    @property
    def n_parameters(self) -> int:
        """The biLM's parameter count (what ``sum(p.numel() for p in BiLM(config).parameters())`` gives, exactly,
        without building it): the char-CNN (char embedding, filters, highway layers, projection where ``F != P``)
        and both directions' LSTM layers (``w_input`` and ``w_recurrent`` ``(P, 4C)``, bias ``(4C,)``,
        ``w_proj`` ``(C, P)``)."""
        parts = _tensor_bytes(self._sizes())
        return (sum(parts.values()) - parts[CHAR_IDS_PART]) // 4

    @property
    def n_bytes(self) -> int:
        """The bytes of a new BiLM's tensors: its float32 parameters and the int64 char ids of ``<S>`` and
        ``</S>`` ``(2, max_characters_per_token)``."""
        return _total_bytes(self._sizes())

    def _sizes(self) -> Dict[str, Any]:
        return {name: getattr(self, name) for name in SIZE_FIELDS}

    def _check_size(self) -> None:
        """Refuse sizes whose model torch cannot hold (:data:`MOST_TENSOR_BYTES`), naming the sizes that make it
        so: else torch's own error (an overflow from C++), and from ``pretrain`` only once the corpus was tokenized.

        Named are the sizes too large alone: each with every other size at most its default (the other's given
        value where smaller), and with every other size its default, still makes too large a model, so each must
        shrink (``filters`` at most its default may still have more than its default's 2048 filters: ``n_highway``
        too large with ``filters=[(1, 2049)]`` is not too large alone). Where none is (sizes that multiply, each
        of them not too large), those of the part that holds the most bytes (the LSTM's ``n_layers``,
        ``projection_dim`` and ``cell_dim``, the highway's ``n_highway`` and ``filters``, ...) whose value makes
        that part larger than their defaults do (not ``n_layers=1``): any of them may shrink. The largest value
        was named before, which need not be the one too large (``max_characters_per_token=2**56``, 8 EiB of char
        ids that torch can hold, beside ``cell_dim=2**55``)."""
        if self.n_bytes <= MOST_TENSOR_BYTES:
            return
        sizes = self._sizes()
        defaults = {f.name: f.default if f.default_factory is MISSING else f.default_factory()
                    for f in fields(BiLMConfig) if f.name in SIZE_FIELDS}

        def n_bytes_with(name: str, value: Any) -> int:
            return _total_bytes({**defaults, name: value})

        at_most_default = {name: min(sizes[name], defaults[name], key=lambda value: n_bytes_with(name, value))
                           for name in SIZE_FIELDS}
        named = [name for name in SIZE_FIELDS
                 if _total_bytes({**at_most_default, name: sizes[name]}) > MOST_TENSOR_BYTES
                 and n_bytes_with(name, sizes[name]) > MOST_TENSOR_BYTES]
        together: Tuple[str, ...] = ()
        alone: Tuple[str, ...] = ()
        if named:
            said = Errors.E_MODEL_TOO_LARGE_ALONE
            alone = tuple(named) if len(named) > 1 else ()
        else:
            parts = _tensor_bytes(sizes)
            largest = max(parts, key=lambda part: parts[part])
            default_part = _tensor_bytes(defaults)[largest]
            named = [name for name in SIZE_FIELDS if name in largest
                     and _tensor_bytes({**defaults, name: sizes[name]})[largest] > default_part]
            named = named or [name for name in SIZE_FIELDS if name in largest]
            if len(named) > 1:
                said = Errors.E_MODEL_TOO_LARGE_TOGETHER
                together = tuple(named)
            else:
                said = Errors.E_MODEL_TOO_LARGE_WITH_OTHERS
        shown = ", ".join(f"{name}={short_repr(sizes[name])}" for name in named)
        raise InvalidConfigValue(named[0], Errors.E_MODEL_TOO_LARGE.format(
            n_params=big_number(self.n_parameters), size=byte_size(self.n_bytes), most=byte_size(MOST_TENSOR_BYTES),
            named=said.format(sizes=shown)), together, alone)

    # -- validation ------------------------------------------------------
    def validate(self) -> None:
        """Refuse a value no biLM can have (an :class:`InvalidConfigValue` naming it); NumPy integers become ints
        and clips floats (JSON numbers)."""
        for f in fields(self):
            if is_int(getattr(self, f.name)):
                setattr(self, f.name, int(getattr(self, f.name)))
        if isinstance(self.filters, list):
            self.filters = [tuple(int(v) if is_int(v) else v for v in f) if isinstance(f, tuple) else f  # type: ignore[misc]
                            for f in self.filters]
        for name in ("projection_dim", "cell_dim", "n_layers", "char_embedding_dim"):
            value = getattr(self, name)
            if not is_int(value) or value <= 0:
                raise InvalidConfigValue(name, Errors.E_BAD_POSITIVE.format(name=name, value=value))
        # one message for any bad value: 0 said "a positive integer", then 1 "at least 3" (two errors for one field)
        if not is_int(self.max_characters_per_token) or self.max_characters_per_token < 3:
            raise InvalidConfigValue("max_characters_per_token", Errors.E_MAX_CHARS_TOO_SMALL.format(
                value=self.max_characters_per_token))
        if not is_int(self.n_highway) or self.n_highway < 0:
            raise InvalidConfigValue("n_highway", Errors.E_BAD_NON_NEGATIVE.format(name="n_highway", value=self.n_highway))
        for name in ("cell_clip", "proj_clip"):
            value = getattr(self, name)
            if value is None:
                continue
            # any real number (np.float32 was refused, np.float64, a float subclass, was not). Another type than
            # int or float is stored as a float (a NumPy number is no JSON number); an int stays one: the released
            # options.json's "cell_clip": 3 is in the config's JSON, which fingerprints embed's parts
            try:
                finite = is_real(value) and math.isfinite(value)
            except OverflowError:  # an int past a float's range (10**400) raised it: no clip a float holds
                finite = False
            if not finite or value <= 0:  # NaN clips gave NaN vectors
                raise InvalidConfigValue(name, Errors.E_BAD_CLIP.format(name=name, value=short_repr(value)))
            if type(value) not in (int, float):
                setattr(self, name, float(value))
        if not isinstance(self.use_skip_connections, bool):
            raise InvalidConfigValue("use_skip_connections", Errors.E_BAD_BOOL.format(
                name="use_skip_connections", value=self.use_skip_connections))
        if self.activation not in ("relu", "tanh"):
            raise InvalidConfigValue("activation", Errors.E_BAD_ACTIVATION.format(value=self.activation))
        if not is_int(self.n_characters) or self.n_characters not in (N_CHAR_IDS, N_CHAR_IDS + 1):
            found = short_repr(self.n_characters)
            if not is_int(self.n_characters):  # "'262'" alone reads as the number: its type said
                kind = VALUE_KINDS.get(type(self.n_characters), with_article(type(self.n_characters).__name__))
                what = "a whole number" if is_real(self.n_characters) else "a number"
                found = Errors.E_BAD_N_CHARACTERS_TYPE.format(value=found, kind=kind, what=what)
            raise InvalidConfigValue("n_characters", Errors.E_BAD_N_CHARACTERS.format(found=found))
        ok = isinstance(self.filters, list) and len(self.filters) > 0
        ok = ok and all(
            isinstance(f, tuple) and len(f) == 2 and all(is_int(v) and v > 0 for v in f) for f in self.filters
        )
        if not ok:
            raise InvalidConfigValue("filters", Errors.E_BAD_FILTERS.format(value=self.filters))
        for width, _ in self.filters:
            if width > self.max_characters_per_token:
                raise InvalidConfigValue("filters", Errors.E_FILTER_TOO_WIDE.format(
                    width=width, max_chars=self.max_characters_per_token))
        self._check_size()  # every size is a positive int by now

    # -- constructors ----------------------------------------------------
    @classmethod
    def preset(cls, name: str) -> "BiLMConfig":
        """The sizes of a released model: ``"small"``, ``"medium"`` or ``"original"``."""
        if name not in _PRESETS:
            raise ValueError(Errors.E_UNKNOWN_PRESET.format(name=name, choices=", ".join(_PRESETS)))
        cell, proj, n_highway = _PRESETS[name]
        return cls(projection_dim=proj, cell_dim=cell, n_highway=n_highway)

    @classmethod
    def from_allennlp_options(
        cls, options: Union[str, Path, Dict[str, Any]], weight_file: Optional[Union[str, Path]] = None,
        source: Optional[str] = None,
    ) -> "BiLMConfig":
        """Read an AllenNLP/bilm-tf ``options.json`` (a path or the parsed dict); ``weight_file``, the
        ``.hdf5`` read with it, is only looked into for an error about options that lack ``lstm.n_layers``, and
        named in the fix of a bad value (its own options.json); ``source`` names a dict's file in errors (default:
        "the given dict").

        Unknown keys (training options) are ignored; a missing clip means no
        clipping; a missing ``n_highway`` means none. A missing ``lstm.use_skip_connections``
        is an error, as it is to AllenNLP and bilm-tf's inference model: a default would guess
        the model (every released one has skip connections); so is a missing ``lstm.n_layers`` or
        ``char_cnn.activation`` (relu for a tanh-trained model would compute another model).
        """
        source = source or "the given dict"
        if not isinstance(options, dict):
            source = str(options)
            refuse_empty_path(options, Errors.E_PATH_EMPTY_OPTIONS)  # Path(""): the current directory
            if not Path(options).exists():
                raise missing_path_error(options, Errors.E_OPTIONS_FILE_MISSING.format(path=options))
            try:
                raw = read_options_bytes(options)
            except FileNotFoundError as err:  # removed since: missing, as above
                raise missing_path_error(options, Errors.E_OPTIONS_FILE_MISSING.format(path=options)) from err
            if is_hdf5(raw):  # else "'utf-8' codec can't decode byte 0x89": the arguments swapped
                raise ValueError(Errors.E_OPTIONS_IS_HDF5.format(path=options))
            # no JSON, no UTF-8, nested past the recursion limit; no object: an_object below says it in its words
            options = read_json_file(options, Errors.E_OPTIONS_NOT_JSON, raw=raw)

        from .native_io import FORMAT  # native_io imports this module

        if isinstance(options, dict) and options.get("format") == FORMAT:  # else "lack 'lstm' at the top level"
            raise ValueError(Errors.E_OPTIONS_IS_NATIVE_CONFIG.format(source=source, format=FORMAT))

        def need(section: Dict[str, Any], key: str, where: str) -> Any:  # any JSON value
            if key not in section:  # "add 'lstm.dim' there" named a dotted path, no key of the file
                parents = where.split(".")[:-1]
                place = (Errors.E_OPTIONS_KEY_IN_NESTED.format(inner=parents[1], section=parents[0])
                         if len(parents) == 2 else Errors.E_OPTIONS_KEY_IN_SECTION.format(section=parents[0])
                         if parents else Errors.E_OPTIONS_KEY_AT_TOP)
                raise ValueError(Errors.E_OPTIONS_MISSING_KEY.format(source=source, name=key, place=place))
            return section[key]

        original = "" if weight_file is None else Errors.E_OPTIONS_BAD_VALUE_ORIGINAL.format(weight_file=weight_file)

        def an_object(value: Any, what: str, shape: str) -> Dict[str, Any]:  # not "lack 'lstm'" for [1]
            if not isinstance(value, dict):
                raise ValueError(Errors.E_OPTIONS_NOT_OBJECT.format(
                    source=source, found=short_repr(value), what=what, shape=shape, original=original))
            return value

        options = an_object(options, "the top level", '{"lstm": {...}, "char_cnn": {...}}')
        lstm = an_object(need(options, "lstm", "lstm"), "'lstm'", '{"dim": ..., "projection_dim": ..., ...}')
        cnn = an_object(need(options, "char_cnn", "char_cnn"), "'char_cnn'", '{"embedding": {...}, "filters": ..., ...}')
        embedding = an_object(need(cnn, "embedding", "char_cnn.embedding"), "'char_cnn.embedding'", '{"dim": ...}')
        if "n_layers" not in lstm:  # not bilm-tf's default of 1: a guess
            raise ValueError(Errors.E_OPTIONS_NO_N_LAYERS.format(source=source, fix=n_layers_fix(weight_file)))
        if "use_skip_connections" not in lstm:
            raise ValueError(Errors.E_OPTIONS_NO_SKIP_KEY.format(source=source))
        if "activation" not in cnn:  # relu would be a guess (AllenNLP: KeyError)
            raise ValueError(Errors.E_OPTIONS_NO_ACTIVATION.format(source=source))
        values = dict(
            projection_dim=need(lstm, "projection_dim", "lstm.projection_dim"),
            cell_dim=need(lstm, "dim", "lstm.dim"),
            n_layers=need(lstm, "n_layers", "lstm.n_layers"),
            cell_clip=none_or_zero(lstm.get("cell_clip"), None),
            proj_clip=none_or_zero(lstm.get("proj_clip"), None),
            use_skip_connections=lstm["use_skip_connections"],
            char_embedding_dim=need(embedding, "dim", "char_cnn.embedding.dim"),
            filters=need(cnn, "filters", "char_cnn.filters"),
            n_highway=none_or_zero(cnn.get("n_highway"), 0),
            activation=cnn["activation"],
            n_characters=cnn.get("n_characters", 262),
            max_characters_per_token=cnn.get("max_characters_per_token", DEFAULT_MAX_CHARS),
        )
        try:
            return cls(**values)
        except InvalidConfigValue as err:  # said in the options' words: the file and its key, not the field's name
            if err.together or err.alone:  # "Fix lstm.projection_dim" after two or three named said otherwise
                said = Errors.E_OPTIONS_BAD_VALUES if err.together else Errors.E_OPTIONS_BAD_VALUES_EACH
                raise ValueError(said.format(
                    source=source, keys=", ".join(OPTIONS_KEYS[name] for name in err.together or err.alone),
                    error=err, original=original)) from err
            raise ValueError(Errors.E_OPTIONS_BAD_VALUE.format(
                source=source, key=OPTIONS_KEYS[err.field], field=err.field, error=err, original=original)) from err

    def to_allennlp_options(self) -> Dict[str, Any]:
        """The options dict in the released layout (inverse of ``from_allennlp_options``)."""
        lstm: Dict[str, Any] = {
            "dim": self.cell_dim,
            "projection_dim": self.projection_dim,
            "n_layers": self.n_layers,
            "use_skip_connections": self.use_skip_connections,
            # null, not absent, for no clipping: AllenNLP reads both keys unconditionally (KeyError otherwise).
            "cell_clip": self.cell_clip,
            "proj_clip": self.proj_clip,
        }
        return {
            "lstm": lstm,
            "char_cnn": {
                "activation": self.activation,
                "filters": [list(f) for f in self.filters],
                "n_highway": self.n_highway,
                "embedding": {"dim": self.char_embedding_dim},
                "n_characters": 262,
                "max_characters_per_token": self.max_characters_per_token,
            },
        }

    def to_dict(self) -> Dict[str, Any]:
        data = asdict(self)
        data["filters"] = [list(f) for f in self.filters]
        return data

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "BiLMConfig":
        known = [f.name for f in fields(cls)]
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise UnknownConfigFields(", ".join(map(repr, unknown)), ", ".join(known))
        return cls(**data)
