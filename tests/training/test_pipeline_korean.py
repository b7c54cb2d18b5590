"""A Korean model from `pretrain` runs in the spaCy `elmo` component."""

import warnings

import pytest

from .conftest import tiny_train_config
from .test_train import korean_text

FALLBACK = {"@tokenizers": "spacy.Tokenizer.v1"}


def test_korean_model_in_the_pipeline(tmp_path):
    spacy = pytest.importorskip("spacy")
    import spacy_elmo.pipeline  # noqa: F401 - registers the factory
    from spacy_elmo import BiLM
    from spacy_elmo.training.trainer import train

    path = tmp_path / "ko.txt"
    path.write_text(korean_text(120), encoding="utf-8")
    out = tmp_path / "ko"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the fallback tokenizer's warning (mecab-ko is not installed)
        train(tiny_train_config(path, out, lang="ko", max_steps=3, checkpoint_every=3))
    # The model records the tokenizer its text was read with (here the rule-based fallback) ...
    assert BiLM.load(out).provenance["tokenizer"] == FALLBACK
    nlp = spacy.blank("ko", config={"nlp": {"tokenizer": FALLBACK}})
    nlp.add_pipe("elmo", config={"weights": str(out)})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # ... and a pipeline reading the same tokens gets no warning
        nlp.initialize()
        doc = nlp("밥을 먹었다. 책을 읽었다.")
    assert doc._.elmo.shape == (3, len(doc), 32)
    assert doc[0]._.elmo_vector.shape == (32,)
    # A pipeline of another language read the text silently with other tokens.
    other = spacy.blank("en")
    other.add_pipe("elmo", config={"weights": str(out)})
    with pytest.warns(UserWarning, match=r"pretrained on the tokens of spaCy's 'ko' tokenizer .*this pipeline is 'en'"):
        other("밥을 먹었다.")
