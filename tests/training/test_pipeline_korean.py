"""A Korean model from `pretrain` runs in the spaCy `elmo` component."""

import pytest

from .conftest import tiny_train_config
from .test_train import korean_text


def test_korean_model_in_the_pipeline(tmp_path):
    spacy = pytest.importorskip("spacy")
    import spacy_elmo.pipeline  # noqa: F401 - registers the factory
    from spacy_elmo.training.trainer import train

    path = tmp_path / "ko.txt"
    path.write_text(korean_text(120), encoding="utf-8")
    out = tmp_path / "ko"
    train(tiny_train_config(path, out, lang="ko", max_steps=3, checkpoint_every=3))
    nlp = spacy.blank("ko", config={"nlp": {"tokenizer": {"@tokenizers": "spacy.Tokenizer.v1"}}})
    nlp.add_pipe("elmo", config={"weights": str(out)})
    nlp.initialize()
    doc = nlp("밥을 먹었다. 책을 읽었다.")
    assert doc._.elmo.shape == (3, len(doc), 32)
    assert doc[0]._.elmo_vector.shape == (32,)
