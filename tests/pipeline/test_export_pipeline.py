"""``spacy-elmo export PIPELINE OUT_DIR``: the biLM of a saved pipeline's elmo component (or of a component that
nlp.replace_listeners gave its own copy), with the weights saved there, as a model directory."""

import json

import pytest
import spacy
import torch
from spacy.training import Example

from spacy_elmo import BiLM, batch_to_ids
from spacy_elmo.cli import app
from spacy_elmo.errors import Errors
from spacy_elmo.pipeline.bilm_layer import get_bilm
from spacy_elmo.training.data import tokenizer_settings
from spacy_elmo.training.modelio import load_pretrained

from tests.cli_text import ended, runner

from .conftest import make_docs
from .test_listener import LISTENER, NER

IDS = batch_to_ids([["Yesterday", "Alice", "went", "home", "."], ["밥"]])


def outputs(bilm: BiLM):
    with torch.no_grad():
        return torch.stack([layer.float() for layer in bilm.eval()(IDS).activations])


def perturb(bilm: BiLM, seed: int) -> None:
    """Move every weight, as fine-tuning would."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in bilm.parameters():
            param.add_(0.05 * torch.randn(param.shape, generator=generator))


def export(*args):
    return runner.invoke(app, ["export", *map(str, args)])


@pytest.mark.parametrize("inside", ["", "elmo"])
@pytest.mark.parametrize("format", ["native", "allennlp"])
def test_export_writes_the_fine_tuned_biLM_of_a_saved_pipeline(nlp, tiny_dir, tmp_path, format, inside):
    """A saved pipeline (or its elmo directory) was refused by export, which told users to run an internal
    one-liner; it now writes the biLM of its elmo component with the pipeline's own (fine-tuned) weights, without
    a softmax, recording where it came from."""
    nlp("warm up")  # the weights loaded
    bilm = get_bilm(nlp.get_pipe("elmo").model)
    perturb(bilm, 0)
    expected = outputs(bilm)
    assert not torch.allclose(expected, outputs(BiLM.load(tiny_dir, backend="reference")), atol=1e-3)
    nlp.to_disk(tmp_path / "trained")
    result = export(tmp_path / "trained" / inside, tmp_path / "out", "--format", format)
    assert result.exit_code == 0, result.output
    assert "no softmax" in result.stdout and "'elmo'" in result.stdout
    torch.testing.assert_close(outputs(BiLM.load(tmp_path / "out", backend="reference")), expected, atol=1e-5, rtol=1e-4)
    _, softmax, vocab, provenance = load_pretrained(tmp_path / "out")
    assert softmax is None and vocab is None
    if format == "native":
        meta = json.loads((tmp_path / "out" / "config.json").read_text())
        assert meta["provenance"]["exported_from"] == str((tmp_path / "trained").resolve())
        assert meta["provenance"]["component"] == "elmo" and meta["provenance"]["lang"] == "en"
        assert meta["provenance"]["weights_source"] == str(tiny_dir)
        # tiny_dir records no reading of its own, so the tokenizer is the pipeline's (pretrain's check reads it)
        assert meta["provenance"]["tokenizer"] == tokenizer_settings(nlp)


def test_an_exported_pipeline_biLM_keeps_how_it_was_pretrained_and_the_language_check_fires(tiny_dir, tmp_path):
    """The pipeline saved no provenance with its biLM, so an export of it recorded no ``trained_by``: loaded into a
    pipeline of another language, the elmo component's language check (which checks pretrained models only) said
    nothing. The pipeline now keeps its biLM's reading provenance, and export writes it."""
    import warnings

    pretrained = tmp_path / "pretrained"
    reading = {"trained_by": "spacy-elmo pretrain", "lang": "en", "tokenizer": tokenizer_settings(spacy.blank("en")),
               "reading": "streams"}
    BiLM.load(tiny_dir).save(pretrained, provenance={**reading, "steps": 7})
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(pretrained)})
    nlp("warm up")
    nlp.to_disk(tmp_path / "trained")
    result = export(tmp_path / "trained", tmp_path / "out", "--format", "native")
    assert result.exit_code == 0, result.output
    provenance = json.loads((tmp_path / "out" / "config.json").read_text())["provenance"]
    assert {key: provenance.get(key) for key in reading} == reading and "steps" not in provenance
    assert provenance["exported_from"] == str((tmp_path / "trained").resolve())

    def warned(lang):
        other = spacy.blank(lang)
        other.add_pipe("elmo", config={"weights": str(tmp_path / "out")})
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            other("Tee bitte")
        return [str(w.message) for w in caught if "pretrained on the tokens" in str(w.message)]

    (message,) = warned("de")
    assert "spaCy's 'en' tokenizer" in message and "this pipeline is 'de'" in message
    assert warned("en") == []


def test_an_exported_pipeline_biLM_keeps_the_language_it_was_pretrained_on(tiny_dir, tmp_path):
    """A biLM pretrained on German text in an English pipeline: the export says German, the language pretrain read
    (the pipeline's would hide the mismatch from every pipeline that loads the export)."""
    import warnings

    german = {"trained_by": "spacy-elmo pretrain", "lang": "de", "tokenizer": tokenizer_settings(spacy.blank("de")),
              "reading": "streams"}
    BiLM.load(tiny_dir).save(tmp_path / "pretrained", provenance=german)
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(tmp_path / "pretrained")})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the component's own warning of the mismatch
        nlp("warm up")
    nlp.to_disk(tmp_path / "trained")
    result = export(tmp_path / "trained", tmp_path / "out", "--format", "native")
    assert result.exit_code == 0, result.output
    provenance = json.loads((tmp_path / "out" / "config.json").read_text())["provenance"]
    assert {key: provenance.get(key) for key in german} == german


def test_export_writes_the_copy_that_replace_listeners_gave_a_component(tiny_dir, tmp_path):
    """A component given its own biLM by nlp.replace_listeners (the elmo component then removed): export names it
    as the one to choose, and --component writes that copy, with its own weights."""
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(tiny_dir), "frozen": False})
    nlp.add_pipe("ner", config={"model": {**NER, "tok2vec": LISTENER}})
    examples = [Example(nlp.make_doc(d.text), d) for d in make_docs(4)]
    nlp.initialize(lambda: examples)
    nlp.replace_listeners("elmo", "ner", ["model.tok2vec"])
    nlp.remove_pipe("elmo")
    (own,) = [get_bilm(n) for n in nlp.get_pipe("ner").model.walk() if n.name == "elmo_bilm"]
    perturb(own, 1)
    expected = outputs(own)
    nlp.to_disk(tmp_path / "trained")
    result = export(tmp_path / "trained", tmp_path / "out", "--format", "native")
    ended(result, 1, Errors.E_PIPELINE_WHICH_BILM.format(pipeline=tmp_path / "trained", n_elmo="no", choices="'ner'"))
    result = export(tmp_path / "trained", tmp_path / "out", "--format", "native", "--component", "ner")
    assert result.exit_code == 0, result.output
    torch.testing.assert_close(outputs(BiLM.load(tmp_path / "out", backend="reference")), expected, atol=1e-5, rtol=1e-4)
    assert json.loads((tmp_path / "out" / "config.json").read_text())["provenance"]["frozen"] is False


def test_export_names_the_choices_when_it_cannot_tell_which_biLM(tiny_dir, tmp_path):
    """Two elmo components, a --component holding no biLM, a pipeline with none, --component of a model
    directory: each an error naming what to give."""
    two = spacy.blank("en")
    two.add_pipe("elmo", config={"weights": str(tiny_dir)})
    two.add_pipe("elmo", name="elmo2", config={"weights": str(tiny_dir)})
    two.add_pipe("sentencizer")
    two.to_disk(tmp_path / "two")
    ended(export(tmp_path / "two", tmp_path / "out"),
          1, Errors.E_PIPELINE_WHICH_BILM.format(pipeline=tmp_path / "two", n_elmo=2, choices="'elmo', 'elmo2'"))
    ended(export(tmp_path / "two", tmp_path / "out", "--component", "sentencizer"),
          1, Errors.E_PIPELINE_COMPONENT_NO_BILM.format(pipeline=tmp_path / "two", component="sentencizer",
                                                        components="'elmo', 'elmo2', 'sentencizer'", choices="'elmo', 'elmo2'"))
    result = export(tmp_path / "two", tmp_path / "out", "--component", "elmo2", "--format", "native")
    assert result.exit_code == 0, result.output
    none = spacy.blank("en")
    none.add_pipe("sentencizer")
    none.to_disk(tmp_path / "none")
    ended(export(tmp_path / "none", tmp_path / "out2"),
          1, Errors.E_PIPELINE_NO_BILM.format(pipeline=tmp_path / "none", components="'sentencizer'"))
    ended(export(tiny_dir, tmp_path / "out3", "--component", "elmo"),
          1, Errors.E_EXPORT_COMPONENT_NOT_PIPELINE.format(component="elmo", path=tiny_dir))
    assert not (tmp_path / "out2").exists() and not (tmp_path / "out3").exists()
