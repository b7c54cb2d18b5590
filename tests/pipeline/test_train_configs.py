"""`spacy train` on the shipped configs (ner.cfg, parser.cfg, textcat.cfg) for a few steps on tiny data."""

import gc
import io
import re
import shutil
import subprocess
import sys
import warnings
import weakref

import numpy
import pytest
import spacy
import srsly
import torch
from spacy.training import Corpus, Example
from spacy.training.initialize import init_nlp

from spacy_elmo import BiLM, BiLMConfig
from spacy_elmo.bilm import native_io
from spacy_elmo.errors import Errors
from spacy_elmo.pipeline.bilm_layer import get_bilm, get_runner
from spacy_elmo.pipeline.layer_cache import MB

from spacy_elmo.configs import CONFIG_DIR as CONFIGS

from .conftest import TINY


# The shipped configs run as shipped: the tiny corpus (16 docs, 48 arcs whose head stands right of the
# word, 80 left of it) keeps the parser's shift and reduce under min_action_freq = 30; its labels seen
# fewer than 30 times are learnt as `dep`, which nothing here checks.
def _train(cfg, corpus_dir, tiny_dir, out):
    cmd = [
        sys.executable, "-m", "spacy", "train", str(CONFIGS / cfg),
        "--paths.train", str(corpus_dir / "train.spacy"), "--paths.dev", str(corpus_dir / "dev.spacy"),
        "--paths.elmo", str(tiny_dir), "--output", str(out),
        "--training.max_steps", "4", "--training.eval_frequency", "2",
        "--nlp.batch_size", "8",
    ]  # fmt: skip
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return out / "model-last"


def _annotations(doc):
    """What the shipped configs' task components set on a doc."""
    return [(e.start, e.end, e.label_) for e in doc.ents], doc.cats, [(t.tag_, t.head.i, t.dep_) for t in doc]


TASKS = [("ner.cfg", ["ner"]), ("parser.cfg", ["tagger", "parser"]), ("textcat.cfg", ["textcat"])]


@pytest.mark.parametrize("cfg,tasks", TASKS)
def test_spacy_train(cfg, tasks, corpus_dir, tiny_dir, tmp_path):
    path = _train(cfg, corpus_dir, tiny_dir, tmp_path / "out")
    nlp = spacy.load(path)
    assert nlp.pipe_names == ["sentencizer", "elmo", *tasks]
    assert nlp.get_pipe("elmo").listening_components == tasks
    # each task's own ScalarMix learned; the biLM did not move
    for task in tasks:
        (mix,) = [n for n in nlp.get_pipe(task).model.walk() if n.name == "elmo_scalar_mix"]
        assert not numpy.allclose(mix.get_param("w"), 0.0), task
    # every weighted score is one the pipeline reports (spaCy counts a missing one as 0, silently)
    scores = nlp.evaluate(list(Corpus(str(corpus_dir / "dev.spacy"))(nlp)))
    weights = spacy.util.load_config(CONFIGS / cfg)["training"]["score_weights"]
    assert {k for k, w in weights.items() if w is not None} <= scores.keys()
    original = BiLM.load(tiny_dir, backend="reference").state_dict()
    for name, value in get_bilm(nlp.get_pipe("elmo").model).state_dict().items():
        assert torch.equal(value.cpu(), original[name]), name
    # save / load round trip: identical predictions
    texts = ["Yesterday Alice went home and it was good .", "London was bad .", "Alice went home . It was good ."]
    before = list(nlp.pipe(texts))
    # the sentences the biLM read are the doc's: the parser keeps the sentencizer's
    with nlp.select_pipes(enable=["sentencizer"]):
        assert [[s.start for s in d.sents] for d in nlp.pipe(texts)] == [[s.start for s in d.sents] for d in before]
    nlp.to_disk(tmp_path / "again")
    after = list(spacy.load(tmp_path / "again").pipe(texts))
    for a, b in zip(before, after):
        numpy.testing.assert_array_equal(a._.elmo, b._.elmo)
        assert _annotations(a) == _annotations(b)
    if tasks == ["ner"]:
        # `spacy package` handles it (directory only: building an sdist needs network tools)
        pkg = tmp_path / "pkg"
        pkg.mkdir()
        cmd = [sys.executable, "-m", "spacy", "package", str(path), str(pkg), "--name", "elmo_test",
               "--version", "0.0.1", "--build", "none", "--force"]  # fmt: skip
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stdout + result.stderr
        data = next(pkg.glob("*/en_elmo_test/en_elmo_test-0.0.1"))
        # the package installs spacy-elmo (spaCy finds it from the registered functions in the config)
        requirements = srsly.read_json(data.parent.parent / "meta.json")["requirements"]
        assert any(r.split(">")[0].split("=")[0] == "spacy-elmo" for r in requirements), requirements
        packaged = spacy.load(data)
        # texts[0] alone, not batched with texts[1]: equal up to rounding (one float16 ulp)
        got, want = packaged(texts[0])._.elmo.astype("float32"), before[0]._.elmo.astype("float32")
        numpy.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-6)


GOLD = {
    "ner.cfg": {"entities": [(0, 5, "PER")]},
    "parser.cfg": {"heads": [1, 1, 1, 1, 5, 5, 5, 5], "tags": ["NNP", "VBD", "RB", ".", "PRP", "VBD", "JJ", "."],
                   "deps": ["nsubj", "ROOT", "advmod", "punct", "nsubj", "ROOT", "acomp", "punct"]},
    "textcat.cfg": {"cats": {"POS": 1.0, "NEG": 0.0}},
}  # fmt: skip


def _config(cfg, corpus_dir, weights, overrides=None):
    """A shipped config on the tiny corpus with ``weights`` as --paths.elmo (and other ``overrides``)."""
    overrides = {"paths.train": str(corpus_dir / "train.spacy"), "paths.dev": str(corpus_dir / "dev.spacy"),
                 "paths.elmo": str(weights), **(overrides or {})}  # fmt: skip
    return spacy.util.load_config(CONFIGS / cfg, overrides=overrides, interpolate=False)


@pytest.mark.parametrize("annotating", [True, False])
@pytest.mark.parametrize("cfg", sorted(GOLD))
def test_config_gives_elmo_sentences_in_training(cfg, annotating, corpus_dir, tiny_dir, monkeypatch):
    """`spacy train` runs only the components in [training] annotating_components on the
    predicted docs, which start as bare words: without the sentencizer listed there the biLM
    reads a whole multi-sentence doc as one window in training and sentences at prediction."""
    from spacy_elmo.pipeline import bilm_layer

    config = _config(cfg, corpus_dir, tiny_dir)
    nlp = init_nlp(config)
    annotates = config["training"]["annotating_components"]
    assert annotates == ["sentencizer"]
    seen = []
    make_pieces = bilm_layer.make_pieces

    def spy(docs, max_window, *words):
        pieces = make_pieces(docs, max_window, *words)
        seen.append([(p.start, p.end) for p in pieces])
        return pieces

    monkeypatch.setattr(bilm_layer, "make_pieces", spy)
    text = "Alice went home . It was good ."
    example = Example.from_dict(nlp.make_doc(text), GOLD[cfg])
    nlp.update([example], annotates=annotates if annotating else [])
    expected = [(0, 4), (4, 8)] if annotating else [(0, 8)]
    assert seen and all(pieces == expected for pieces in seen)
    seen.clear()
    nlp(text)  # prediction runs the whole pipeline: sentences
    assert seen == [[(0, 4), (4, 8)]]


@spacy.registry.callbacks("spacy_elmo_test.nan_at_step_3.v1")
def _make_nan_at_step_3():
    def before_update(nlp, args):  # a fine-tuning that diverged at step 3 (a NaN in the biLM)
        if args["step"] == 3:
            with torch.no_grad():
                get_bilm(nlp.get_pipe("elmo").model).lstm.forward_layers[0].bias[0] = float("nan")

    return before_update


def test_spacy_train_stops_at_a_diverged_biLM_keeping_the_best_model(corpus_dir, tiny_dir, tmp_path):
    """spacy train saved a biLM with NaN weights at every checkpoint (model-last, and model-best while the scores
    tie), each loaded without a word and giving NaN vectors. Saving one is refused: training stops at the first
    checkpoint after the divergence, the model-best saved before it intact."""
    from spacy.training.loop import train

    overrides = {"training.max_steps": 8, "training.eval_frequency": 2, "nlp.batch_size": 8,
                 "training.before_update": {"@callbacks": "spacy_elmo_test.nan_at_step_3.v1"}}  # fmt: skip
    nlp = init_nlp(_config("ner.cfg", corpus_dir, tiny_dir, overrides))
    (tmp_path / "out").mkdir()
    with pytest.raises(ValueError, match=r"Cannot save the elmo biLM: its weight 'lstm\.forward_layers\.0\.bias'"):
        train(nlp, tmp_path / "out", stdout=io.StringIO(), stderr=io.StringIO())
    best = spacy.load(tmp_path / "out" / "model-best")  # saved at step 2
    original = BiLM.load(tiny_dir, backend="reference").state_dict()
    for name, value in get_bilm(best.get_pipe("elmo").model).state_dict().items():
        assert torch.equal(value.cpu(), original[name]), name
    assert numpy.isfinite(best("Alice went home .")._.elmo).all()


def _init(cfg, corpus_dir, weights, components=()):
    """init_nlp (as spacy train) of :func:`_config`, some components replaced."""
    config = _config(cfg, corpus_dir, weights)
    for name, block in dict(components).items():
        config["components"][name] = block
    return init_nlp(config)


def _cache_limit(nlp):
    return get_runner(nlp.get_pipe("elmo").model).layer_cache.limit


@pytest.mark.parametrize("cfg", sorted(GOLD))
def test_layer_cache_is_on_in_training_only(cfg, corpus_dir, tiny_dir, tmp_path):
    """The shipped configs turn the layer cache on for spacy train; the trained pipeline, loaded for
    inference, starts with it off. It was a model setting, saved in the pipeline's config: every loaded
    copy grew up to 1 GB (GPU memory on a GPU) of layers of new texts, almost never read again. Now it is
    [initialize.components.elmo] layer_cache_mb, which spacy.load never runs; a sourced elmo is never
    initialized either. Python turns it on at inference."""
    nlp = _init(cfg, corpus_dir, tiny_dir)
    assert _cache_limit(nlp) == 1024 * MB
    nlp.to_disk(tmp_path / "trained")
    loaded = spacy.load(tmp_path / "trained")
    assert _cache_limit(loaded) == 0
    saved = spacy.util.load_config(tmp_path / "trained" / "config.cfg")
    assert "layer_cache_mb" not in saved["components"]["elmo"]["model"]
    assert saved["initialize"]["components"]["elmo"]["layer_cache_mb"] == 1024
    assert _cache_limit(_init(cfg, corpus_dir, tiny_dir, {"elmo": {"source": str(tmp_path / "trained")}})) == 0
    elmo = loaded.get_pipe("elmo")
    elmo.layer_cache_mb = 8
    loaded("Alice went home .")
    assert _cache_limit(loaded) == 8 * MB and len(get_runner(elmo.model).layer_cache) == 1


@pytest.fixture(scope="module")
def first(corpus_dir, tiny_dir, tmp_path_factory):
    """ner.cfg initialized on the tiny corpus, saved: the pipeline the sourcing tests source from (they
    only read it)."""
    path = tmp_path_factory.mktemp("first")
    _init("ner.cfg", corpus_dir, tiny_dir).to_disk(path)
    return path


def test_sourced_listening_component_with_a_new_elmo(corpus_dir, tiny_dir, first):
    """[components.ner] source = PIPELINE next to a new elmo component: spacy train initializes with the
    resumed ner disabled, and spaCy's relinking skips it; ner got no upstream ("no upstream 'elmo'
    component" at its first update). Now the first update links it and it trains on the layers."""
    nlp = _init("ner.cfg", corpus_dir, tiny_dir, {"ner": {"source": str(first)}})
    examples = list(Corpus(str(corpus_dir / "train.spacy"))(nlp))[:4]
    (mix,) = [n for n in nlp.get_pipe("ner").model.walk() if n.name == "elmo_scalar_mix"]
    before = mix.get_param("w").copy()
    for _ in range(3):  # the parser's output layer starts at zero: no gradient below it at the first step
        nlp.update(examples)
    assert nlp.get_pipe("elmo").listening_components == ["ner"]
    assert not numpy.array_equal(mix.get_param("w"), before)  # zero layers would give w no gradient


def test_sourced_listening_component_with_other_weights_is_a_clear_error(corpus_dir, tiny_dir, first, tmp_path):
    """A sourced ner next to an elmo component loading a biLM of another width: a clear error at
    initialization, not a matrix shape mismatch in the first update."""
    BiLM(BiLMConfig(**{**TINY, "projection_dim": 4})).save(tmp_path / "narrow")
    with pytest.raises(ValueError, match=r"'ner' was trained on .* width 16, but 'elmo' loaded .* width 8"):
        _init("ner.cfg", corpus_dir, tmp_path / "narrow", {"ner": {"source": str(first)}})


def test_elmo_in_frozen_components_is_a_clear_error(corpus_dir, tiny_dir):
    """spaCy never initializes the components in [training] frozen_components: a new elmo listed there
    has no weights when ner initializes (thinc's "Cannot get dimension 'nL'" before)."""
    config = _config("ner.cfg", corpus_dir, tiny_dir, {"training.frozen_components": ["elmo"]})
    with pytest.raises(ValueError, match=r"initialized before its upstream 'elmo' loaded its weights.*frozen_components"):
        init_nlp(config)


def test_elmo_disabled_in_the_config_is_not_called_frozen(corpus_dir, tiny_dir):
    """elmo in [nlp] disabled (not in frozen_components): init_nlp initializes enabled components only, and the
    error said to keep elmo out of frozen_components. It says elmo is disabled, and (spacy train --nlp.disabled
    '["elmo"]') to remove it from [nlp] disabled: it gave the Python API's fixes only (nlp.enable_pipe,
    select_pipes), which a spacy train user cannot apply."""
    config = _config("ner.cfg", corpus_dir, tiny_dir, {"nlp.disabled": ["elmo"]})
    with pytest.raises(ValueError, match=r"initialized while its upstream 'elmo' is disabled .*\[nlp\] disabled") as err:
        init_nlp(config)
    message = str(err.value)
    assert message == Errors.E_LISTENER_NO_SIZES_DISABLED_CONFIG.format(upstream="elmo", component="ner")
    assert "Remove 'elmo' from [nlp] disabled (and from --nlp.disabled)" in message and "keep 'elmo' enabled" in message
    assert "enable_pipe" not in message and "select_pipes" not in message and "frozen_components" not in message


def test_elmo_both_frozen_and_disabled_in_the_config_names_both_at_once(corpus_dir, tiny_dir):
    """elmo in [training] frozen_components and in [nlp] disabled: the error named frozen_components only, and with
    elmo taken out of it the next run said it was disabled. One error names both lists."""
    overrides = {"training.frozen_components": ["elmo"], "nlp.disabled": ["elmo"]}
    with pytest.raises(ValueError) as err:
        init_nlp(_config("ner.cfg", corpus_dir, tiny_dir, overrides))
    message = str(err.value)
    assert message == Errors.E_LISTENER_NO_SIZES_FROZEN_AND_DISABLED.format(upstream="elmo", component="ner")
    assert "[training] frozen_components" in message and "[nlp] disabled" in message
    assert "Remove 'elmo' from both lists" in message and "enable_pipe" not in message


@pytest.mark.parametrize(
    "overrides, named",
    [({"nlp.pipeline": ["sentencizer", "ner", "elmo"]}, "'elmo'"),
     ({"components.ner.model.tok2vec.elmo.upstream": "elmoo"}, "'elmoo'"),
     ({"nlp.pipeline": ["sentencizer", "ner"]}, "'elmo'")],
)  # fmt: skip
def test_unlinked_listener_names_where_elmo_goes(corpus_dir, tiny_dir, tmp_path, overrides, named):
    """elmo after ner in [nlp] pipeline (spaCy links listeners only to an upstream before them), an upstream
    naming no component, no elmo at all: the error said "has no upstream 'elmo' component" (there was one)
    and told the user to add one first=True, i.e. before the sentencizer, where the biLM reads windows and
    not the sentences it was trained on. It now says where it goes and names the upstream sought; a pipeline
    loaded with exclude=["elmo"] is named too."""
    config = _config("ner.cfg", corpus_dir, tiny_dir, overrides)
    with pytest.raises(ValueError) as err:
        init_nlp(config)
    message = str(err.value)
    assert f"elmo component named {named} placed before the listening component" in message
    assert "after any sentencizer" in message and "first=True" not in message
    assert "before='ner'" in message
    _init("ner.cfg", corpus_dir, tiny_dir).to_disk(tmp_path / "trained")
    text = "Alice went home ."
    with pytest.raises(ValueError, match=r"exclude=\['elmo'\].*replace_listeners") as err:
        spacy.load(tmp_path / "trained", exclude=["elmo"])(text)
    # the advice, followed as written: it said ['model.tok2vec'], which ElmoTok2Vec.v1 refuses
    call = re.search(r"nlp\.replace_listeners\('elmo', 'ner', \['([\w.]+)'\]\)\.$", str(err.value))
    assert call is not None, str(err.value)
    with pytest.raises(ValueError) as piped:  # nlp.pipe runs the components from spacy.util, not spacy.language
        list(spacy.load(tmp_path / "trained", exclude=["elmo"]).pipe([text]))
    assert call.group(0) in str(piped.value), str(piped.value)
    nlp = spacy.load(tmp_path / "trained")
    expected = nlp(text).ents
    nlp.replace_listeners("elmo", "ner", [call.group(1)])
    nlp.remove_pipe("elmo")
    nlp.to_disk(tmp_path / "own")
    assert [(e.start, e.end, e.label_) for e in spacy.load(tmp_path / "own")(text).ents] == [
        (e.start, e.end, e.label_) for e in expected
    ]


def test_sourced_elmo_frozen_without_annotating(corpus_dir, tiny_dir, first):
    """A sourced elmo in frozen_components but not in annotating_components feeds no listener in training:
    ner trained on zero layers without a word, then failed after the first evaluation with an error about
    a removed or disabled upstream. Then the zeros warned (once) until an evaluation, then the error named the
    training settings; now the first training step is that error (zeros are for initialize and debug model)."""
    nlp = _init("ner.cfg", corpus_dir, tiny_dir, {"elmo": {"source": str(first)}})
    examples = list(Corpus(str(corpus_dir / "train.spacy"))(nlp))[:4]
    for _ in range(2):  # what spacy train does with frozen_components; before and after an evaluation
        with pytest.raises(ValueError, match=r"no ELMo layers for a training batch.*annotating_components"):
            nlp.update(examples, exclude=["elmo"])
        nlp("Alice went home .")


def test_training_errors_name_the_shipped_configs_listener_path(corpus_dir, tiny_dir):
    """The errors of a training step without elmo's layers (E_LISTENER_NOT_FED right after initialize,
    E_LISTENER_BATCH after elmo fed a batch) said nlp.replace_listeners('elmo', 'ner', ['model.tok2vec']), which
    spaCy refuses for the shipped configs' ElmoTok2Vec.v1 (the listener is at model.tok2vec.elmo). They name the
    listener's path, and the call, followed as written, trains ner without elmo."""
    nlp = _init("ner.cfg", corpus_dir, tiny_dir)
    examples = list(Corpus(str(corpus_dir / "train.spacy"))(nlp))[:4]
    call = re.escape("first nlp.replace_listeners('elmo', 'ner', ['model.tok2vec.elmo']).")
    with pytest.raises(ValueError, match=r"did not run update\(\) on it.*" + call):
        nlp.update(examples, exclude=["elmo"])
    nlp.update(examples)
    with pytest.raises(ValueError, match=r"got a batch it has no upstream output for.*" + call + " An annotating") as err:
        nlp.update(examples, exclude=["elmo"])
    eval(re.search(r"nlp\.replace_listeners\([^)]*\)", str(err.value)).group(0))
    nlp.update(examples, exclude=["elmo"])


def test_sourced_elmo_with_other_requested_weights_warns_once(corpus_dir, tiny_dir, first, tmp_path):
    """[components.elmo] source = PIPELINE with --paths.elmo OTHER: spaCy copies the component with its
    weights and never initializes it, so OTHER had no effect, silently. Now init_nlp (spacy train) warns
    once, naming both, also with elmo in frozen_components; no warning when --paths.elmo names the weights
    it runs, or names none ("", or spaces: warned before, as if they named the bundled default model)."""
    torch.manual_seed(1)
    BiLM(BiLMConfig(**TINY)).save(tmp_path / "other")
    frozen = {"training.frozen_components": ["elmo"], "training.annotating_components": ["sentencizer", "elmo"]}
    cases = ((tmp_path / "other", frozen, True), (tiny_dir, {}, False), ("", {}, False), ("  ", {}, False))
    for weights, overrides, warns in cases:
        config = _config("ner.cfg", corpus_dir, weights, overrides)
        config["components"]["elmo"] = {"source": str(first)}
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            nlp = init_nlp(config)
        ours = [str(w.message) for w in caught if "sourced with" in str(w.message)]
        if warns:
            assert len(ours) == 1, ours
            assert [w.filename for w in caught if "sourced with" in str(w.message)] == [__file__]  # the user's call
            assert f"({tiny_dir}), not '{tmp_path / 'other'}'" in ours[0] and "drop `source`" in ours[0]
            assert f"leave --paths.elmo empty, or set it to {tiny_dir}." in ours[0]
            runs = get_bilm(nlp.get_pipe("elmo").model).state_dict()
            assert all(torch.equal(v, BiLM.load(tiny_dir).state_dict()[k]) for k, v in runs.items())
        else:
            assert ours == []


def test_sourced_fine_tuned_elmo_warns_for_the_weights_it_started_from(corpus_dir, tiny_dir, tmp_path):
    """A sourced elmo fine-tuned from TINY, with --paths.elmo TINY: it runs the fine-tuned weights, not TINY's,
    but its source still said TINY, so spacy train did not warn (and with another path the warning advised
    --paths.elmo TINY to keep the sourced weights). Now it warns, naming the weights fine-tuned and the one
    setting that keeps them without a warning: an empty --paths.elmo."""
    config = _config("ner.cfg", corpus_dir, tiny_dir, {"components.elmo.frozen": False})
    nlp = init_nlp(config)
    examples = list(Corpus(str(corpus_dir / "train.spacy"))(nlp))[:4]
    for _ in range(2):
        nlp.update(examples)
    nlp.to_disk(tmp_path / "tuned")
    tuned = get_bilm(nlp.get_pipe("elmo").model).state_dict()
    for weights, warns in ((tiny_dir, True), ("default", True), ("", False)):
        config = _config("ner.cfg", corpus_dir, weights)
        config["components"]["elmo"] = {"source": str(tmp_path / "tuned")}
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            sourced = init_nlp(config)
        ours = [str(w.message) for w in caught if "sourced with" in str(w.message)]
        runs = get_bilm(sourced.get_pipe("elmo").model).state_dict()
        assert all(torch.equal(v, tuned[k]) for k, v in runs.items())
        if warns:
            assert len(ours) == 1, ours
            assert f"({tiny_dir}, fine-tuned), not '{weights}'" in ours[0], ours[0]
            assert "leave --paths.elmo empty (the weights were fine-tuned" in ours[0], ours[0]
            assert f"set it to {tiny_dir}" not in ours[0] and f"--paths.elmo {tiny_dir}" not in ours[0]
        else:
            assert ours == []


def test_sourced_elmo_loaded_from_a_relative_path_is_told_from_its_absolute_path(corpus_dir, tiny_dir, tmp_path,
                                                                                  monkeypatch):
    """--paths.elmo RELATIVE (to the working directory then): the source kept it as given, and a later run from
    another directory, sourcing that elmo with --paths.elmo naming the same weights by their absolute path, was
    warned that they differ (RELATIVE was resolved against its own working directory). Now the source is the
    absolute path, which names those weights from anywhere."""
    monkeypatch.chdir(tiny_dir.parent)
    nlp = _init("ner.cfg", corpus_dir, tiny_dir.name)
    assert nlp.get_pipe("elmo").source == str(tiny_dir)
    nlp.to_disk(tmp_path / "rel")
    monkeypatch.chdir(tmp_path)
    config = _config("ner.cfg", corpus_dir, tiny_dir)
    config["components"]["elmo"] = {"source": str(tmp_path / "rel")}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        init_nlp(config)
    assert [str(w.message) for w in caught if "sourced with" in str(w.message)] == []


def test_component_weights_load_when_paths_elmo_is_empty(corpus_dir, tiny_dir, tmp_path, monkeypatch):
    """[components.elmo] weights = DIR (the setting nlp.add_pipe("elmo", config={"weights": ...}) takes) in a
    shipped config, --paths.elmo left out: spacy train loaded the bundled default model instead, silently,
    and saved a pipeline whose config still said DIR. An empty loader path now defers to the component's
    weights; both set to other weights (--paths.elmo default too): the loader's load, with a warning naming
    both. weights = "" or spaces name none, as an empty --paths.elmo does (they warned before)."""
    torch.manual_seed(1)
    BiLM(BiLMConfig(**TINY)).save(tmp_path / "other")
    torch.manual_seed(2)
    BiLM(BiLMConfig(**TINY)).save(tmp_path / "bundled")
    monkeypatch.setattr(native_io, "DEFAULT_MODEL_DIR", tmp_path / "bundled")  # the bundled model, small
    for paths_elmo, weights, runs, warns in (
        ("", tiny_dir, tiny_dir, False),
        (tiny_dir, tiny_dir, tiny_dir, False),
        (tmp_path / "other", tiny_dir, tmp_path / "other", True),
        ("default", tiny_dir, "default", True),
        (tiny_dir, "", tiny_dir, False),
        (tiny_dir, "  ", tiny_dir, False),
    ):
        config = _config("ner.cfg", corpus_dir, paths_elmo, {"components.elmo.weights": str(weights)})
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            nlp = init_nlp(config)
        ours = [str(w.message) for w in caught if "is not loaded" in str(w.message)]
        assert {w.filename for w in caught if "is not loaded" in str(w.message)} <= {__file__}  # the user's call
        assert nlp.get_pipe("elmo").source == str(runs)
        loaded = get_bilm(nlp.get_pipe("elmo").model).state_dict()
        want = BiLM.load(tmp_path / "bundled" if runs == "default" else runs).state_dict()
        assert all(torch.equal(v, want[k]) for k, v in loaded.items())
        if warns:
            assert len(ours) == 1 and f"({str(weights)!r})" in ours[0] and repr(str(runs)) in ours[0], ours
        else:
            assert ours == []


def test_missing_component_weights_name_their_setting(corpus_dir, tmp_path):
    """[components.elmo] weights naming no directory, --paths.elmo empty: the FileNotFoundError named the
    path only, not the setting it came from (the shipped configs' command lines name --paths.elmo)."""
    config = _config("ner.cfg", corpus_dir, "", {"components.elmo.weights": str(tmp_path / "nope")})
    with pytest.raises(FileNotFoundError, match=r"\[components.elmo\] weights.*names no path.*nope does not exist"):
        init_nlp(config)


@pytest.mark.parametrize("through", ["loader", "component weights", "component weights, no loader"])
def test_missing_paths_elmo_names_it(corpus_dir, tmp_path, through):
    """--paths.elmo naming no directory: the FileNotFoundError named the path only, neither --paths.elmo (the
    shipped configs' [initialize.components.elmo.weights_loader] path = ${paths.elmo}) nor the setting reading
    it ([components.elmo] weights = ${paths.elmo} in a config of one's own, with the loader's path empty or no
    loader at all); it names both, and how to fix it."""
    config = _config("ner.cfg", corpus_dir, tmp_path / "nope")
    setting = r"\[initialize.components.elmo.weights_loader\] path"
    if through != "loader":
        config["components"]["elmo"]["weights"] = "${paths.elmo}"
        setting = r"\[components.elmo\] weights"
        if through == "component weights":
            config["initialize"]["components"]["elmo"]["weights_loader"]["path"] = ""
        else:
            del config["initialize"]["components"]["elmo"]["weights_loader"]
    expected = rf"--paths.elmo names \({setting} = \$\{{paths.elmo\}} .*nope does not exist.*Fix --paths.elmo on "
    with pytest.raises(FileNotFoundError, match=expected):
        init_nlp(config)


@pytest.mark.parametrize("where", ["loader path", "component weights, lazy"])
def test_missing_literal_weights_name_their_setting(corpus_dir, tmp_path, where):
    """A path written in the setting itself (no config variable): the loader's path, or [components.elmo]
    weights loaded at first use (no nlp.initialize): the error named neither."""
    if where == "loader path":
        overrides = {"initialize.components.elmo.weights_loader.path": str(tmp_path / "nope")}
        with pytest.raises(FileNotFoundError, match=r"that \[initialize.components.elmo.weights_loader\] path names: "
                           r".*nope does not exist.*Fix that path, or leave it empty"):  # fmt: skip
            init_nlp(_config("ner.cfg", corpus_dir, "", overrides))
    else:
        nlp = spacy.blank("en")
        nlp.add_pipe("elmo", config={"weights": str(tmp_path / "nope")})
        setting = r"its weights setting \(\[components.elmo\] weights of the pipeline.*nope does not"
        with pytest.raises(FileNotFoundError, match=setting):
            nlp("Alice went home .")


@pytest.mark.parametrize("where", ["component weights, lazy", "paths.elmo", "loader path"])
def test_weights_naming_a_file_name_their_setting(corpus_dir, tmp_path, where):
    """A weights setting naming a file (model.safetensors, not its directory): the loader's ValueError named the
    file only, not the setting ([components.elmo] weights, --paths.elmo, the loader's path) to fix."""
    from spacy_elmo.bilm.native_io import NotAModelDir

    file = tmp_path / "model.safetensors"
    file.write_bytes(b"x")
    # the advice for a setting: its directory, not BiLM.load's BiLM.from_allennlp(...), which a setting cannot take
    found = re.escape(f"{file} is a file, but a model is a directory: pass the model's directory")
    if where == "component weights, lazy":
        nlp = spacy.blank("en")
        nlp.add_pipe("elmo", config={"weights": str(file)})
        with pytest.raises(NotAModelDir, match=r"its weights setting \(\[components.elmo\] weights of the pipeline.*"
                           + found + r".*Fix that setting") as err:  # fmt: skip
            nlp("Alice went home .")
    elif where == "paths.elmo":
        with pytest.raises(NotAModelDir, match=r"--paths.elmo names \(\[initialize.components.elmo.weights_loader\] "
                           r"path = \$\{paths.elmo\}.*" + found + r".*Fix --paths.elmo on ") as err:  # fmt: skip
            init_nlp(_config("ner.cfg", corpus_dir, file))
    else:
        overrides = {"initialize.components.elmo.weights_loader.path": str(file)}
        with pytest.raises(NotAModelDir, match=r"that \[initialize.components.elmo.weights_loader\] path names: .*"
                           + found) as err:  # fmt: skip
            init_nlp(_config("ner.cfg", corpus_dir, "", overrides))
    assert "from_allennlp" not in str(err.value)


@pytest.mark.parametrize("when", ["first use", "to_bytes (spacy assemble)", "replace_listeners"])
def test_missing_paths_elmo_loaded_without_initialize_names_it(corpus_dir, tmp_path, when):
    """[components.elmo] weights = ${paths.elmo} naming no directory, loaded without nlp.initialize (at first use,
    by to_bytes / to_disk as `spacy assemble` saves, by replace_listeners): the error told to fix the 'weights' of
    nlp.add_pipe, which the pipeline never called; it names --paths.elmo, as initialize does. The pipeline is not
    kept alive by its component for that."""
    config = _config("ner.cfg", corpus_dir, tmp_path / "nope", {"components.elmo.weights": "${paths.elmo}"})
    nlp = spacy.util.load_model_from_config(config, auto_fill=True)
    load = {
        "first use": lambda: nlp("Alice went home ."),
        "to_bytes (spacy assemble)": nlp.to_bytes,
        "replace_listeners": lambda: nlp.replace_listeners("elmo", "ner", ["model.tok2vec.elmo"]),
    }[when]
    expected = r"--paths.elmo names \(\[components.elmo\] weights = \$\{paths.elmo\} .*nope does not exist.*Fix --paths"
    with pytest.raises(FileNotFoundError, match=expected):
        load()
    pipeline = weakref.ref(nlp)
    del nlp, load
    gc.collect()
    assert pipeline() is None


def test_missing_weights_of_a_component_moved_elsewhere_name_the_setting(corpus_dir, tmp_path):
    """A component moved to another pipeline (``source``, then removed from the first) names its own setting, not
    the config variable that the first pipeline's new 'elmo' reads: that config says nothing of this component."""
    first = spacy.util.load_model_from_config(
        _config("ner.cfg", corpus_dir, tmp_path / "nope", {"components.elmo.weights": "${paths.elmo}"}), auto_fill=True
    )
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", source=first)
    nlp.get_pipe("elmo").cfg["weights"] = str(tmp_path / "other")
    first.replace_pipe("elmo", "elmo", config={"weights": "${paths.elmo}"})
    setting = r"its weights setting \(\[components.elmo\] weights of the pipeline.*other does not exist"
    with pytest.raises(FileNotFoundError, match=setting):
        nlp("Alice went home .")


def test_saved_pipeline_with_dropout_1_names_the_fix(first, tmp_path):
    """A pipeline saved (before the range check) with the listener's dropout = 1 no longer loads: the error
    named neither the component nor the saved config.cfg, and pointed to ScalarMix.v1, which has no dropout.
    Following it (any dropout in [0, 1)) loads the pipeline with the same predictions."""
    shutil.copytree(first, tmp_path / "p")
    text = "Alice went home ."
    expected = spacy.load(first)(text)._.elmo  # ner's listener reads these
    cfg = tmp_path / "p" / "config.cfg"
    saved = cfg.read_text()
    assert saved.count("dropout = 0.5") == 1
    cfg.write_text(saved.replace("dropout = 0.5", "dropout = 1.0"))
    with pytest.raises(ValueError) as err:
        spacy.load(tmp_path / "p")
    message = str(err.value)
    assert "of the 'ner' component has dropout = 1.0" in message and "[components.ner.model.tok2vec.elmo]" in message
    assert "PIPELINE/config.cfg" in message and "ScalarMix" not in message and "mix_l2" not in message
    cfg.write_text(saved.replace("dropout = 0.5", "dropout = 0.999"))
    numpy.testing.assert_array_equal(spacy.load(tmp_path / "p")(text)._.elmo, expected)
    assert _annotations(spacy.load(tmp_path / "p")(text)) == _annotations(spacy.load(first)(text))


def test_sourced_elmo_warns_in_init_nlp_only_not_when_an_assembled_pipeline_loads(corpus_dir, tiny_dir, first, tmp_path):
    """spacy assemble (load_model_from_config, to_disk) keeps spaCy's list of sourced components in the saved
    meta.json: every spacy.load of that pipeline, and every add_pipe after it, relinked it and warned that
    spaCy "never initializes" the sourced elmo and to "drop `source`", in a pipeline loaded for inference
    whose config has no source. Only init_nlp (spacy train) warns."""
    from spacy.util import load_model_from_config

    torch.manual_seed(1)
    BiLM(BiLMConfig(**TINY)).save(tmp_path / "other")
    config = _config("ner.cfg", corpus_dir, tmp_path / "other", {})
    for name in ("elmo", "ner"):
        config["components"][name] = {"source": str(first)}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_model_from_config(config, auto_fill=True).to_disk(tmp_path / "assembled")
        loaded = spacy.load(tmp_path / "assembled")
        loaded.add_pipe("sentencizer", name="second_sentencizer")
        loaded("Alice went home .")
    assert "elmo" in loaded.meta["_sourced_vectors_hashes"]  # what made it warn
    assert [str(w.message) for w in caught if "sourced with" in str(w.message)] == []


def test_shipped_configs_share_every_setting_but_their_task():
    """The configs cannot include one another: each repeats the elmo component, the tok2vec of its
    listeners, the corpora, training and initialize blocks. They stay the same in every config (and in
    every listening component), so that an edit to one reaches the others."""
    from spacy_elmo.configs import config_names, config_path

    def shared(config):
        components = config["components"]
        tasks = [block for name, block in components.items() if name not in ("sentencizer", "elmo")]
        tok2vecs = [block["model"]["tok2vec"] for block in tasks]
        assert tok2vecs and all(t == tok2vecs[0] for t in tok2vecs)
        training = {k: v for k, v in config["training"].items() if k != "score_weights"}
        nlp = {k: v for k, v in config["nlp"].items() if k != "pipeline"}
        rest = {k: v for k, v in config.items() if k not in ("components", "training", "nlp")}
        return rest, nlp, training, components["sentencizer"], components["elmo"], tok2vecs[0]

    configs = {name: spacy.util.load_config(config_path(name), interpolate=False) for name in config_names()}
    assert [f"{name}.cfg" for name in configs] == [cfg for cfg, _ in TASKS]  # test_spacy_train trains every one
    first = shared(configs["ner"])
    for (name, config), (_, tasks) in zip(configs.items(), TASKS):
        assert shared(config) == first, name
        assert config["nlp"]["pipeline"] == ["sentencizer", "elmo", *tasks]


@pytest.mark.parametrize("cfg", [cfg for cfg, _ in TASKS])
def test_debug_config_shows_the_functions_of_shipped_configs(cfg, corpus_dir, tiny_dir, capsys):
    """`spacy debug config CFG --show-functions` (what the README says spaCy's CLI does on these configs)
    failed with "Cant't find 'spacy.ConsoleLogger.v1' in registry loggers": spaCy's default logger name,
    which training resolves from spacy-legacy but that lookup does not. The configs name ConsoleLogger.v3;
    every function is listed with where it comes from, ours included."""
    from spacy.cli.debug_config import debug_config

    overrides = {"paths.train": str(corpus_dir / "train.spacy"), "paths.dev": str(corpus_dir / "dev.spacy"),
                 "paths.elmo": str(tiny_dir)}  # fmt: skip
    debug_config(CONFIGS / cfg, overrides=overrides, show_funcs=True, show_vars=True)
    shown = capsys.readouterr().out
    assert "spacy.ConsoleLogger.v3" in shown and "spacy_elmo.WeightsLoader.v1" in shown
    assert "spacy_elmo.ElmoListener.v1" in shown and "spacy_elmo.pipeline.architectures" in shown


@pytest.mark.parametrize("content, found", [
    ({"config.json": '{"architectures": ["BertModel"], "model_type": "bert"}'}, "was not written by spacy-elmo"),
    ({"options.json": "{}"}, "holds 0 .hdf5 file(s) and 1 options.json"),
    ({"checkpoint": "x", "model.ckpt-1.index": "x"}, "holds a TensorFlow checkpoint"),
])
def test_weights_setting_of_another_tools_model_names_the_setting(tmp_path, content, found):
    """A weights setting naming a Hugging Face directory, a lone options.json or a bilm-tf checkpoint raised the
    loader's ValueError alone: only a path that names nothing said which setting to fix."""
    from spacy_elmo.bilm.native_io import NotAModelDir

    weights = tmp_path / "other_tool"
    weights.mkdir()
    for name, text in content.items():
        (weights / name).write_text(text)
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(weights)})
    setting = r"cannot load its weights setting \(\[components.elmo\] weights of the pipeline.*other_tool.*"
    with pytest.raises(NotAModelDir, match=setting + re.escape(found) + r".*Fix that setting") as err:
        nlp("Alice went home .")
    assert str(err.value).count("cannot load its weights setting") == 1


def _flat(block, prefix=""):
    """A config block as ``{"a.b.c": value}``."""
    out = {}
    for key, value in block.items():
        out.update(_flat(value, f"{prefix}{key}.") if isinstance(value, dict) else {prefix + key: value})
    return out


@pytest.mark.parametrize("cfg", [cfg for cfg, _ in TASKS])
def test_fill_config_adds_no_setting_of_ours_to_shipped_configs(cfg, tmp_path):
    """`spacy init fill-config` of a shipped config adds nothing to the elmo component or a listener
    (it added each listener's layer_norm, bilm and frozen): what the run uses is written out, for users to see."""
    from spacy.cli.init_config import fill_config

    given, filled = fill_config(tmp_path / cfg, CONFIGS / cfg, silent=True)
    added = set(_flat(filled.copy()["components"])) - set(_flat(given.copy()["components"]))
    ours = {key for key in added if not key.startswith("sentencizer.")}  # spaCy's own component's defaults
    assert ours == set(), ours


ZH_CHARS = {"@tokenizers": "spacy.zh.ChineseTokenizer", "segmenter": "char"}
RULES = {"@tokenizers": "spacy.Tokenizer.v1"}


def _pretrained_as(tiny_dir, path, lang, tokenizer):
    """The tiny biLM saved as ``pretrain --lang LANG`` records a model (its language and tokenizer block)."""
    BiLM.load(tiny_dir).save(path, provenance={"trained_by": "spacy-elmo pretrain", "lang": lang, "tokenizer": tokenizer})
    return path


def _token_warnings(caught):
    return [str(w.message) for w in caught if "pretrained on the tokens" in str(w.message)]


# (nlp overrides, the model's language and tokenizer, warns): ner.cfg's [nlp.tokenizer] is spacy.Tokenizer.v1
TOKENIZER_CASES = [
    ({"nlp.lang": "zh"}, "zh", ZH_CHARS, True),  # whole phrases read by a model of characters
    ({"nlp.lang": "ko"}, "ko", RULES, False),  # the README's Korean fallback, configured as pretrain read it
    ({"nlp.lang": "zh", "nlp.tokenizer": ZH_CHARS}, "zh", ZH_CHARS, False),  # the documented override
]


@pytest.mark.parametrize("build", ["init_nlp", "load_model_from_config"])
@pytest.mark.parametrize("overrides,lang,tokenizer,warns", TOKENIZER_CASES)
def test_pipeline_built_from_a_config_is_checked_against_its_own_tokenizer(
    build, overrides, lang, tokenizer, warns, corpus_dir, tiny_dir, tmp_path
):
    """The factory recorded the pipeline's tokenizer while Language.from_config was still building it (nlp.config
    then the language class's default, the real one set at its end): ner.cfg with --nlp.lang zh (really
    spacy.Tokenizer.v1) ran a model of characters silently, and the Korean fallback configured as pretrain read
    it got a warning naming spacy.ko.KoreanTokenizer, which the pipeline never used."""
    model = _pretrained_as(tiny_dir, tmp_path / "model", lang, tokenizer)
    if build == "load_model_from_config":  # no initialize: [components.elmo] weights, not --paths.elmo
        overrides = {**overrides, "components.elmo.weights": str(model)}
    config = _config("ner.cfg", corpus_dir, model, overrides)
    text = "我们今天去北京大学参观。" if lang == "zh" else "나는 학교에 간다 ."
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if build == "init_nlp":  # spacy train: the weights load at initialize
            nlp = init_nlp(config)
            nlp(text)
        else:  # the weights load at first use (ner, not initialized, is not run)
            nlp = spacy.util.load_model_from_config(config, auto_fill=True)
            nlp.get_pipe("elmo")(nlp.make_doc(text))
    messages = _token_warnings(caught)
    assert len(messages) == int(warns), messages
    if warns:
        assert "this pipeline is 'zh' with tokenizer {'@tokenizers': 'spacy.Tokenizer.v1'}" in messages[0]


@pytest.mark.parametrize("overrides,lang,tokenizer,warns", TOKENIZER_CASES)
def test_a_config_built_pipeline_pickled_before_its_weights_load_is_checked_against_its_own_tokenizer(
    overrides, lang, tokenizer, warns, corpus_dir, tiny_dir, tmp_path
):
    """Pickled (or sent to a spawned nlp.pipe worker) before its weights loaded, the copy compared them at first use
    with what the factory recorded while Language.from_config was still building (the language class's default
    tokenizer): the Korean fallback configured as pretrain read it warned, Chinese phrases against characters did
    not."""
    import pickle

    model = _pretrained_as(tiny_dir, tmp_path / "model", lang, tokenizer)
    config = _config("ner.cfg", corpus_dir, model, {**overrides, "components.elmo.weights": str(model)})
    nlp = pickle.loads(pickle.dumps(spacy.util.load_model_from_config(config, auto_fill=True)))
    text = "我们今天去北京大学参观。" if lang == "zh" else "나는 학교에 간다 ."
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        nlp.get_pipe("elmo")(nlp.make_doc(text))
    assert len(_token_warnings(caught)) == int(warns), _token_warnings(caught)


@pytest.mark.parametrize("overrides,lang,tokenizer,warns", TOKENIZER_CASES)
def test_saved_pipeline_checks_weights_against_its_own_tokenizer(
    overrides, lang, tokenizer, warns, corpus_dir, tiny_dir, tmp_path
):
    """spacy.load builds the saved pipeline through Language.from_config too: weights loaded into it afterwards
    were compared with the language class's default tokenizer, not the one saved in its config.cfg."""
    model = _pretrained_as(tiny_dir, tmp_path / "model", lang, tokenizer)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        init_nlp(_config("ner.cfg", corpus_dir, model, overrides)).to_disk(tmp_path / "saved")
        nlp = spacy.load(tmp_path / "saved")  # its own weights checked at load (their warning: the next test's)
    assert nlp.config["nlp"]["tokenizer"] == overrides.get("nlp.tokenizer", RULES)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        nlp.get_pipe("elmo").load_weights(str(model))
    assert len(_token_warnings(caught)) == int(warns)


@pytest.mark.parametrize("overrides,lang,tokenizer,warns", TOKENIZER_CASES)
def test_weights_a_saved_pipeline_carries_are_checked_when_it_loads(
    overrides, lang, tokenizer, warns, corpus_dir, tiny_dir, tmp_path
):
    """spacy.load and nlp.from_bytes set the weights the pipeline carries without the tokenizer check (warned once,
    at spacy train's initialize, then never again): a Chinese pipeline of phrases saved with a model of characters
    loaded silently."""
    model = _pretrained_as(tiny_dir, tmp_path / "model", lang, tokenizer)
    config = _config("ner.cfg", corpus_dir, model, overrides)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        saved = init_nlp(config)
        saved.to_disk(tmp_path / "saved")
        data = saved.to_bytes()
        blank = spacy.util.load_model_from_config(saved.config, auto_fill=True)
    for load in (lambda: spacy.load(tmp_path / "saved"), lambda: blank.from_bytes(data)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            load()
        messages = _token_warnings(caught)
        assert len(messages) == int(warns), messages
        if warns:
            assert "this pipeline is 'zh' with tokenizer {'@tokenizers': 'spacy.Tokenizer.v1'}" in messages[0]


@pytest.mark.parametrize("recorded", [ZH_CHARS, None], ids=["tokenizer-recorded", "older-model"])
def test_the_tokenizer_warning_gives_a_fix_that_silences_it(recorded, corpus_dir, tiny_dir, tmp_path):
    """The warning said "or pretrain with this pipeline's tokenizer", which pretrain cannot (it reads with
    spacy.blank(LANG)'s tokenizer only). It now gives the spacy train overrides that build the pipeline as the
    model read its text: applied (as spacy train parses them, JSON values) they silence it; and pretraining
    again with --lang, where the pipeline's tokenizer is its language's default (ner.cfg's English is)."""
    provenance = {"trained_by": "spacy-elmo pretrain", "lang": "zh", **({"tokenizer": recorded} if recorded else {})}
    BiLM.load(tiny_dir).save(tmp_path / "model", provenance=provenance)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        init_nlp(_config("ner.cfg", corpus_dir, tmp_path / "model"))
    (message,) = _token_warnings(caught)
    assert "pretrain with this pipeline's tokenizer" not in message
    assert message.endswith("Or pretrain a model on this pipeline's tokens: `spacy-elmo pretrain TEXT OUT_DIR "
                            "--lang en` reads the text with this very tokenizer.")
    found = re.search(r"--nlp\.lang (\S+) --nlp\.tokenizer '([^']+)'", message)
    overrides = {"nlp.lang": found.group(1), "nlp.tokenizer": srsly.json_loads(found.group(2))}
    assert overrides == {"nlp.lang": "zh", "nlp.tokenizer": ZH_CHARS}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        nlp = init_nlp(_config("ner.cfg", corpus_dir, tmp_path / "model", overrides))
    assert not _token_warnings(caught)
    assert [t.text for t in nlp("我喜欢茶")] == ["我", "喜", "欢", "茶"]


@pytest.mark.parametrize("lang", ["ko", "ja", "th", "vi"])
def test_the_advice_for_an_older_model_builds_where_its_languages_tokenizer_needs_packages(
    lang, corpus_dir, tiny_dir, tmp_path
):
    """An older model (its language recorded, not its tokenizer) is checked by language alone, but the advice named
    spacy.blank(LANG)'s default block (spacy.ko.KoreanTokenizer: mecab-ko), which fails to build without its
    packages: it names the block pretrain --lang LANG reads with here (the rule-based fallback, there), and both the
    Python and the overrides it gives build a pipeline that the model runs in silently."""
    BiLM.load(tiny_dir).save(tmp_path / "model", provenance={"trained_by": "spacy-elmo pretrain", "lang": lang})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        init_nlp(_config("ner.cfg", corpus_dir, tmp_path / "model"))
    (message,) = _token_warnings(caught)
    python = re.search(r"in Python (spacy\.blank\(.*?\)); in a training config", message).group(1)
    assert eval(python, {"spacy": spacy}).lang == lang  # noqa: S307 - the advice's own Python, built as given
    found = re.search(r"--nlp\.lang (\S+) --nlp\.tokenizer '([^']+)'", message)
    overrides = {"nlp.lang": found.group(1), "nlp.tokenizer": srsly.json_loads(found.group(2))}
    assert overrides["nlp.lang"] == lang
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        init_nlp(_config("ner.cfg", corpus_dir, tmp_path / "model", overrides))
    assert not _token_warnings(caught)


def test_the_pretrain_advice_for_another_block_is_a_tokenizer_file(corpus_dir, tiny_dir, tmp_path):
    """ner.cfg with --nlp.lang zh reads Chinese with spacy.Tokenizer.v1, which pretrain --lang zh alone never does
    (it reads characters): the warning names the overrides, and pretrain --tokenizer with a file of that block,
    its lines shown last, which read back to the pipeline's block."""
    from spacy_elmo.training.data import read_tokenizer_config

    model = _pretrained_as(tiny_dir, tmp_path / "model", "zh", ZH_CHARS)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        init_nlp(_config("ner.cfg", corpus_dir, model, {"nlp.lang": "zh"}))
    (message,) = _token_warnings(caught)
    overrides = """--nlp.lang zh --nlp.tokenizer '{"@tokenizers": "spacy.zh.ChineseTokenizer", "segmenter": "char"}'."""
    assert overrides in message and "`spacy-elmo pretrain TEXT OUT_DIR --lang zh --tokenizer tokenizer.cfg`" in message
    assert "spacy-elmo pretrain TEXT OUT_DIR --lang zh`" not in message  # --lang zh alone reads characters
    lines = message.split("holding these lines:\n", 1)[1]
    (tmp_path / "tokenizer.cfg").write_text(lines, encoding="utf-8")
    assert read_tokenizer_config(tmp_path / "tokenizer.cfg", "zh") == {"@tokenizers": "spacy.Tokenizer.v1"}


def test_the_readmes_chinese_training_command_builds_the_pipeline_as_the_model_read(tiny_dir, tmp_path):
    """README: the shipped configs with --nlp.lang zh and the --nlp.tokenizer override (a JSON value on spacy
    train's command line) train a pipeline that reads characters, as a model of pretrain --lang zh did: no
    tokenizer warning, and the saved pipeline keeps the block."""
    import shlex
    from pathlib import Path

    from spacy.tokens import DocBin

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    (command,) = [c for c in re.findall(r"python -m spacy train [^\n]*\\\n[^\n]*", readme) if "--nlp.tokenizer" in c]
    words = shlex.split(command.replace("\\\n", " "))
    overrides = words[words.index("--nlp.lang"):]
    assert overrides[:2] == ["--nlp.lang", "zh"] and len(overrides) == 4
    model = _pretrained_as(tiny_dir, tmp_path / "model", "zh", ZH_CHARS)
    nlp = spacy.blank("zh")
    docs = []
    for text in ["我们今天去北京大学参观。", "他喜欢吃苹果和香蕉！", "中华人民共和国成立于一九四九年。"] * 4:
        doc = nlp(text)
        start = text.find("北京")
        if start >= 0:
            doc.ents = [doc.char_span(start, start + 2, label="LOC")]
        docs.append(doc)
    DocBin(docs=docs).to_disk(tmp_path / "zh.spacy")
    config = shutil.copy(CONFIGS / "ner.cfg", tmp_path / "ner.cfg")
    cmd = [sys.executable, "-m", "spacy", "train", str(config), "--output", str(tmp_path / "out"),
           "--paths.train", str(tmp_path / "zh.spacy"), "--paths.dev", str(tmp_path / "zh.spacy"),
           "--paths.elmo", str(model), "--training.max_steps", "2", "--training.eval_frequency", "2", *overrides]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "pretrained on the tokens" not in result.stderr
    trained = spacy.load(tmp_path / "out" / "model-last")
    assert trained.config["nlp"]["tokenizer"] == ZH_CHARS and trained.lang == "zh"
    assert [t.text for t in trained("我喜欢茶")] == ["我", "喜", "欢", "茶"]
