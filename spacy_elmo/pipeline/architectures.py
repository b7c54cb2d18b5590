"""Registered architectures (entry points ``spacy_architectures``).

* ``spacy_elmo.ElmoBiLM.v2``: the model of the ``elmo`` component
  (``List[Doc] -> List[Floats3d (L + 1, n, 2P)]``).
* ``spacy_elmo.ElmoBiLM.v1``: v2 with ``layer_cache_mb``, the model block of pipelines saved
  before the layer cache became the component's training-run setting (kept so they load).
* ``spacy_elmo.ElmoListener.v1``: listener -> ScalarMix -> ELMo dropout
  (``List[Doc] -> List[Floats2d (n, 2P)]``); each use owns its mix.
* ``spacy_elmo.ElmoTok2Vec.v1``: ``[x_k; ELMo_k]`` (a MultiHashEmbed next to
  the mix, the paper's recipe), a Maxout down to the encoder width, then the
  encoder (``List[Doc] -> List[Floats2d (n, width)]``).

``spacy_elmo.ElmoBiLM.v2`` is also registered here, at import (``spacy_elmo.pipeline`` imports this
module): an installed copy whose entry points predate it still finds it.
"""

import warnings
from typing import List, Optional, Sequence

from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import Maxout, Model, chain, concatenate, with_array
from thinc.types import Floats2d, Floats3d

from ..errors import Errors, Warnings
from .bilm_layer import DEFAULT_LEARN_RATE_SCALE, build_elmo_bilm, name_owner, own_bilm_layer, set_layer_cache_mb
from .callers import user_stacklevel
from .listener import ElmoListener as ElmoListenerModel
from .scalar_mix import building, elmo_dropout, is_setting, mix_layer

_V1_LAYER_CACHE_WARNED = False  # W_ELMO_V1_LAYER_CACHE: once per process


@registry.architectures("spacy_elmo.ElmoBiLM.v2")
def ElmoBiLM_v2(
    batch_tokens: int = 4096,
    max_window: int = 128,
    backend: str = "auto",
    cache_size: int = 50000,
) -> Model[List[Doc], List[Floats3d]]:
    """Run-time settings only: the biLM's sizes come with its weights (config.json / options.json).

    batch_tokens: padded tokens (rows x longest row) per biLM call; max_window:
    the longest row, in words. A doc without sentence boundaries is read in consecutive windows of
    max_window words, and so is a sentence longer than that (warned once per biLM): each piece is read
    on its own from the biLM's start state, with no overlap, so the vectors of words near a cut lack the
    context across it. Raise it to read longer sentences whole: a row longer than batch_tokens runs in a
    biLM call of its own, so memory and time per call grow with it past that bound;
    backend: "auto" | "fused" | "reference"; cache_size: char-CNN cache entries.
    The cache of output layers per sentence is no model setting: it is the component's
    ``layer_cache_mb`` (``[initialize.components.elmo]``), so a saved pipeline never carries it.
    """
    return build_elmo_bilm(
        batch_tokens=batch_tokens,
        max_window=max_window,
        backend=backend,
        cache_size=cache_size,
    )


def ElmoBiLM(
    batch_tokens: int = 4096,
    max_window: int = 128,
    backend: str = "auto",
    cache_size: int = 50000,
    layer_cache_mb: int = 0,
) -> Model[List[Doc], List[Floats3d]]:
    """``spacy_elmo.ElmoBiLM.v1``: :func:`ElmoBiLM_v2` whose layer cache starts at ``layer_cache_mb``
    (MB, 0 = off), as every pipeline saved before v2 has in its model block (spaCy writes the default).
    Checked as the ``elmo`` component's ``layer_cache_mb`` (the name a v1 model cannot know); > 0 warns
    once per process that the cache is kept at inference too."""
    global _V1_LAYER_CACHE_WARNED
    model = ElmoBiLM_v2(batch_tokens=batch_tokens, max_window=max_window, backend=backend, cache_size=cache_size)
    set_layer_cache_mb(model, layer_cache_mb, "elmo")
    if layer_cache_mb > 0 and not _V1_LAYER_CACHE_WARNED:
        _V1_LAYER_CACHE_WARNED = True
        warnings.warn(Warnings.W_ELMO_V1_LAYER_CACHE.format(value=layer_cache_mb), UserWarning, stacklevel=user_stacklevel())
    return model


def ElmoListener(
    upstream: str = "*",
    width: Optional[int] = None,
    dropout: float = 0.5,
    mix_l2: float = 0.0,
    initial_weights: Optional[Sequence[float]] = None,
    trainable_mix: bool = True,
    layer_norm: bool = False,
    bilm: Optional[Model[List[Doc], List[Floats3d]]] = None,
    frozen: bool = True,
    learn_rate_scale: float = DEFAULT_LEARN_RATE_SCALE,
) -> Model[List[Doc], List[Floats2d]]:
    """width: 2 x projection_dim of the upstream biLM, or None to take it from the weights.

    dropout: ELMo's dropout after the mix (the paper's 0.5; not touched by
    ``[training] dropout``); mix_l2: lambda of ``lambda * ||w||^2``;
    layer_norm: normalise each biLM layer of each doc (one mean/variance) before the mix.
    bilm: None (listen to the ``upstream`` component), or a ``spacy_elmo.ElmoBiLM.v2``
    model that this component owns instead (``nlp.replace_listeners`` writes it; its
    weights come only with the component's saved model); frozen: with ``bilm``,
    keep it out of this component's training; learn_rate_scale: with ``bilm`` and
    ``frozen = false``, its learning rate over the optimizer's (``nlp.replace_listeners``
    writes the ``elmo`` component's, as it writes ``frozen``); above 0.
    """
    if width is not None and not is_setting(width, lambda v: v >= 1, whole=True):
        of_component, component = building()
        raise ValueError(Errors.E_LISTENER_WIDTH_SETTING.format(of_component=of_component, component=component, value=width))
    if not is_setting(learn_rate_scale, lambda v: v > 0):
        of_component, component = building()
        raise ValueError(
            Errors.E_LISTENER_LEARN_RATE_SCALE.format(of_component=of_component, component=component, value=learn_rate_scale)
        )
    width = None if width is None else int(width)
    if bilm is not None:
        of_component, component = building()
        name_owner(bilm, component if of_component else None)  # its block's place in the config: not known here
        listener = own_bilm_layer(bilm, frozen, learn_rate_scale)
    else:
        listener = ElmoListenerModel(upstream_name=upstream, width=width)
    mix = mix_layer(None, initial_weights, trainable_mix, mix_l2, layer_norm, l2_key="mix_l2", block="spacy_elmo.ElmoListener.v1")
    model: Model[List[Doc], List[Floats2d]] = chain(listener, mix, elmo_dropout(dropout))
    if width is not None:
        model.set_dim("nO", width)
    return model


def ElmoTok2Vec(
    embed: Model[List[Doc], List[Floats2d]],
    elmo: Model[List[Doc], List[Floats2d]],
    encode: Model[List[Floats2d], List[Floats2d]],
) -> Model[List[Doc], List[Floats2d]]:
    """``chain(concatenate(embed, elmo), Maxout(width), encode)``; width is the encoder's."""
    width = encode.maybe_get_dim("nO") or encode.layers[0].get_dim("nO")
    reduce: Model[List[Floats2d], List[Floats2d]] = with_array(Maxout(nO=width, nP=3, normalize=True, dropout=0.0))
    model: Model[List[Doc], List[Floats2d]] = chain(concatenate(embed, elmo), reduce, encode)
    model.set_dim("nO", width)
    model.name = "elmo_tok2vec"
    return model
