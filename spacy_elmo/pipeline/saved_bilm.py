"""The biLM of a saved spaCy pipeline, as ``spacy-elmo export PIPELINE OUT_DIR`` writes it."""

from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from thinc.api import Model

from ..bilm import BiLM
from ..bilm.native_io import reading_provenance
from ..errors import Errors
from ..training.data import tokenizer_settings
from .bilm_layer import get_bilm, get_runner
from .component import ElmoComponent


def pipeline_bilm(pipeline: Path, component: Optional[str] = None) -> Tuple[BiLM, str]:
    """``(biLM, component name)`` of the saved pipeline ``pipeline``: the biLM of its ``component``, an elmo
    component or one that ``nlp.replace_listeners`` gave its own copy (None: the pipeline's one elmo component),
    on the CPU in eval mode, with the weights saved there (fine-tuned ones included). Its ``provenance`` says
    where it came from and how the pipeline reads text (``lang``, ``tokenizer``), overridden by what the biLM's own
    said of its training where it said it (``trained_by``, ``lang``, ``tokenizer``, ``reading``; the ``elmo``
    component checks a pipeline's language against a pretrained model's). ValueError naming the components that hold a biLM when ``component`` holds none, or
    when it is None and the pipeline has no elmo component or several."""
    import spacy

    nlp = spacy.load(pipeline)
    held = {name: nodes for name, pipe in nlp.components if (nodes := _bilm_nodes(pipe))}
    choices = ", ".join(map(repr, held)) or "none"
    if component is None:
        elmo = [name for name, pipe in nlp.components if isinstance(pipe, ElmoComponent)]
        if len(elmo) != 1:
            if not held:
                raise ValueError(Errors.E_PIPELINE_NO_BILM.format(pipeline=pipeline, components=", ".join(map(repr, nlp.component_names)) or "none"))
            raise ValueError(Errors.E_PIPELINE_WHICH_BILM.format(pipeline=pipeline, n_elmo=len(elmo) or "no", choices=choices))
        component = elmo[0]
    if len(held.get(component, ())) != 1:
        raise ValueError(Errors.E_PIPELINE_COMPONENT_NO_BILM.format(
            pipeline=pipeline, component=component, components=", ".join(map(repr, nlp.component_names)), choices=choices))
    (node,) = held[component]
    bilm = get_bilm(node)
    assert bilm is not None  # _bilm_nodes keeps loaded ones only
    bilm = bilm.cpu().eval()
    bilm.provenance = {
        "exported_from": str(Path(pipeline).resolve()),
        "component": component,
        "frozen": _frozen(nlp.get_pipe(component)),
        "weights_source": getattr(get_runner(node), "source", "") or "",
        "lang": nlp.lang,
        "tokenizer": tokenizer_settings(nlp),
        # The biLM's own reading (trained_by, and the lang and tokenizer pretrain read its text with), which the
        # pipeline saved with it, wins over the pipeline's: a model pretrained on German and put in an English
        # pipeline still knows German tokens, and the component's language check must go on saying so.
        **reading_provenance(bilm),
    }
    return bilm, component


def _bilm_nodes(pipe: Any) -> List[Model]:
    """The ``elmo_bilm`` models with weights of a component's model: an elmo component's own, or the copy that
    ``nlp.replace_listeners`` put in a listening component."""
    model = getattr(pipe, "model", None)
    if not isinstance(model, Model):
        return []
    return [node for node in model.walk() if node.name == "elmo_bilm" and get_bilm(node) is not None]


def _frozen(pipe: Any) -> Optional[bool]:
    """Whether the component's biLM was frozen in training (False: fine-tuned with the pipeline)."""
    if isinstance(pipe, ElmoComponent):
        return bool(pipe.cfg["frozen"])
    owners = [node for node in pipe.model.walk() if node.name == "elmo_own_bilm"]
    return bool(owners[0].attrs["frozen"]) if owners else None
