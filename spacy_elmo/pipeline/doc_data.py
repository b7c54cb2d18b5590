"""Per-doc ELMo data: extensions, getters and user hooks.

What a doc keeps (plain numpy on the CPU, never torch tensors, so that
``doc.to_bytes()``, ``DocBin(store_user_data=True)`` and ``nlp.pipe(n_process=2)``
carry it through msgpack):

* ``doc._.elmo``: ``(L + 1, n, 2P)`` (store "all") or ``(n, 2P)`` (store "mix"),
  float16 by default; None when nothing is stored.
* ``doc._.elmo_mix``: ``(L + 1,)`` float32, the component's fixed layer weights
  (``softmax(w)`` of its ``mix`` setting, summing to 1; no gamma) that turn all
  layers into one vector per token.
* ``doc._.elmo_idx``: ``(n,)`` int64, the character offset of each token the
  rows belong to. A doc retokenized after the component (``merge_entities``,
  ``doc.retokenize()``) keeps its rows; readers map each current token to the
  rows of the tokens it covers (the mean of a merged token's rows, whitespace
  tokens' left out as a span's vector leaves them out; a split
  piece gets the row of the token it came from).

``token._.elmo_vector`` / ``span._.elmo_vector`` (``(2P,)`` float32) are
computed from these; the ``vector`` / ``has_vector`` / ``similarity`` user
hooks use them (module-level functions, so that docs stay picklable).
"""

import warnings
from typing import Any, Callable, Dict, Optional, Tuple, Union

import numpy
import torch
from spacy.attrs import IDX, IS_SPACE, NAMES, ORTH
from spacy.lexeme import Lexeme
from spacy.tokens import Doc, Span, Token

from ..errors import Errors, Warnings, with_article
from .callers import user_stacklevel

ELMO_ATTR = "elmo"
MIX_ATTR = "elmo_mix"
IDX_ATTR = "elmo_idx"
_ON_DOC: Any = object()  # a default: read from the doc's extension


def install_extensions() -> None:
    """Register the extensions once (idempotent)."""
    if not Doc.has_extension(ELMO_ATTR):
        Doc.set_extension(ELMO_ATTR, default=None)
    if not Doc.has_extension(MIX_ATTR):
        Doc.set_extension(MIX_ATTR, default=None)
    if not Doc.has_extension(IDX_ATTR):
        Doc.set_extension(IDX_ATTR, default=None)
    if not Token.has_extension("elmo_vector"):
        Token.set_extension("elmo_vector", getter=token_vector)
    if not Span.has_extension("elmo_vector"):
        Span.set_extension("elmo_vector", getter=span_vector)


def _stored(doc: Doc) -> Optional[numpy.ndarray]:
    """``doc._.elmo``. Registers the extensions first when no ``elmo`` component or
    ``install_hooks`` has in this process: the hooks of an unpickled doc call this."""
    if not Doc.has_extension(ELMO_ATTR):
        install_extensions()
    return getattr(doc._, ELMO_ATTR, None)


def set_doc_data(doc: Doc, layers: numpy.ndarray, mix: numpy.ndarray, store: str, dtype: str) -> None:
    """layers: ``(L + 1, n, 2P)`` float32 numpy; mix: ``(L + 1,)``; store: all | mix | none."""
    if store == "none":
        setattr(doc._, ELMO_ATTR, None)
        setattr(doc._, MIX_ATTR, None)
        setattr(doc._, IDX_ATTR, None)
        return
    data = layers if store == "all" else numpy.tensordot(mix, layers, axes=(0, 0))
    # A copy: never keep a view of a batch buffer alive on a doc.
    setattr(doc._, ELMO_ATTR, stored_copy(data, dtype))
    setattr(doc._, MIX_ATTR, numpy.asarray(mix, dtype="float32"))
    setattr(doc._, IDX_ATTR, doc.to_array(IDX).astype("int64"))


def stored_copy(data: numpy.ndarray, dtype: str) -> numpy.ndarray:
    """A new numpy array of ``data`` in ``dtype``. float32 -> float16 goes through torch's vectorised
    conversion, about nine times faster than numpy's (which was a quarter of the component's time
    outside the biLM) and the same float16 bits for every float32 (round to nearest even; tested),
    but for a signalling NaN, which no arithmetic produces: it comes out quiet."""
    if numpy.dtype(dtype) == numpy.float16 and data.dtype == numpy.float32:
        if not (data.flags.c_contiguous and data.flags.writeable):  # torch.from_numpy needs both
            data = numpy.array(data, order="C")
        out = numpy.empty(data.shape, dtype=numpy.float16)
        torch.from_numpy(out).copy_(torch.from_numpy(data))
        return out
    return numpy.array(data, dtype=dtype, copy=True)


def source_rows(
    doc: Doc, start: int, end: int, n_rows: int, starts: Any = _ON_DOC
) -> Optional[Tuple[numpy.ndarray, numpy.ndarray, numpy.ndarray]]:
    """None when tokens ``start:end`` are the ones their rows were computed for; else (the doc was
    retokenized) the row ranges ``lo[i]:hi[i]`` that each of them covers, and ``own`` ``(n_rows,)`` bool: False for
    the rows of whitespace tokens that a merged token spans (``"New  York"``), which its mean leaves out as a span's
    vector does (:func:`mean_rows`). starts: the rows' character offsets (``doc._.elmo_idx`` unless given)."""
    if starts is _ON_DOC:
        starts = getattr(doc._, IDX_ATTR, None) if Doc.has_extension(IDX_ATTR) else None
    if starts is None or len(starts) != n_rows:
        if n_rows == len(doc):
            return None  # no offsets to check (data set by hand): trust the token count
        raise ValueError(Errors.E_ELMO_TOKENS_CHANGED.format(rows=n_rows, n_tokens=len(doc)))
    starts = numpy.asarray(starts)
    # Tokens are contiguous: tokens start..end-1 are unchanged when they and the token after them
    # start where they did.
    stop = min(end + 1, len(doc))
    if start == 0 and stop == len(doc):  # the whole doc (a listener's read): one call, no loop over tokens
        idx = doc.to_array(IDX).astype("int64")
    else:
        idx = numpy.array([doc[i].idx for i in range(start, stop)], dtype="int64")
    if n_rows == len(doc) and numpy.array_equal(idx, starts[start:stop]):
        return None
    idx = idx[: end - start]
    ends = idx + numpy.array([len(doc[i]) for i in range(start, end)], dtype="int64")
    lo = numpy.maximum(numpy.searchsorted(starts, idx, "right") - 1, 0)
    hi = numpy.maximum(lo + 1, numpy.searchsorted(starts, ends, "left"))
    own = numpy.ones((n_rows,), dtype=bool)
    rule = _is_space_rule(doc.vocab)  # looked up once, and each distinct row text decided once
    seen: Dict[str, bool] = {}
    for i in numpy.flatnonzero(hi - lo > 1):  # merged tokens (few): which of their rows were whitespace tokens'
        text, first = doc[start + int(i)].text, int(idx[i])
        for row in range(int(lo[i]), int(hi[i])):
            offset = int(starts[row]) - first
            if 0 <= offset < len(text):  # else the row's token began before this one: counted
                following = int(starts[row + 1]) - first if row + 1 < n_rows else len(text)
                piece = text[offset : max(offset + 1, following)]
                if piece not in seen:
                    seen[piece] = _row_is_space(piece, rule)
                own[row] = not seen[piece]
    return lo, hi, own


def _row_is_space(text: str, rule: Callable[[str], Any]) -> bool:
    """Whether a row's token was whitespace, from ``text``: its text and the trailing whitespace (``" "`` or none)
    up to the next row's token, the whole token's text decided by ``rule`` (:func:`_is_space_rule` of the doc's
    vocab), never its first character alone (a word token ``" York"`` is counted). With ``str.isspace`` the
    trailing space changes nothing; a language's own rule is asked about the text without it too."""
    if rule(text):
        return True
    return len(text) > 1 and text.endswith(" ") and bool(rule(text[:-1]))


def _is_space_rule(vocab: Any) -> Callable[[str], Any]:
    """spaCy's ``is_space`` rule of ``vocab``'s language: its own getter (``vocab.lex_attr_getters[IS_SPACE]``, which
    set the flag ``token.is_space`` reads), else ``str.isspace``. The rule that left a token out of the biLM's input
    (a zero row: ``batching``) and that :func:`_has_own_vector` reads."""
    return vocab.lex_attr_getters.get(IS_SPACE, str.isspace)


def _counted(a: int, b: int, own: Optional[numpy.ndarray]) -> Any:
    """The rows of ``a:b`` that their token's mean counts: those ``own`` marks (not whitespace), all of them where
    it marks none (a merged token of whitespace only: zero rows) or ``own`` is None."""
    if own is None or own[a:b].all() or not own[a:b].any():
        return slice(a, b)
    return numpy.flatnonzero(own[a:b]) + a


def mean_rows(
    data: numpy.ndarray, lo: numpy.ndarray, hi: numpy.ndarray, own: Optional[numpy.ndarray] = None
) -> numpy.ndarray:
    """The mean of rows ``lo[i]:hi[i]`` (on axis -2) that ``own`` marks (:func:`_counted`) for each i, stacked on
    axis -2 (float32): a merged token's vector leaves out the zero rows of the whitespace tokens it spans, as a
    span's vector leaves out its whitespace tokens."""
    if len(lo) == 0:
        return numpy.zeros(data.shape[:-2] + (0, data.shape[-1]), dtype="float32")
    rows = [_counted(int(a), int(b), own) for a, b in zip(lo, hi)]
    return numpy.stack([data[..., r, :].astype("float32").mean(-2) for r in rows], axis=-2)


def mean_rows_grad(
    d_out: numpy.ndarray, lo: numpy.ndarray, hi: numpy.ndarray, n_rows: int, own: Optional[numpy.ndarray] = None
) -> numpy.ndarray:
    """The gradient of :func:`mean_rows` ``(..., len(lo), W)`` -> ``(..., n_rows, W)`` float32: each row it counted
    for i gets ``d_out[..., i, :]`` over their count, from every i whose range holds it (a row split into pieces
    sums theirs); a row it left out (whitespace in a merged token) nothing from that i."""
    d_rows = numpy.zeros(d_out.shape[:-2] + (n_rows, d_out.shape[-1]), dtype="float32")
    for i, (a, b) in enumerate(zip(lo, hi)):
        rows = _counted(int(a), int(b), own)
        count = (b - a) if isinstance(rows, slice) else len(rows)
        d_rows[..., rows, :] += d_out[..., i : i + 1, :].astype("float32") / count
    return d_rows


def aligned_layers(doc: Doc, data: Any = _ON_DOC, starts: Any = _ON_DOC) -> Optional[numpy.ndarray]:
    """``doc._.elmo`` with one row per current token (the stored array itself when none changed); or
    ``data`` stored for ``doc`` elsewhere, its rows at character offsets ``starts``."""
    if data is _ON_DOC:
        data = _stored(doc)
    if data is None:
        return None
    ranges = source_rows(doc, 0, len(doc), data.shape[-2], starts)
    return data if ranges is None else mean_rows(data, *ranges)


def _mixed(doc: Doc, data: numpy.ndarray) -> numpy.ndarray:
    """``(..., n, 2P)`` stored rows -> ``(n, 2P)`` float32 (the doc's mix over layers)."""
    if data.ndim == 2:
        return data.astype("float32")
    mix = getattr(doc._, MIX_ATTR, None)
    if mix is None:
        mix = numpy.full((data.shape[0],), 1.0 / data.shape[0], dtype="float32")
    return numpy.tensordot(mix, data.astype("float32"), axes=(0, 0))


def _rows(doc: Doc, start: int, end: int) -> Optional[numpy.ndarray]:
    data = _stored(doc)
    if data is None:
        return None
    ranges = source_rows(doc, start, end, data.shape[-2])
    if ranges is None:
        return _mixed(doc, data[..., start:end, :])
    lo, hi, own = ranges
    if len(lo) == 0:
        return numpy.zeros((0, data.shape[-1]), dtype="float32")
    first, last = int(lo.min()), int(hi.max())
    return mean_rows(_mixed(doc, data[..., first:last, :]), lo - first, hi - first, own[first:last])


def token_vector(token: Token) -> Optional[numpy.ndarray]:
    rows = _rows(token.doc, token.i, token.i + 1)
    return None if rows is None else rows[0]


def _has_own_vector(token: Token) -> bool:
    """Whether ``token`` has a vector of its own: not whitespace (``is_space``, :func:`_is_space_rule`'s rule; its
    vector is all zeros, as spaCy's own
    ``has_vector`` says of a token without a vector). A span's vector averages these tokens' alone."""
    return not token.is_space


def span_vector(span: Union[Span, Doc]) -> Optional[numpy.ndarray]:
    """Mean of the vectors of the tokens with their own (:func:`_has_own_vector`), ``(width,)`` float32; a Doc
    counts as its full span. Whitespace tokens' zero rows are left out: extra spaces or newlines leave the
    vector as it is (they diluted it). Zeros for a span of whitespace only; None without ELMo data or tokens."""
    doc = span if isinstance(span, Doc) else span.doc
    start, end = (0, len(doc)) if isinstance(span, Doc) else (span.start, span.end)
    rows = _rows(doc, start, end)
    if rows is None or rows.shape[0] == 0:
        return None
    own = numpy.fromiter((_has_own_vector(doc[i]) for i in range(start, end)), dtype=bool, count=end - start)
    if not own.any():
        return numpy.zeros((rows.shape[-1],), dtype="float32")
    return rows[own].mean(0)


# -- user hooks (module level: picklable) -----------------------------------
def _fallback_width(obj) -> int:
    doc = obj if isinstance(obj, Doc) else obj.doc
    data = _stored(doc)
    return 0 if data is None else int(data.shape[-1])


def hook_token_vector(token: Token) -> numpy.ndarray:
    v = token_vector(token)
    return numpy.zeros((_fallback_width(token),), dtype="float32") if v is None else v


def hook_span_vector(span: Union[Span, Doc]) -> numpy.ndarray:
    v = span_vector(span)
    return numpy.zeros((_fallback_width(span),), dtype="float32") if v is None else v


def hook_has_vector(obj) -> bool:
    """Whether the token / span / doc has an ELMo vector: ELMo data stored, and (as spaCy's own ``has_vector``
    for a token without a vector) not whitespace only: a whitespace token's vector is all zeros."""
    doc = obj if isinstance(obj, Doc) else obj.doc
    if _stored(doc) is None:
        return False
    return _has_own_vector(obj) if isinstance(obj, Token) else any(_has_own_vector(token) for token in obj)


def _vec(obj) -> Optional[numpy.ndarray]:
    if isinstance(obj, Token):
        return token_vector(obj)
    if isinstance(obj, (Span, Doc)):
        return span_vector(obj)
    return None


def hook_similarity(obj, other) -> float:
    """Cosine of the ELMo vectors. Where either has none (a ``Lexeme``, a word without context; or a Token, Span or Doc
    of a doc the elmo component did not annotate, ``doc._.elmo`` None): 1.0 for the same words, as spaCy's own, else
    0.0 with a warning (:func:`_no_elmo_similarity`). Where either is empty or whitespace-only (no or a zero ELMo
    vector): 1.0 for the same words, else 0.0 with W_ELMO_SIMILARITY_EMPTY (spaCy's own: W008). ELMo vectors of two
    widths (docs annotated with other weights) are an error: their cosine means nothing. ``other`` not a Token,
    Span, Doc or Lexeme: a TypeError (spaCy's own raises too)."""
    if not isinstance(other, (Token, Span, Doc, Lexeme)):
        a_type = with_article(type(other).__name__)
        raise TypeError(Errors.E_ELMO_SIMILARITY_TYPE.format(obj=type(obj).__name__, a_type=a_type))
    mine, theirs = _annotated(obj), _annotated(other)  # a Lexeme: not annotated
    if not mine or not theirs:
        return _no_elmo_similarity(obj, other, mine, theirs)
    a, b = _vec(obj), _vec(other)
    mine_empty, theirs_empty = a is None or not numpy.any(a), b is None or not numpy.any(b)
    if mine_empty or theirs_empty:  # empty / whitespace-only: no ELMo vector
        # spaCy's own: 1.0 for the same words, else 0.0 with W008
        if _same_words(obj, other):
            return 1.0
        which = "both are" if mine_empty and theirs_empty else "this one is" if mine_empty else "the other is"
        message = Warnings.W_ELMO_SIMILARITY_EMPTY.format(
            obj=type(obj).__name__, other=type(other).__name__, which=which
        )
        warnings.warn(message, UserWarning, stacklevel=user_stacklevel())
        return 0.0
    assert a is not None and b is not None  # neither empty
    if a.shape != b.shape:
        raise ValueError(Errors.E_ELMO_SIMILARITY_WIDTHS.format(width=a.shape[-1], other=b.shape[-1]))
    return _cosine(a, b)


def _annotated(obj) -> bool:
    """Whether ``obj`` is a Token, Span or Doc of a doc with ELMo data (``doc._.elmo``)."""
    if isinstance(obj, Doc):
        return _stored(obj) is not None
    return isinstance(obj, (Token, Span)) and _stored(obj.doc) is not None


def _cosine(a: numpy.ndarray, b: numpy.ndarray) -> float:
    """The cosine of two nonzero vectors of one width (:func:`hook_similarity` checked both). 0.0 where a norm is 0.0
    all the same: a float32 vector of tiny values (all below about 2e-23, as in data set by hand) is nonzero, but
    its squares underflow (``numpy.linalg.norm`` sums them in float32), and the division would give inf or nan."""
    na, nb = float(numpy.linalg.norm(a)), float(numpy.linalg.norm(b))
    if na == 0.0 or nb == 0.0:
        return 0.0
    return float(numpy.dot(a, b) / (na * nb))


def _words(obj) -> list:
    """The tokens of a Token / Span / Doc (a Lexeme is its own one word)."""
    return [obj] if isinstance(obj, (Token, Lexeme)) else list(obj)


def _same_words(obj, other) -> bool:
    """Whether ``obj`` and ``other`` (Token / Span / Doc / Lexeme) are the same words token by token, by the vocab's
    vectors ``attr`` (ORTH by default), as spaCy's own similarity() checks before looking at vectors."""
    doc = obj if isinstance(obj, Doc) else obj.doc
    attr = NAMES[getattr(doc.vocab.vectors, "attr", ORTH)].lower()  # "orth", "norm", "lower", ...
    mine, theirs = _words(obj), _words(other)
    return len(mine) == len(theirs) and all(getattr(x, attr) == getattr(y, attr) for x, y in zip(mine, theirs))


def _no_elmo_similarity(obj, other, mine: bool, theirs: bool) -> float:
    """``obj.similarity(other)`` where one of the two has no ELMo vector: ``other`` a ``Lexeme`` (a word without
    context), or a Token / Span / Doc of a doc without ELMo data (another pipeline's, one read back without
    ``doc._.elmo``, ``store`` "none"), or ``obj`` itself such one (hooks installed on a doc without ELMo data).
    1.0 for the same words token by token (the vocab's vectors ``attr``, ORTH by default), as spaCy's own; else 0.0
    with a warning (W_ELMO_SIMILARITY_LEXEME, W_ELMO_SIMILARITY_NO_ELMO): an ELMo vector cannot be compared with a
    static vector, whatever its width (another space: a cosine of the two would mean nothing, and of another width
    spaCy's own gives 0.0 too), and nothing can be said without vectors (spaCy's own warns W008). ``mine`` and
    ``theirs``: whether ``obj`` and ``other`` have ELMo data (:func:`_annotated`, asked once by the caller)."""
    if _same_words(obj, other):
        return 1.0
    if isinstance(other, Lexeme):
        message = Warnings.W_ELMO_SIMILARITY_LEXEME.format(obj=type(obj).__name__, word=other.text)
    else:
        if not mine:
            which = "neither has ELMo data" if not theirs else f"this {type(obj).__name__} has no ELMo data"
        else:
            which = f"the other {type(other).__name__} has no ELMo data"
        message = Warnings.W_ELMO_SIMILARITY_NO_ELMO.format(
            obj=type(obj).__name__, other=type(other).__name__, which=which
        )
    warnings.warn(message, UserWarning, stacklevel=user_stacklevel())
    return 0.0


def hook_vector_norm(obj) -> float:
    v = _vec(obj)
    return 0.0 if v is None else float(numpy.linalg.norm(v))


def install_hooks(doc: Doc) -> None:
    """Make ``vector`` / ``has_vector`` / ``vector_norm`` / ``similarity`` use ELMo.

    Hooks are not part of ``doc.to_bytes()``; call this again on docs read back
    from bytes or a DocBin (their ``doc._.elmo`` survives). Registers the
    extensions, so that a process without an ``elmo`` component reads them.
    """
    install_extensions()
    doc.user_hooks["vector"] = hook_span_vector
    doc.user_hooks["has_vector"] = hook_has_vector
    doc.user_hooks["vector_norm"] = hook_vector_norm
    doc.user_hooks["similarity"] = hook_similarity
    doc.user_span_hooks["vector"] = hook_span_vector
    doc.user_span_hooks["has_vector"] = hook_has_vector
    # No span "vector_norm" hook: spaCy 3.8's Span.vector_norm calls the "vector" hook where one is given
    # (returning the vector); without it, it takes the norm of span.vector, which the hook above gives.
    doc.user_span_hooks["similarity"] = hook_similarity
    doc.user_token_hooks["vector"] = hook_token_vector
    doc.user_token_hooks["has_vector"] = hook_has_vector
    doc.user_token_hooks["vector_norm"] = hook_vector_norm
    doc.user_token_hooks["similarity"] = hook_similarity
