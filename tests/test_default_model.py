"""The bundled default English model (issue 6): what ships, and every way of reaching it.

Skipped only where the package holds no default model (a checkout before it was trained);
the repository ships one, so these run in CI.
"""

import json

import numpy
import pytest
import torch
from safetensors import safe_open
from typer.testing import CliRunner

from spacy_elmo import BiLM, BiLMConfig
from spacy_elmo.bilm.native_io import CONFIG_NAME, DEFAULT_MODEL_DIR
from spacy_elmo.cli import app
from spacy_elmo.training.modelio import load_pretrained

pytestmark = pytest.mark.skipif(not (DEFAULT_MODEL_DIR / CONFIG_NAME).exists(), reason="no bundled default model")

# Four sentences a sense: with one pair a sense the comparison rests on two cosines and is noise.
RIVER = ["We sat on the bank of the river .", "The boat drifted toward the muddy bank of the stream .",
         "Fishermen stood along the bank of the river .", "The river overflowed its bank after the rain ."]
MONEY = ["She paid the cheque into her bank account .", "The bank raised its interest rates .",
         "He borrowed money from the bank to buy a house .", "The bank lent him money at a low rate ."]


@pytest.fixture(scope="module")
def bilm():
    model = BiLM.load("default")
    model.eval()
    return model


def test_small_preset_float16_with_softmax():
    small = BiLMConfig.preset("small")
    cfg = json.loads((DEFAULT_MODEL_DIR / CONFIG_NAME).read_text())["config"]
    for key in ("cell_dim", "projection_dim", "n_layers", "max_characters_per_token"):
        assert cfg[key] == getattr(small, key)
    with safe_open(str(DEFAULT_MODEL_DIR / "model.safetensors"), "pt") as f:
        names = set(f.keys())
        assert {"softmax.weight", "softmax.bias"} <= names
        assert {f.get_tensor(n).dtype for n in names} == {torch.float16}
    bilm, softmax, vocab, provenance = load_pretrained("default", backend="reference")
    assert bilm.config.output_dim == 256
    assert softmax is not None and softmax.weight.dtype == torch.float32  # loads as float32
    assert len(vocab) >= 30_000 and vocab.types[:3] == ["<S>", "</S>", "<UNK>"]
    assert provenance["recipe"] == "benchmarks/train_default.py"


def test_records_the_tokenizer_it_was_pretrained_with():
    """The bundled model was pretrained on spaCy's English tokens (docs/default-model.md) before pretrain recorded
    the tokenizer block: it recorded none, and a pipeline of another language was told the model was "an older
    model" whose settings were not recorded. It records spaCy's default English block, the one spacy.blank("en")
    builds, and the warning names it."""
    import warnings

    import spacy

    from spacy_elmo.errors import TokenizerMismatchWarning
    from spacy_elmo.training.data import tokenizer_settings

    provenance = json.loads((DEFAULT_MODEL_DIR / CONFIG_NAME).read_text())["provenance"]
    assert provenance["lang"] == "en" and provenance["tokenizer"] == tokenizer_settings(spacy.blank("en"))
    nlp = spacy.blank("de")
    nlp.add_pipe("elmo")
    with pytest.warns(TokenizerMismatchWarning) as warned:
        nlp("Hallo Welt .")
    (message,) = [str(w.message) for w in warned if issubclass(w.category, TokenizerMismatchWarning)]
    assert "not recorded" not in message and "an older model" not in message
    assert "spaCy's 'en' tokenizer {'@tokenizers': 'spacy.Tokenizer.v1'}, but this pipeline is 'de'" in message
    with warnings.catch_warnings():
        warnings.simplefilter("error", TokenizerMismatchWarning)
        english = spacy.blank("en")
        english.add_pipe("elmo")
        english("Hello world .")


def test_no_argument_add_pipe_gives_contextual_vectors():
    import spacy

    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("elmo")  # no weights: the bundled model
    doc = nlp("I went to the bank. It was closed.")
    assert doc._.elmo.shape == (3, len(doc), 256) and doc._.elmo.dtype == numpy.float16
    assert nlp.get_pipe("elmo").source == "default"
    # the same word in different contexts gets different vectors above layer 0
    a, b = nlp("the bank of the river")[1], nlp("the bank raised rates")[1]
    # and the same one at layer 0, up to rounding (two batches; about 1e-6 absolute in float16 storage)
    layer0 = [t.doc._.elmo[0, 1].astype("float32") for t in (a, b)]
    numpy.testing.assert_allclose(*layer0, rtol=1e-3, atol=1e-6)
    assert a.similarity(b) < 0.999


def test_senses_of_bank_separate_above_layer_0(bilm):
    """A trained model places river banks nearer each other than money banks, in both biLSTM
    layers; layer 0 (the char CNN) cannot tell them apart."""
    from spacy_elmo import batch_to_ids

    sents = [s.split() for s in RIVER + MONEY]
    n = len(RIVER)
    with torch.no_grad():
        acts = bilm(batch_to_ids(sents)).activations
    for layer, act in enumerate(acts):
        v = torch.stack([act[i, s.index("bank")] for i, s in enumerate(sents)])
        cos = torch.nn.functional.cosine_similarity(v.unsqueeze(1), v.unsqueeze(0), dim=-1)
        within = (cos[:n, :n].sum() + cos[n:, n:].sum() - 2 * n) / (2 * n * (n - 1))
        across = cos[:n, n:].mean()
        if layer == 0:
            assert within == pytest.approx(1.0) and across == pytest.approx(1.0)
        else:
            assert within > across, f"layer {layer}: within-sense {within:.3f} <= across-sense {across:.3f}"


def test_evaluate_default_prefers_real_word_order(tmp_path):
    """`evaluate default` runs, and the model is a language model: the same words score far
    better in their real order than shuffled, read the default way (per sentence for this
    model) and as one stream."""
    import random

    lines = ["The president spoke to the nation about the economy .", "She walked down to the river in the morning .",
             "The children played in the garden while their mother read a letter .",
             "He said that the war would end before the winter ."]
    words = " ".join(lines).split()
    random.Random(0).shuffle(words)
    results = {}
    for mode in ([], ["--stream"]):
        for name, text in (("real", "\n".join(lines)), ("shuffled", " ".join(words))):
            path = tmp_path / f"{name}.txt"
            path.write_text(text + "\n", encoding="utf-8")
            result = CliRunner().invoke(app, ["evaluate", "default", str(path), "--json", *mode])
            assert result.exit_code == 0, result.output
            results[name] = json.loads(result.output.strip().splitlines()[-1])
        assert results["real"]["mode"] == ("stream" if mode else "per_sentence")
        assert results["real"]["vocab_size"] >= 30_000 and results["real"]["oov_rate"] == 0.0
        assert results["real"]["perplexity"] < results["real"]["vocab_size"]  # below uniform guessing
        assert results["real"]["perplexity"] < results["shuffled"]["perplexity"] / 2


def test_empty_paths_elmo_in_the_configs_means_the_bundled_model():
    import spacy
    from spacy.util import load_config

    from spacy_elmo.configs import config_path

    cfg = load_config(config_path("ner"))
    assert cfg["paths"]["elmo"] == ""
    loader = spacy.registry.misc.get("spacy_elmo.WeightsLoader.v1")(cfg["paths"]["elmo"])
    bilm, source = loader("reference")
    assert source == "default"
    want = BiLM.load("default", backend="reference").state_dict()
    got = bilm.state_dict()
    assert want.keys() == got.keys() and all(torch.equal(want[k], got[k]) for k in want)
