"""spacy_elmo.allennlp_compat: AllenNLP's ``Elmo`` and ``ElmoTokenEmbedder`` (2.10.1) and ``ElmoEmbedder`` (0.9) APIs.

Against AllenNLP's real ``Elmo`` class run from its wheel (the ``allennlp`` fixture of
tests/conftest.py: skipped offline), and against the NumPy float64 oracle (always).
"""

import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from spacy_elmo import BiLM
from spacy_elmo.allennlp_compat import Elmo, ElmoEmbedder, ElmoTokenEmbedder, batch_to_ids
from tests.backends import BACKENDS
from tests.bilm.oracle import NumpyElmo, numpy_scalar_mix, options, write_model_files

ATOL = 1e-5
OPTS = options(filters=((1, 4), (2, 6), (3, 8)))
# Ragged batches, an empty sentence, a smaller then a larger batch (the carried states' rows).
BATCHES = [
    [["The", "bank", "of", "the", "river", "."], ["밥", "먹었어요", "?"], [], ["a"]],
    [["one", "more"], ["x"]],
    [["emoji", "🎉🎉", "x" * 60, ""], ["b", "c"], ["d"], ["the", "end"], ["new", "row"]],
]
# Per representation: pre-softmax layer weights and gamma (distinct, so that mixes differ).
MIXES = [(np.array([0.3, -1.0, 2.0]), 1.7), (np.array([-0.5, 0.8, 0.1]), 0.6)]
FIXED = [-9e10, 1.0, -9e10]  # AllenNLP's docs' example: the first LSTM layer only


@pytest.fixture
def files(tmp_path):
    return write_model_files(tmp_path, OPTS, seed=3)


def set_mixes(elmo, mixes, allennlp_side=False):
    """Give representation k the weights and gamma of ``mixes[k]`` (AllenNLP keeps one parameter per layer)."""
    with torch.no_grad():
        for k, (weights, gamma) in enumerate(mixes):
            mix = getattr(elmo, f"scalar_mix_{k}")
            if allennlp_side:
                for p, w in zip(mix.scalar_parameters, weights):
                    p.fill_(float(w))
            else:
                mix.scalar_parameters.copy_(torch.tensor(weights))
            mix.gamma.fill_(gamma)


def oracle_elmo(oracle, sentences, mixes, do_layer_norm=False, keep=False, stateful=True):
    """AllenNLP's Elmo in NumPy: mix the layers with the markers (layer norm over the batch's
    unmasked positions, markers included), then drop the markers (padding zero)."""
    full = oracle.batch(sentences, stateful=stateful, keep_boundaries=True)  # (L + 1, n + 2, D) each
    L1, D = full[0].shape[0], full[0].shape[2]
    B, T = len(sentences), max(len(s) for s in sentences) + 2
    layers, mask = np.zeros((L1, B, T, D)), np.zeros((B, T), dtype=bool)
    for i, f in enumerate(full):
        layers[:, i, : f.shape[1]] = f
        mask[i, : f.shape[1]] = True
    reps = []
    for weights, gamma in mixes:
        mixed = numpy_scalar_mix(list(layers), weights, gamma, mask if do_layer_norm else None)
        if not keep:
            inner = np.zeros((B, T - 2, D))
            for i, s in enumerate(sentences):
                inner[i, : len(s)] = mixed[i, 1 : len(s) + 1]
            mixed = inner
        reps.append(mixed)
    return reps, (mask if keep else mask[:, 2:])


def assert_output(out, reps, mask):
    assert torch.equal(out["mask"], torch.as_tensor(mask))
    assert len(out["elmo_representations"]) == len(reps)
    for k, (got, expected) in enumerate(zip(out["elmo_representations"], reps)):
        assert tuple(got.shape) == expected.shape
        np.testing.assert_allclose(got.detach().double().numpy(), expected, atol=ATOL, rtol=0, err_msg=f"rep {k}")


# -- against the NumPy oracle (no wheel needed) ------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("stateful", [True, False], ids=["stateful", "stateless"])
@pytest.mark.parametrize(
    "kwargs",
    [{}, {"do_layer_norm": True}, {"keep_sentence_boundaries": True},
     {"do_layer_norm": True, "keep_sentence_boundaries": True}],
    ids=["plain", "layer-norm", "boundaries", "layer-norm-boundaries"],
)
def test_elmo_matches_oracle(files, backend, stateful, kwargs):
    elmo = Elmo(*files, num_output_representations=2, dropout=0.5, stateful=stateful, backend=backend, **kwargs).eval()
    set_mixes(elmo, MIXES)
    oracle = NumpyElmo(OPTS, files[1])
    for sentences in BATCHES:
        with torch.no_grad():
            out = elmo(batch_to_ids(sentences))
        reps, mask = oracle_elmo(oracle, sentences, MIXES, kwargs.get("do_layer_norm", False),
                                 kwargs.get("keep_sentence_boundaries", False), stateful)
        assert_output(out, reps, mask)


def test_fixed_scalar_mix_parameters_are_not_trained(files):
    elmo = Elmo(*files, 1, dropout=0.0, scalar_mix_parameters=FIXED, stateful=False).eval()
    mix = elmo.scalar_mix_0
    assert not mix.scalar_parameters.requires_grad and not mix.gamma.requires_grad
    assert [p for p in elmo.parameters() if p.requires_grad] == []
    out = elmo(batch_to_ids(BATCHES[0]))
    reps, mask = oracle_elmo(NumpyElmo(OPTS, files[1]), BATCHES[0], [(np.array(FIXED), 1.0)], stateful=False)
    assert_output(out, reps, mask)
    # the first LSTM layer alone, as AllenNLP's docs promise for these weights
    only = NumpyElmo(OPTS, files[1]).sentence(BATCHES[0][0])[1]
    np.testing.assert_allclose(out["elmo_representations"][0][0, :6].detach().numpy(), only, atol=ATOL)


def test_more_leading_dimensions_are_flattened_and_restored(files):
    elmo = Elmo(*files, 1, dropout=0.0, stateful=False).eval()
    ids = batch_to_ids(BATCHES[0] + [["z"], ["y", "x"]])  # (6, T, 50)
    with torch.no_grad():
        flat, nested = elmo(ids), elmo(ids.view(2, 3, *ids.shape[1:]))
    assert nested["mask"].shape == (2, 3, ids.shape[1])
    assert torch.equal(nested["mask"].reshape(6, -1), flat["mask"])
    torch.testing.assert_close(nested["elmo_representations"][0].reshape(6, ids.shape[1], -1),
                               flat["elmo_representations"][0], atol=1e-6, rtol=0)


@pytest.mark.parametrize("kwargs", [{}, {"keep_sentence_boundaries": True, "do_layer_norm": True}],
                         ids=["plain", "boundaries-layer-norm"])
def test_a_batch_of_empty_sentences(files, kwargs):
    """Ids (B, 0, 50), every sentence empty (the BiLM gives (B, 0, 2P)): reshape(-1, 0, 50) failed,
    "cannot reshape tensor of 0 elements"; with more leading dimensions too."""
    elmo = Elmo(*files, 2, dropout=0.0, stateful=False, **kwargs).eval()
    set_mixes(elmo, MIXES)
    sentences = [[], []]
    ids = batch_to_ids(sentences)
    with torch.no_grad():
        out, nested = elmo(ids), elmo(ids.view(1, 2, 0, 50))
    keep = kwargs.get("keep_sentence_boundaries", False)
    reps, mask = oracle_elmo(NumpyElmo(OPTS, files[1]), sentences, MIXES, kwargs.get("do_layer_norm", False),
                             keep, stateful=False)
    assert_output(out, reps, mask)
    assert nested["mask"].shape == (1, 2, 2 if keep else 0)
    assert all(r.shape == (1, *out["elmo_representations"][0].shape) for r in nested["elmo_representations"])


def test_model_directory_and_default_in_place_of_the_files(files, tmp_path):
    """A spacy-elmo model directory (or "default") as options_file with weight_file=None, or module=BiLM."""
    BiLM.from_allennlp(*files).save(tmp_path / "native")
    ids = batch_to_ids(BATCHES[0])
    with torch.no_grad():
        expected = Elmo(*files, 1, dropout=0.0).eval()(ids)["elmo_representations"][0]
        from_dir = Elmo(tmp_path / "native", None, 1, dropout=0.0).eval()(ids)["elmo_representations"][0]
        from_module = Elmo(None, None, 1, dropout=0.0, module=BiLM.load(tmp_path / "native")).eval()(ids)
    torch.testing.assert_close(from_dir, expected, atol=1e-6, rtol=0)
    torch.testing.assert_close(from_module["elmo_representations"][0], expected, atol=1e-6, rtol=0)
    default = Elmo("default", None, 2)
    assert default.get_output_dim() == BiLM.load("default").config.output_dim == 256
    assert ElmoEmbedder().embed_sentence(["Hello", "world"]).shape == (3, 2, 256)
    # ElmoTokenEmbedder() as ElmoEmbedder(): the bundled model (AllenNLP's default URLs; was a TypeError)
    embedder = ElmoTokenEmbedder(dropout=0.0, stateful=False).eval()
    elmo = Elmo("default", None, 1, dropout=0.0, stateful=False).eval()
    with torch.no_grad():
        torch.testing.assert_close(embedder(ids), elmo(ids)["elmo_representations"][0], atol=0, rtol=0)


def test_data_parallel_replicas_mix_with_their_own_scalar_mixes(files, monkeypatch):
    """nn.DataParallel's replicate() (its CUDA broadcast replaced by per-replica clones, to run on the
    CPU): the mixes were kept in a plain list too, which replicas share (a shallow copy of the
    attributes), so each replica mixed with the original's parameters (on multiple GPUs: a device
    error) and ignored its own; AllenNLP looks them up by name."""
    replicate_module = sys.modules["torch.nn.parallel.replicate"]
    monkeypatch.setattr(replicate_module, "_broadcast_coalesced_reshape", lambda tensors, devices, detach=False: [
        [t.detach().clone() if detach else t.clone() for t in tensors] for _ in devices])
    elmo = Elmo(*files, 2, dropout=0.0, stateful=False).eval()
    set_mixes(elmo, MIXES)
    replicas = replicate_module.replicate(elmo, [0, 1])
    other = [(weights[::-1].copy(), 2 * gamma) for weights, gamma in MIXES]
    set_mixes(replicas[1], other)
    oracle = NumpyElmo(OPTS, files[1])
    for replica, mixes in zip(replicas, (MIXES, other)):
        assert replica.scalar_mix_0 is not elmo.scalar_mix_0
        with torch.no_grad():
            out = replica(batch_to_ids(BATCHES[0]))
        assert_output(out, *oracle_elmo(oracle, BATCHES[0], mixes, stateful=False))


def test_requires_grad_fine_tunes_the_bilm(files):
    ids = batch_to_ids(BATCHES[0])
    frozen = Elmo(*files, 1, dropout=0.0)
    frozen(ids)["elmo_representations"][0].sum().backward()
    assert all(p.grad is None and not p.requires_grad for p in frozen.bilm.parameters())
    assert frozen.scalar_mix_0.scalar_parameters.grad is not None  # the mix still learns
    tuned = Elmo(*files, 1, dropout=0.0, requires_grad=True)
    tuned(ids)["elmo_representations"][0].sum().backward()
    grads = {name: p.grad for name, p in tuned.bilm.named_parameters()}
    assert all(g is not None for g in grads.values()), [n for n, g in grads.items() if g is None]
    assert grads["token_encoder.char_embedding"].abs().sum() > 0


def test_dropout_applies_in_train_mode_only(files):
    elmo = Elmo(*files, 2, dropout=0.5, stateful=False)
    ids = batch_to_ids(BATCHES[0])
    with torch.no_grad():
        clean = elmo.eval()(ids)["elmo_representations"]
        torch.manual_seed(0)
        noisy = elmo.train()(ids)["elmo_representations"]
    for c, n in zip(clean, noisy):
        kept = n != 0
        assert 0.3 < (kept[c != 0]).float().mean() < 0.7
        torch.testing.assert_close(n[kept], 2 * c[kept])  # inverted dropout: kept values scaled by 1 / (1 - p)
    assert not torch.equal(noisy[0] != 0, noisy[1] != 0)  # one draw per representation


def test_elmo_embedder_matches_oracle(files):
    """0.9's ElmoEmbedder: float32 (L + 1, n, 2P) per sentence, markers removed, states carried per row."""
    embedder = ElmoEmbedder(*files)
    # 0.9 built its biLM frozen (requires_grad=False) and in eval mode: calling embedder.elmo_bilm directly builds
    # no autograd graph, and its parameters given to an optimizer are not trained
    assert not embedder.elmo_bilm.training and [p for p in embedder.elmo_bilm.parameters() if p.requires_grad] == []
    oracle = NumpyElmo(OPTS, files[1])
    # an empty sentence carries its row's states on, as in AllenNLP, in a batch of empty ones too
    for sentences in [BATCHES[0], [[], []], *BATCHES[1:]]:
        got = embedder.embed_batch(sentences)
        for vec, expected in zip(got, oracle.batch(sentences, stateful=True)):
            assert vec.dtype == np.float32 and vec.shape == expected.shape
            np.testing.assert_allclose(vec, expected, atol=ATOL, rtol=0)
    single = ElmoEmbedder(*files, stateful=False)
    sentences = [s for batch in BATCHES for s in batch]
    for vec, sentence in zip(single.embed_sentences(iter(sentences), batch_size=3), sentences):
        np.testing.assert_allclose(vec, oracle.sentence(sentence), atol=ATOL, rtol=0)
    assert single.embed_sentence([]).shape == (3, 0, 16)
    np.testing.assert_allclose(single.embed_sentence(["a"]), oracle.sentence(["a"]), atol=ATOL, rtol=0)
    activations, mask = single.batch_to_embeddings(BATCHES[0])
    assert activations.shape == (4, 3, 6, 16) and mask.sum(1).tolist() == [6, 3, 0, 1]
    # 0.9's mask (remove_sentence_boundaries) was int64, and code inverted it with ``1 - mask``
    assert mask.dtype == torch.int64 and (1 - mask).sum(1).tolist() == [0, 3, 6, 5]


def test_elmo_embedder_runs_nothing_for_the_batch_of_one_empty_sentence(files):
    """0.9's embed_batch answered the batch [[]] (embed_sentence([])) with its empty embedding and ran no biLM: row 0's
    carried states stayed as they were. It ran <S> </S> through row 0 here, so the next sentence's vectors differed
    from 0.9's. embed_sentences' batches of one empty sentence too; a larger batch runs its empty sentences, as 0.9's
    did (test_elmo_embedder_matches_oracle)."""
    oracle = NumpyElmo(OPTS, files[1])
    embedder = ElmoEmbedder(*files)
    first, second = ["The", "bank", "of", "the", "river", "."], ["It", "was", "steep", "."]
    got = [embedder.embed_sentence(first), embedder.embed_sentence([]), embedder.embed_batch([()])[0],
           embedder.embed_sentence(second)]
    got += list(embedder.embed_sentences([[], ["a"], [], ["b", "c"]], batch_size=1))
    expected = [oracle.batch([s], stateful=True)[0] for s in (first, second, ["a"], ["b", "c"])]  # no empty one runs
    for vec in (got[1], got[2], got[4], got[6]):
        assert vec.dtype == np.float32 and vec.shape == (3, 0, 16)
    for vec, want in zip((got[0], got[3], got[5], got[7]), expected):
        np.testing.assert_allclose(vec, want, atol=ATOL, rtol=0)


def test_elmo_embedder_embed_sentences_refuses_at_the_call_and_stays_lazy(files):
    """embed_sentences was a generator: a set, a mapping or batch_size=0 was refused only at the first next(), far
    from the call that passed it (embed_batch refuses at its call). Now the call raises; the sentences are still
    read only as the vectors are asked for."""
    embedder = ElmoEmbedder(*files, stateful=False)
    for sentences, size, error in (({("a", "b"), ("c",)}, 1, TypeError), ({1: ["a"]}, 1, TypeError),
                                   ("a b", 1, TypeError), ([["a"]], 0, ValueError), ([["a"]], "2", ValueError)):
        with pytest.raises(error):
            embedder.embed_sentences(sentences, batch_size=size)  # the call, not next()
    read = []

    def sentences():
        for sentence in (["a", "b"], ["c"], ["d"]):
            read.append(sentence)
            yield sentence

    vectors = embedder.embed_sentences(sentences(), batch_size=2)
    assert read == []  # nothing read at the call
    assert next(vectors).shape[1] == 2 and len(read) == 2  # one batch
    assert [v.shape[1] for v in vectors] == [1, 1] and len(read) == 3


def test_elmo_embedder_takes_the_batches_batch_to_ids_takes_and_refuses_a_set(files):
    """A set or frozenset of sentences was refused by batch_to_ids, but embed_batch and embed_sentences gave its
    vectors in hash order; a spaCy Doc in a batch is told to pass its texts without naming batch_to_ids."""
    from tests.bilm.test_token_cache import _AS_LISTS, _batches

    embedder = ElmoEmbedder(*files, stateful=False)
    for name in _batches():
        rows = _AS_LISTS.get(name, [["a", "b"], ["c"]])
        want = embedder.embed_batch(rows)
        for got in (embedder.embed_batch(_batches()[name]), list(embedder.embed_sentences(_batches()[name], 1))):
            assert len(got) == len(want), name
            for a, b in zip(got, want):
                np.testing.assert_allclose(a, b, atol=1e-6, rtol=0, err_msg=name)
    from tests.test_chars import DICT_BATCH

    for call in (embedder.embed_batch, lambda b: list(embedder.embed_sentences(b))):
        with pytest.raises(TypeError, match=DICT_BATCH):  # its values or its keys: the error says how to pass them
            call({1: ["a"]})
    for batch in ({("a", "b"), ("c",)}, frozenset([("a", "b")])):
        for call in (embedder.embed_batch, lambda b: list(embedder.embed_sentences(b))):
            with pytest.raises(TypeError, match=r"^Expected a list of sentences in order, but got an unordered set"):
                call(batch)

    class Doc:  # duck-typed: a spaCy Doc as the checks see one
        text = "a b"

        def __iter__(self):
            return iter(())

    with pytest.raises(TypeError, match=r"^Expected a list of sentences, .*Doc or Span") as err:
        embedder.embed_sentence(Doc())
    assert "batch_to_ids" not in str(err.value)


# -- errors ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        ({"vocab_to_cache": ["the"]}, ValueError, "vocab_to_cache=None"),
        ({"scalar_mix_parameters": [1.0, 2.0]}, ValueError, "has 2 values, but this biLM has 3 layers"),
        ({"num_output_representations": -1}, ValueError, "0 or more"),
        ({"do_layer_norm": "false"}, TypeError, "do_layer_norm must be True or False"),
        ({"module": torch.nn.Linear(2, 2), "files": (None, None)}, TypeError, "must be a spacy_elmo BiLM"),
        ({"module": "bilm"}, ValueError, "takes no options_file or weight_file"),
        ({"files": (None, None)}, ValueError, "Elmo needs a model"),
        ({"files": ("https://x/options.json", "https://x/weights.hdf5")}, ValueError, "curl -LO"),
        # a local options file beside a URL weight file: the URL named, not "no such file"
        ({"url_weights": "https://x/weights.hdf5"}, ValueError, r"^https://x/weights.hdf5 is a URL.*curl -LO"),
    ],
    ids=["vocab-to-cache", "mix-parameters", "num-outputs", "bool", "module-type", "module-with-files",
         "no-model", "url", "url-weights"],
)
def test_elmo_refuses_what_it_does_not_support(files, kwargs, error, match):
    kwargs = dict(kwargs)
    args = kwargs.pop("files", files)
    if "url_weights" in kwargs:
        args = (files[0], kwargs.pop("url_weights"))
    kwargs.setdefault("num_output_representations", 1)
    with pytest.raises(error, match=match):
        Elmo(*args, **kwargs)


def test_numpy_integers_are_whole_numbers_as_in_allennlp(files):
    """np.int64 (a hyper-parameter grid's) was refused as "not a whole number"; AllenNLP takes it.
    A bool is still no size."""
    ids = batch_to_ids(BATCHES[0])
    elmo = Elmo(*files, np.int64(2), dropout=0.0, stateful=False).eval()
    assert len(elmo(ids)["elmo_representations"]) == 2 and elmo.scalar_mix_1.n_layers == 3
    embedder = ElmoTokenEmbedder(*files, projection_dim=np.int64(8), dropout=0.0, stateful=False)
    assert embedder.get_output_dim() == 8 and type(embedder.get_output_dim()) is int
    assert embedder(ids).shape == (4, 6, 8)
    embedder = ElmoEmbedder(*files, cuda_device=np.int64(-1), stateful=False)
    assert [v.shape[1] for v in embedder.embed_sentences(BATCHES[0], batch_size=np.int64(3))] == [6, 3, 0, 1]
    with pytest.raises(ValueError, match="0 or more"):
        Elmo(*files, True)
    with pytest.raises(ValueError, match="projection_dim"):
        ElmoTokenEmbedder(*files, projection_dim=np.True_)


def test_allennlps_private_bilm_names_the_api_to_use(files):
    """allennlp-models' ``elmo._elmo_lstm._elmo_lstm.reset_states()`` was a bare "'Elmo' object has no
    attribute '_elmo_lstm'"; the reset it names forgets the carried states."""
    ids = batch_to_ids(BATCHES[0])
    elmo = Elmo(*files, 1, dropout=0.0).eval()
    with torch.no_grad():
        first = elmo(ids)["elmo_representations"][0]
        elmo(ids)
        for module in (elmo, ElmoTokenEmbedder(*files)._elmo):
            with pytest.raises(AttributeError, match=r"has no _elmo_lstm .*call elmo\.reset_states\(\)"):
                module._elmo_lstm._elmo_lstm.reset_states()
        elmo.reset_states()
        torch.testing.assert_close(elmo(ids)["elmo_representations"][0], first, atol=0, rtol=0)
    assert not hasattr(elmo, "_elmo_lstm")
    with pytest.raises(AttributeError, match="'Elmo' object has no attribute 'elmo_lstm'"):
        elmo.elmo_lstm


def test_bad_files_and_inputs_say_what_is_wrong(files, tmp_path):
    options_file, weight_file = files
    with pytest.raises(ValueError, match="is an HDF5 file .*the options file and the weight file look swapped"):
        Elmo(weight_file, options_file, 1)  # swapped
    with pytest.raises(FileNotFoundError, match="options file .*missing.json does not exist"):
        Elmo(tmp_path / "missing.json", weight_file, 1)
    (tmp_path / "other").mkdir()
    other_options, _ = write_model_files(tmp_path / "other", options(filters=((1, 4), (2, 6), (3, 8)), P=16))
    with pytest.raises(ValueError, match="options file does not belong to this weight file"):
        Elmo(other_options, weight_file, 1)
    elmo = Elmo(*files, 1)
    with pytest.raises(ValueError, match=r"word_inputs=\.\.\.\) is not supported"):
        elmo(batch_to_ids([["a"]]), word_inputs=torch.ones(1, 1, dtype=torch.long))
    with pytest.raises(ValueError, match=r"shape \(batch, timesteps, 50\)"):
        elmo(torch.ones(1, 50, dtype=torch.long))
    embedder = ElmoEmbedder(*files)
    with pytest.raises(NotImplementedError, match="spacy_elmo.embedding.embed_file"):
        embedder.embed_file(open(options_file), tmp_path / "out.h5")
    with pytest.raises(ValueError, match="batch_size"):
        list(embedder.embed_sentences([["a"]], batch_size=0))
    with pytest.raises(ValueError, match="cuda_device"):
        ElmoEmbedder(*files, cuda_device="0")


def test_a_spacy_elmo_model_file_given_as_allennlp_files_says_what_it_is_and_the_fix(files, tmp_path):
    """Each file of a model given where an AllenNLP file goes was answered with advice for another mistake: one file
    and weight_file=None got BiLM.from_allennlp(...) (not this API's fix); a spacy-elmo config.json as the options
    "check that you passed the options file and not the weight file"; a model.safetensors as the weight file "damaged
    ... or not hdf5"."""
    options_file, weight_file = files
    native = tmp_path / "native"
    BiLM.from_allennlp(*files).save(native)
    # AllenNLP's files: the other one as the second argument; a spacy-elmo model's (no weight file to pass): its directory
    for path, fix in ((options_file, "as the second argument (options_file, weight_file)"),
                      (weight_file, "as the second argument (options_file, weight_file)"),
                      (native / "config.json", "pass the model's directory"),
                      (native / "model.safetensors", "pass the model's directory")):
        for make in (lambda: Elmo(path, None, 1), lambda: ElmoEmbedder(path), lambda: ElmoTokenEmbedder(path)):
            with pytest.raises(ValueError, match="is a file, but a model is a directory") as err:
                make()
            assert str(path) in str(err.value) and fix in str(err.value)
            assert "from_allennlp" not in str(err.value)
            assert ("weight_file=None" in str(err.value)) == (path.parent != native)
    # AllenNLP's files beside a spacy-elmo model are still AllenNLP's: their directory would load the native model
    both = tmp_path / "both"
    shutil.copytree(native, both)
    for path in (options_file, weight_file):
        shutil.copy(path, both / Path(path).name)
    for path, fix in ((both / Path(options_file).name, "as the second argument (options_file, weight_file)"),
                      (both / Path(weight_file).name, "as the second argument (options_file, weight_file)"),
                      (both / "config.json", "pass the model's directory")):
        with pytest.raises(ValueError, match="is a file, but a model is a directory") as err:
            Elmo(path, None, 1)
        assert str(path) in str(err.value) and fix in str(err.value)
    with pytest.raises(ValueError, match=r"config.json are a spacy-elmo model's config.json .*weight_file=None") as err:
        Elmo(native / "config.json", native / "model.safetensors", 1)
    assert "not the weight file" not in str(err.value)
    for path, what in ((native / "model.safetensors", f"a file of the spacy-elmo model {native}"),
                       (native / "config.json", f"a file of the spacy-elmo model {native}")):
        with pytest.raises(ValueError, match="not an AllenNLP/bilm-tf weight file") as err:
            Elmo(options_file, path, 1)
        assert f"{path} is {what}" in str(err.value) and "Elmo(directory, None, ...)" in str(err.value)
        assert "damaged" not in str(err.value)
    loose = tmp_path / "loose.safetensors"
    shutil.copy(native / "model.safetensors", loose)
    with pytest.raises(ValueError, match=f"{loose} is a safetensors file, not an AllenNLP/bilm-tf weight file"):
        ElmoEmbedder(options_file, loose)
    (tmp_path / "junk.hdf5").write_bytes(b"not hdf5 at all")  # another file is still "damaged ... or not hdf5"
    with pytest.raises(ValueError, match="could not be opened as an hdf5 file"):
        BiLM.from_allennlp(options_file, tmp_path / "junk.hdf5")


def test_elmo_embedder_on_a_cuda_device_torch_does_not_see(files, monkeypatch):
    """torch's "AssertionError: Torch not compiled with CUDA enabled" (or "invalid device ordinal"), after
    the model had been loaded."""
    count = torch.cuda.device_count()
    with pytest.raises(ValueError, match=rf"cuda_device={count} names no CUDA device: torch sees {count} .*"
                                         r"cuda_device=-1 for the CPU"):
        ElmoEmbedder(*files, cuda_device=count)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    with pytest.raises(ValueError, match="cuda_device=0 names no CUDA device: torch sees 0"):
        ElmoEmbedder(*files, cuda_device=0)
    assert ElmoEmbedder(*files, cuda_device=-1).embed_sentence(["a"]).shape == (3, 1, 16)


# -- against AllenNLP's real Elmo (allennlp 2.10.1 wheel) --------------------------------------------
def allennlp_elmo(allennlp, files, **kwargs):
    module = allennlp.load_allennlp_elmo()["allennlp.modules.elmo"]
    return module.Elmo(str(files[0]), str(files[1]), **kwargs)


def assert_same(ours, theirs, atol=ATOL):
    assert torch.equal(ours["mask"], theirs["mask"])
    assert len(ours["elmo_representations"]) == len(theirs["elmo_representations"])
    for a, b in zip(ours["elmo_representations"], theirs["elmo_representations"]):
        assert a.shape == b.shape
        torch.testing.assert_close(a, b, atol=atol, rtol=0)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "kwargs",
    [{}, {"do_layer_norm": True}, {"keep_sentence_boundaries": True},
     {"do_layer_norm": True, "keep_sentence_boundaries": True},
     {"scalar_mix_parameters": FIXED}, {"scalar_mix_parameters": [0.5, 0.2, -0.4], "do_layer_norm": True}],
    ids=["plain", "layer-norm", "boundaries", "layer-norm-boundaries", "fixed-mix", "fixed-mix-layer-norm"],
)
def test_elmo_matches_allennlp(allennlp, files, backend, kwargs):
    """Two representations over ragged batches (an empty sentence, fewer then more rows), AllenNLP's
    states carried from call to call on both sides, in eval mode without dropout."""
    theirs = allennlp_elmo(allennlp, files, num_output_representations=2, dropout=0.0, **kwargs).eval()
    ours = Elmo(*files, num_output_representations=2, dropout=0.0, backend=backend, **kwargs).eval()
    if "scalar_mix_parameters" not in kwargs:
        set_mixes(theirs, MIXES, allennlp_side=True)
        set_mixes(ours, MIXES)
    assert ours.get_output_dim() == theirs.get_output_dim() == 16
    for sentences in BATCHES:
        ids = batch_to_ids(sentences)
        with torch.no_grad():
            assert_same(ours(ids), theirs(ids))


def test_stateless_elmo_matches_allennlp_reset_before_each_call(allennlp, files):
    theirs = allennlp_elmo(allennlp, files, num_output_representations=1, dropout=0.0, do_layer_norm=True).eval()
    ours = Elmo(*files, 1, dropout=0.0, do_layer_norm=True, stateful=False).eval()
    for sentences in BATCHES:
        theirs._elmo_lstm._elmo_lstm.reset_states()
        ids = batch_to_ids(sentences)
        with torch.no_grad():
            assert_same(ours(ids), theirs(ids))


def test_dropout_draws_and_gradients_match_allennlp(allennlp, files):
    """Train mode, dropout 0.5, the same seed: the same kept positions (dropout after the markers are
    removed, one draw per representation); with requires_grad the same gradients reach the mixes
    and the biLM's character embedding (AllenNLP's table has an extra zero row 0 for padding)."""
    for requires_grad in (False, True):
        theirs = allennlp_elmo(allennlp, files, num_output_representations=2, requires_grad=requires_grad,
                               do_layer_norm=True)
        ours = Elmo(*files, 2, requires_grad=requires_grad, do_layer_norm=True)
        set_mixes(theirs, MIXES, allennlp_side=True)
        set_mixes(ours, MIXES)
        ids = batch_to_ids(BATCHES[0])
        outputs = []
        for elmo in (ours, theirs):
            torch.manual_seed(1)
            out = elmo.train()(ids)
            g = torch.Generator().manual_seed(2)
            loss = sum((r * torch.randn(r.shape, generator=g)).sum() for r in out["elmo_representations"])
            loss.backward()
            outputs.append(out)
        assert_same(*outputs)
        kept = outputs[0]["elmo_representations"][0] != 0
        assert 0.3 < kept[outputs[0]["mask"]].float().mean() < 0.7
        for k in range(2):
            mine, their = getattr(ours, f"scalar_mix_{k}"), getattr(theirs, f"scalar_mix_{k}")
            their_grad = torch.cat([p.grad for p in their.scalar_parameters])
            torch.testing.assert_close(mine.scalar_parameters.grad, their_grad, atol=1e-4, rtol=1e-4)
            torch.testing.assert_close(mine.gamma.grad, their.gamma.grad, atol=1e-4, rtol=1e-4)
        their_table = theirs._elmo_lstm._token_embedder._char_embedding_weights
        mine_table = ours.bilm.token_encoder.char_embedding
        assert mine_table.requires_grad == their_table.requires_grad == requires_grad
        if requires_grad:
            assert mine_table.grad.abs().sum() > 0
            torch.testing.assert_close(mine_table.grad, their_table.grad[1:], atol=1e-4, rtol=1e-4)
        else:
            assert mine_table.grad is None and their_table.grad is None


# -- AllenNLP state_dicts (Elmo.load_allennlp_state_dict / allennlp_state_dict) ------------------------
PREFIX = "_text_field_embedder.token_embedder_elmo._elmo."  # where a model's ElmoTokenEmbedder keeps it


def perturb(module, seed, scale=0.05):
    """Simulate training: every parameter moved by seeded noise."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g))


def run_batches(elmo, batches=BATCHES):
    with torch.no_grad():
        return [elmo(batch_to_ids(sentences)) for sentences in batches]


def assert_outputs_equal(ours, theirs, atol=ATOL):
    for a, b in zip(ours, theirs):
        assert_same(a, b, atol=atol)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fine_tuned", [True, False], ids=["fine-tuned", "frozen"])
def test_trained_allennlp_state_dict_gives_allennlps_outputs(allennlp, files, tmp_path, backend, fine_tuned):
    """AllenNLP's Elmo trained (mixes and, fine-tuned, every biLM weight moved), its state_dict saved
    inside a whole model's as best.th: loaded with the model's prefix, ours gives AllenNLP's vectors."""
    theirs = allennlp_elmo(allennlp, files, num_output_representations=2, dropout=0.0, do_layer_norm=True,
                           requires_grad=fine_tuned).eval()
    set_mixes(theirs, MIXES, allennlp_side=True)
    if fine_tuned:
        perturb(theirs._elmo_lstm, seed=5)
    model_state = {PREFIX + k: v for k, v in theirs.state_dict().items()}
    model_state["_classifier.weight"] = torch.ones(3, 16)  # the rest of the model: not selected by the prefix
    torch.save(model_state, tmp_path / "best.th")
    ours = Elmo(*files, 2, dropout=0.0, do_layer_norm=True, requires_grad=fine_tuned, backend=backend).eval()
    before = run_batches(ours)
    ours.reset_states()
    assert ours.load_allennlp_state_dict(tmp_path / "best.th", prefix=PREFIX) == ([], [])
    assert all(p.requires_grad == fine_tuned for p in ours.bilm.parameters())  # flags kept
    expected = run_batches(theirs)
    assert_outputs_equal(run_batches(ours), expected)
    # not vacuous: before loading, the outputs were another model's
    assert not torch.allclose(before[0]["elmo_representations"][0], expected[0]["elmo_representations"][0], atol=1e-3)


def test_allennlp_state_dict_is_what_allennlp_loads(allennlp, files):
    """The reverse: our parameters by AllenNLP's names, exactly what AllenNLP's own loaders make of
    the files; after training ours, AllenNLP's Elmo with that state_dict gives our vectors."""
    theirs = allennlp_elmo(allennlp, files, num_output_representations=2, dropout=0.0).eval()
    ours = Elmo(*files, 2, dropout=0.0).eval()
    state = ours.allennlp_state_dict()
    assert list(state) == list(theirs.state_dict())
    for name, value in theirs.state_dict().items():
        assert torch.equal(state[name], value), name
    set_mixes(ours, MIXES)
    perturb(ours.bilm, seed=6)
    theirs.load_state_dict(ours.allennlp_state_dict())  # strict
    assert_outputs_equal(run_batches(ours), run_batches(theirs))


def test_allennlp_state_dict_round_trips(files):
    """AllenNLP names -> ours -> AllenNLP names is exact (the forget bias's +1 comes off in float64);
    ours -> AllenNLP -> ours rounds only that bias (AllenNLP stores b + 1 in float32). Loading drops a
    fitted initial state (AllenNLP starts from zeros); exporting one warns."""
    source = Elmo(*files, 2, dropout=0.0, stateful=False).eval()
    set_mixes(source, MIXES)
    perturb(source, seed=7)
    state = source.allennlp_state_dict()
    target = Elmo(*files, 2, dropout=0.0, stateful=False).eval()
    target.bilm.set_initial_state((torch.ones(2, 2, 8), torch.ones(2, 2, 12)))
    target.load_allennlp_state_dict(state)
    assert target.bilm.initial_state is None
    for name, value in target.allennlp_state_dict().items():
        assert torch.equal(value, state[name]), name
    for (name, a), b in zip(source.state_dict().items(), target.state_dict().values()):
        torch.testing.assert_close(a, b, atol=1.2e-7, rtol=0, msg=name)
        assert name.endswith(".bias") and "lstm" in name or torch.equal(a, b), name
    source.bilm.set_initial_state((torch.ones(2, 2, 8), torch.ones(2, 2, 12)))
    with pytest.warns(UserWarning, match="starts from zeros"):
        source.allennlp_state_dict()


def test_allennlp_state_dict_is_a_snapshot(files):
    """The exported tensors are copies: the char-CNN's biases and its projection's bias shared the
    live parameters' memory, so a kept export moved on with training."""
    for module in (Elmo(*files, 1), ElmoTokenEmbedder(*files, projection_dim=4)):
        state = module.allennlp_state_dict()
        kept = {name: value.clone() for name, value in state.items()}
        with torch.no_grad():
            for parameter in module.parameters():
                parameter.add_(1.0)
        for name, value in state.items():
            assert torch.equal(value, kept[name]), name


def test_bad_allennlp_state_dicts_say_what_is_wrong_and_change_nothing(files):
    elmo = Elmo(*files, 2, dropout=0.0)
    good = elmo.allennlp_state_dict()
    perturb(elmo, seed=8)
    unchanged = {k: v.clone() for k, v in elmo.state_dict().items()}

    def refused(state, match, error=ValueError, **kwargs):
        with pytest.raises(error, match=match):
            elmo.load_allennlp_state_dict(state, **kwargs)
        assert all(torch.equal(v, unchanged[k]) for k, v in elmo.state_dict().items())

    lstm = "_elmo_lstm._elmo_lstm.backward_layer_1.state_linearity.bias"
    missing = {k: v for k, v in good.items() if k not in (lstm, "scalar_mix_1.gamma")}
    refused(missing, f"missing: {lstm}, scalar_mix_1.gamma")
    extra = dict(good, **{"_elmo_lstm._word_embedding.weight": torch.zeros(5, 16)})  # AllenNLP's vocab_to_cache
    refused(extra, r"unexpected: _elmo_lstm\._word_embedding\.weight")
    misshapen = dict(good, **{"scalar_mix_0.gamma": torch.ones(2)})
    refused(misshapen, r"wrong shape: scalar_mix_0\.gamma \(2,\) \(expected \(1,\)\)")
    refused(misshapen, "wrong shape", strict=False)
    # a NumPy array or a list as a weight: its type, not "wrong shape: scalar_mix_0.gamma ndarray (expected (1,))"
    arrays = dict(good, **{"scalar_mix_0.gamma": good["scalar_mix_0.gamma"].numpy(),
                           lstm: good[lstm].tolist(), "scalar_mix_1.gamma": torch.ones(2)})
    refused(arrays, rf"not a tensor: {re.escape(lstm)} \(a list\), scalar_mix_0\.gamma \(an ndarray\); wrong shape: "
                    r"scalar_mix_1\.gamma \(2,\) \(expected \(1,\)\)\. .*torch\.from_numpy\(array\)", strict=False)
    refused({k: v for k, v in missing.items() if k != "scalar_mix_1.gamma"}, f"missing: {lstm}", strict=False)
    refused({PREFIX + k: v for k, v in good.items()}, f"under prefix='{PREFIX}': pass")
    refused({PREFIX + k: v for k, v in good.items()}, f"under prefix='{PREFIX}'", prefix="model.")
    refused({PREFIX + k: v for k, v in good.items()}, "No key of the state_dict starts with prefix='x.'", prefix="x.")
    refused([("scalar_mix_0.gamma", torch.ones(1))], "dict of tensors", error=TypeError)
    marker = "_elmo_lstm._token_embedder._beginning_of_sentence_characters"
    refused(dict(good, **{marker: elmo.bilm.marker_ids[1]}), "sentence marker ids")
    refused(good, "strict must be True or False", strict="yes", error=TypeError)
    with pytest.raises(ValueError, match=r"unexpected: scalar_mix_1\.gamma, scalar_mix_1\.scalar_parameters\.0"):
        Elmo(*files, 1).load_allennlp_state_dict(good)  # fewer representations than the AllenNLP model


def test_lenient_allennlp_state_dict_loads_what_it_has(files):
    """strict=False: unexpected keys skipped, a missing scalar mix kept; AllenNLP's marker ids (not in
    its state_dict, but checked when present) accepted when they are this biLM's."""
    source = Elmo(*files, 2, dropout=0.0)
    set_mixes(source, MIXES)
    perturb(source.bilm, seed=9)
    state = source.allennlp_state_dict()
    del state["scalar_mix_1.scalar_parameters.2"]
    state["_elmo_lstm._word_embedding.weight"] = torch.zeros(5, 16)
    state["_elmo_lstm._token_embedder._end_of_sentence_characters"] = source.bilm.marker_ids[1].clone()
    target = Elmo(*files, 2, dropout=0.0)
    assert target.load_allennlp_state_dict(state, strict=False) == (
        ["scalar_mix_1.scalar_parameters.2"], ["_elmo_lstm._word_embedding.weight"])
    for name, value in source.allennlp_state_dict().items():
        if name.startswith("_elmo_lstm."):
            assert torch.equal(target.allennlp_state_dict()[name], value), name
    expected = torch.tensor([MIXES[1][0][0], MIXES[1][0][1], 0.0], dtype=torch.float32)  # the third kept at 0
    assert torch.equal(target.scalar_mix_1.scalar_parameters.detach(), expected)
    assert torch.equal(target.scalar_mix_0.scalar_parameters, source.scalar_mix_0.scalar_parameters)
    mixes_only = {k: v for k, v in state.items() if k.startswith("scalar_mix_0.")}
    fresh = Elmo(*files, 2, dropout=0.0)
    assert len(fresh.load_allennlp_state_dict(mixes_only, strict=False).missing_keys) == 29 + 4
    assert torch.equal(fresh.bilm.lstm.forward_layers[0].bias, Elmo(*files, 1).bilm.lstm.forward_layers[0].bias)


def test_allennlp_projection_must_be_the_identity_when_cnn_width_equals_projection(tmp_path):
    """F == P: this biLM has no projection, AllenNLP's Elmo has one (the identity, unless trained)."""
    opts = options(filters=((1, 4), (2, 4)), P=8)
    square = write_model_files(tmp_path, opts, seed=4)
    elmo = Elmo(*square, 1, dropout=0.0)
    state = elmo.allennlp_state_dict()
    assert torch.equal(state["_elmo_lstm._token_embedder._projection.weight"], torch.eye(8))
    elmo.load_allennlp_state_dict(state)
    state["_elmo_lstm._token_embedder._projection.bias"] = torch.full((8,), 0.1)
    with pytest.raises(ValueError, match="has no projection to hold it"):
        elmo.load_allennlp_state_dict(state)


# -- ElmoTokenEmbedder (allennlp 2.10.1's TokenEmbedder of one Elmo representation) --------------------
TOKEN_EMBEDDER_KWARGS = [{}, {"do_layer_norm": True}, {"scalar_mix_parameters": FIXED}]
TOKEN_EMBEDDER_IDS = ["plain", "layer-norm", "fixed-mix"]


def matching_mixes(kwargs, *elmos, allennlp_side=False):
    """The mix the outputs are checked with: MIXES[0] set on each Elmo, or the fixed one (gamma 1)."""
    if "scalar_mix_parameters" in kwargs:
        return [(np.array(kwargs["scalar_mix_parameters"]), 1.0)]
    for elmo in elmos:
        set_mixes(elmo, MIXES[:1], allennlp_side=allennlp_side)
    return MIXES[:1]


@pytest.mark.parametrize("stateful", [True, False], ids=["stateful", "stateless"])
@pytest.mark.parametrize("kwargs", TOKEN_EMBEDDER_KWARGS, ids=TOKEN_EMBEDDER_IDS)
def test_token_embedder_is_elmos_one_representation(files, kwargs, stateful):
    """No projection: Elmo(..., 1)'s representation as it is (on the same weights, the same mix), and the
    oracle's; states carried from batch to batch as Elmo carries them."""
    embedder = ElmoTokenEmbedder(*files, dropout=0.0, stateful=stateful, **kwargs).eval()
    elmo = Elmo(*files, 1, dropout=0.0, stateful=stateful, **kwargs).eval()
    mixes = matching_mixes(kwargs, embedder._elmo, elmo)
    assert embedder.get_output_dim() == elmo.get_output_dim() == 16
    oracle = NumpyElmo(OPTS, files[1])
    for sentences in BATCHES:
        ids = batch_to_ids(sentences)
        with torch.no_grad():
            got, expected = embedder(ids), elmo(ids)["elmo_representations"][0]
        torch.testing.assert_close(got, expected, atol=1e-6, rtol=0)
        reps, _ = oracle_elmo(oracle, sentences, mixes, kwargs.get("do_layer_norm", False), stateful=stateful)
        np.testing.assert_allclose(got.double().numpy(), reps[0], atol=ATOL, rtol=0)


def test_token_embedder_projects_each_position(files):
    """projection_dim: a Linear(2P, projection_dim) on each position's vector (AllenNLP's
    TimeDistributed: the (B * T, 2P) rows), more leading dimensions and a batch of empty sentences too."""
    embedder = ElmoTokenEmbedder(*files, dropout=0.0, projection_dim=5, stateful=False).eval()
    set_mixes(embedder._elmo, MIXES[:1])
    assert embedder.get_output_dim() == 5
    assert isinstance(embedder._projection, torch.nn.Linear) and embedder._projection.weight.shape == (5, 16)
    sentences = BATCHES[0] + [["z"], ["y", "x"]]
    ids = batch_to_ids(sentences)  # (6, T, 50)
    with torch.no_grad():
        got, nested, empty = embedder(ids), embedder(ids.view(2, 3, *ids.shape[1:])), embedder(batch_to_ids([[], []]))
    B, T = ids.shape[:2]
    assert got.shape == (B, T, 5) and nested.shape == (2, 3, T, 5) and empty.shape == (2, 0, 5)
    reps, _ = oracle_elmo(NumpyElmo(OPTS, files[1]), sentences, MIXES[:1], stateful=False)
    weight, bias = (p.detach().double().numpy() for p in (embedder._projection.weight, embedder._projection.bias))
    rows = reps[0].reshape(B * T, 16) @ weight.T + bias  # padded positions get the bias, as in AllenNLP
    np.testing.assert_allclose(got.double().numpy(), rows.reshape(B, T, 5), atol=ATOL, rtol=0)
    torch.testing.assert_close(nested.reshape(B, T, 5), got, atol=1e-6, rtol=0)
    for no_projection in (None, 0):  # AllenNLP's ``if projection_dim:``
        plain = ElmoTokenEmbedder(*files, projection_dim=no_projection)
        assert plain._projection is None and plain.get_output_dim() == 16


@pytest.mark.parametrize("projection_dim", [None, 4], ids=["no-projection", "projection"])
def test_token_embedder_requires_grad_freezes_only_the_bilm(files, projection_dim):
    """As in AllenNLP: requires_grad=False freezes the biLM, but the scalar mix and the projection
    learn; True fine-tunes the biLM too; fixed scalar_mix_parameters leave the projection alone trainable."""
    ids = batch_to_ids(BATCHES[0])
    projection = {"_projection.weight", "_projection.bias"} if projection_dim else set()
    mix = {"_elmo.scalar_mix_0.scalar_parameters", "_elmo.scalar_mix_0.gamma"}
    bilm = {"_elmo.bilm." + name for name, _ in BiLM.from_allennlp(*files).named_parameters()}
    for kwargs, trained in (({}, mix | projection), ({"requires_grad": True}, bilm | mix | projection),
                            ({"scalar_mix_parameters": FIXED}, projection)):
        embedder = ElmoTokenEmbedder(*files, dropout=0.0, projection_dim=projection_dim, **kwargs)
        assert {name for name, _ in embedder.named_parameters()} == bilm | mix | projection
        assert {name for name, p in embedder.named_parameters() if p.requires_grad} == trained, kwargs
        if not trained:
            continue
        embedder(ids).sum().backward()
        grads = {name: p.grad for name, p in embedder.named_parameters()}
        assert {name for name, g in grads.items() if g is not None and g.abs().sum() > 0} == trained, kwargs


def test_token_embedder_dropout(files):
    """dropout=0: the same vectors in train and eval mode, call after call; dropout=0.5 in train mode
    zeroes about half of them and doubles the rest (Elmo's dropout, passed on)."""
    ids = batch_to_ids(BATCHES[0])
    embedder = ElmoTokenEmbedder(*files, dropout=0.0, stateful=False)
    with torch.no_grad():
        clean = embedder.eval()(ids)
        torch.testing.assert_close(embedder.eval()(ids), clean, atol=0, rtol=0)
        torch.testing.assert_close(embedder.train()(ids), clean, atol=0, rtol=0)
        noisy = ElmoTokenEmbedder(*files, dropout=0.5, stateful=False).train()(ids)
    kept = noisy != 0
    assert 0.3 < kept[clean != 0].float().mean() < 0.7
    torch.testing.assert_close(noisy[kept], 2 * clean[kept])


def test_token_embedder_refuses_what_it_does_not_support(files):
    with pytest.raises(ValueError, match=r"ElmoTokenEmbedder\(vocab_to_cache=\.\.\.\) is not supported"):
        ElmoTokenEmbedder(*files, vocab_to_cache=["the"])
    embedder = ElmoTokenEmbedder(*files)
    with pytest.raises(ValueError, match=r"ElmoTokenEmbedder\.forward\(word_inputs=\.\.\.\) is not supported"):
        embedder(batch_to_ids([["a"]]), word_inputs=torch.ones(1, 1, dtype=torch.long))
    for bad in (-1, 2.5, True, "8"):
        with pytest.raises(ValueError, match=rf"projection_dim=\.\.\.\) must be None .*found {bad!r}"):
            ElmoTokenEmbedder(*files, projection_dim=bad)
    with pytest.raises(ValueError, match="has 2 values, but this biLM has 3 layers"):  # Elmo's checks apply
        ElmoTokenEmbedder(*files, scalar_mix_parameters=[1.0, 2.0])


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"do_layer_norm": True, "projection_dim": 5}, {"scalar_mix_parameters": FIXED, "projection_dim": 3}],
    ids=["plain", "layer-norm-projection", "fixed-mix-projection"],
)
def test_token_embedder_matches_allennlp(allennlp, files, kwargs):
    """AllenNLP's real ElmoTokenEmbedder, its projection's weights copied: the same vectors over ragged
    batches (states carried on both sides) and with more leading dimensions, the same output width,
    and as many trainable numbers (frozen biLM: the mix and the projection)."""
    module = allennlp.load_allennlp_elmo()["allennlp.modules.token_embedders.elmo_token_embedder"]
    theirs = module.ElmoTokenEmbedder(str(files[0]), str(files[1]), dropout=0.0, **kwargs).eval()
    ours = ElmoTokenEmbedder(*files, dropout=0.0, **kwargs).eval()
    matching_mixes(kwargs, theirs._elmo, allennlp_side=True)
    matching_mixes(kwargs, ours._elmo)
    if "projection_dim" in kwargs:
        ours._projection.load_state_dict(theirs._projection.state_dict())
    assert ours.get_output_dim() == theirs.get_output_dim() == kwargs.get("projection_dim", 16)
    trainable = [sum(p.numel() for p in m.parameters() if p.requires_grad) for m in (ours, theirs)]
    assert trainable[0] == trainable[1] > 0
    for sentences in BATCHES:
        ids = batch_to_ids(sentences)
        with torch.no_grad():
            torch.testing.assert_close(ours(ids), theirs(ids), atol=ATOL, rtol=0)
    nested = batch_to_ids(BATCHES[0]).view(2, 2, -1, 50)
    with torch.no_grad():
        torch.testing.assert_close(ours(nested), theirs(nested), atol=ATOL, rtol=0)


# -- ElmoTokenEmbedder's AllenNLP state_dicts (load_allennlp_state_dict / allennlp_state_dict) ---------
MODEL_PREFIX = "_text_field_embedder.token_embedder_elmo."  # where a model keeps its ElmoTokenEmbedder
PROJECTION = ["_projection.weight", "_projection.bias"]


def run_embedder(embedder, batches=BATCHES):
    with torch.no_grad():
        return [embedder(batch_to_ids(sentences)) for sentences in batches]


def assert_vectors_equal(ours, theirs, atol=ATOL):
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, atol=atol, rtol=0)


def trained_embedder(files, seed, stateful=False, **kwargs):
    """Ours with the mix set and every parameter (biLM, mix, projection) moved: as after training."""
    embedder = ElmoTokenEmbedder(*files, dropout=0.0, stateful=stateful, **kwargs).eval()
    set_mixes(embedder._elmo, MIXES[:1])
    perturb(embedder, seed=seed)
    return embedder


@pytest.mark.parametrize("projection_dim", [None, 5], ids=["no-projection", "projection"])
def test_token_embedder_allennlp_state_dict_round_trips(files, projection_dim):
    """Ours -> AllenNLP's names (Elmo's under _elmo., then the projection) -> a fresh embedder: the same
    vectors; AllenNLP's names come back exactly."""
    source = trained_embedder(files, seed=10, projection_dim=projection_dim)
    state = source.allennlp_state_dict()
    elmo_keys = ["_elmo." + k for k in source._elmo.allennlp_state_dict()]
    assert list(state) == elmo_keys + (PROJECTION if projection_dim else [])
    target = ElmoTokenEmbedder(*files, dropout=0.0, stateful=False, projection_dim=projection_dim).eval()
    before = run_embedder(target)
    assert target.load_allennlp_state_dict(state) == ([], [])
    expected = run_embedder(source)
    assert_vectors_equal(run_embedder(target), expected, atol=1e-6)
    for name, value in target.allennlp_state_dict().items():
        assert torch.equal(value, state[name]), name
    assert not torch.allclose(before[0], expected[0], atol=1e-3)  # not vacuous


@pytest.mark.parametrize("projection_dim", [None, 5], ids=["no-projection", "projection"])
def test_trained_allennlp_token_embedder_gives_allennlps_vectors(allennlp, files, tmp_path, projection_dim):
    """AllenNLP's real ElmoTokenEmbedder fine-tuned (mix, biLM, projection all moved), saved inside a whole
    model's state_dict as best.th: loaded with the model's prefix, ours gives its vectors (states carried)."""
    module = allennlp.load_allennlp_elmo()["allennlp.modules.token_embedders.elmo_token_embedder"]
    theirs = module.ElmoTokenEmbedder(str(files[0]), str(files[1]), dropout=0.0, do_layer_norm=True,
                                      requires_grad=True, projection_dim=projection_dim).eval()
    set_mixes(theirs._elmo, MIXES[:1], allennlp_side=True)
    perturb(theirs, seed=11)
    model_state = {MODEL_PREFIX + k: v for k, v in theirs.state_dict().items()}
    model_state["_classifier.weight"] = torch.ones(3, 16)  # the rest of the model: not selected by the prefix
    torch.save(model_state, tmp_path / "best.th")
    ours = ElmoTokenEmbedder(*files, dropout=0.0, do_layer_norm=True, requires_grad=True,
                             projection_dim=projection_dim).eval()
    before = run_embedder(ours)
    assert ours.load_allennlp_state_dict(tmp_path / "best.th", prefix=MODEL_PREFIX) == ([], [])
    expected = run_embedder(theirs)
    assert_vectors_equal(run_embedder(ours), expected)
    assert not torch.allclose(before[0], expected[0], atol=1e-3)  # not vacuous


@pytest.mark.parametrize("projection_dim", [None, 5], ids=["no-projection", "projection"])
def test_token_embedder_allennlp_state_dict_is_what_allennlp_loads(allennlp, files, projection_dim):
    """The reverse: AllenNLP's real ElmoTokenEmbedder takes ours with its strict load_state_dict (the same
    names in the same order) and then gives our vectors."""
    module = allennlp.load_allennlp_elmo()["allennlp.modules.token_embedders.elmo_token_embedder"]
    theirs = module.ElmoTokenEmbedder(str(files[0]), str(files[1]), dropout=0.0,
                                      projection_dim=projection_dim).eval()
    ours = trained_embedder(files, seed=12, stateful=True, projection_dim=projection_dim)  # AllenNLP's always is
    state = ours.allennlp_state_dict()
    assert list(state) == list(theirs.state_dict())
    theirs.load_state_dict(state)  # strict
    assert_vectors_equal(run_embedder(ours), run_embedder(theirs))


def refused(embedder, state, match, error=ValueError, **kwargs):
    """load_allennlp_state_dict raises ``error`` matching ``match`` and changes no parameter or buffer."""
    unchanged = {k: v.clone() for k, v in embedder.state_dict().items()}
    with pytest.raises(error, match=match):
        embedder.load_allennlp_state_dict(state, **kwargs)
    assert all(torch.equal(v, unchanged[k]) for k, v in embedder.state_dict().items())


def test_bad_token_embedder_state_dicts_say_what_is_wrong_and_change_nothing(files):
    """A projection the embedder lacks (or the reverse), a misshapen or partial projection, a key left over
    or missing, a wrong prefix: errors naming the fix, and nothing changed, the _elmo part included."""
    good = trained_embedder(files, seed=13, projection_dim=5).allennlp_state_dict()
    plain = {k: v for k, v in good.items() if k not in PROJECTION}
    for projection_dim, state, match in [
        (None, good, r"unexpected: _projection\.weight, _projection\.bias\. .* with projection_dim=5\."),
        (5, plain, r"missing: _projection\.weight, _projection\.bias\. .* without projection_dim\."),
        (4, good, r"wrong shape: _projection\.weight \(5, 16\) \(expected \(4, 16\)\), _projection\.bias \(5,\) "
                  r"\(expected \(4,\)\)\. .* with projection_dim=5\."),
    ]:
        embedder = trained_embedder(files, seed=14, projection_dim=projection_dim)
        refused(embedder, state, match)
        if projection_dim == 4:
            refused(embedder, state, "wrong shape", strict=False)
    embedder = trained_embedder(files, seed=15, projection_dim=5)
    partial = {k: v for k, v in good.items() if k != "_projection.bias"}
    refused(embedder, partial, r"missing: _projection\.bias", strict=False)  # a partial projection: either way
    refused(embedder, dict(good, _extra=torch.ones(1)), r"unexpected: _extra")
    arrays = dict(good, **{"_projection.bias": good["_projection.bias"].numpy()})
    refused(embedder, arrays, r"not a tensor: _projection\.bias \(an ndarray\)\. .*torch\.from_numpy\(array\)")
    no_gamma = {k: v for k, v in good.items() if k != "_elmo.scalar_mix_0.gamma"}
    refused(embedder, no_gamma, r"prefix='_elmo\.'\) does not match AllenNLP's Elmo .*missing: scalar_mix_0\.gamma")
    model = {MODEL_PREFIX + k: v for k, v in good.items()}
    refused(embedder, model, rf"followed by '_elmo\.'\. AllenNLP ElmoTokenEmbedder .*under prefix='{MODEL_PREFIX}'")
    refused(embedder, model, rf"under prefix='{MODEL_PREFIX}'", prefix=MODEL_PREFIX + "_elmo.")  # Elmo's prefix
    refused(embedder, [("_projection.bias", torch.ones(5))], "ElmoTokenEmbedder.load_allennlp_state_dict takes",
            error=TypeError)
    refused(embedder, good, "strict must be True or False", strict="yes", error=TypeError)


def test_lenient_token_embedder_state_dict_skips_or_keeps_the_projection(files):
    """strict=False: a projection the embedder lacks is skipped, a missing one kept as it is; the
    _elmo part loaded either way; the skipped keys returned by the embedder's names."""
    source = trained_embedder(files, seed=16, projection_dim=5)
    good = source.allennlp_state_dict()
    without = ElmoTokenEmbedder(*files, dropout=0.0, stateful=False).eval()
    assert without.load_allennlp_state_dict(good, strict=False) == ([], PROJECTION)
    kept = ElmoTokenEmbedder(*files, dropout=0.0, stateful=False, projection_dim=5).eval()
    projection = {k: v.clone() for k, v in kept._projection.state_dict().items()}
    state = {k: v for k, v in good.items() if k not in PROJECTION + ["_elmo.scalar_mix_0.gamma"]}
    assert kept.load_allennlp_state_dict(state, strict=False) == (["_elmo.scalar_mix_0.gamma"] + PROJECTION, [])
    assert all(torch.equal(v, projection[k]) for k, v in kept._projection.state_dict().items())
    for target in (without, kept):
        for name, value in target._elmo.allennlp_state_dict().items():
            if name != "scalar_mix_0.gamma":
                assert torch.equal(value, good["_elmo." + name]), name


@pytest.mark.parametrize("key", ["_elmo_lstm._token_embedder.char_conv_0.bias",
                                 "_elmo_lstm._elmo_lstm.forward_layer_0.state_linearity.bias", "scalar_mix_0.gamma",
                                 "scalar_mix_1.scalar_parameters.2"])
@pytest.mark.parametrize("bad", ["nan", "inf", "int64", "bool"])
def test_allennlp_state_dict_of_non_finite_or_integer_tensors_is_refused_naming_the_key(files, tmp_path, key, bad):
    """A NaN (or an integer tensor, truncated) in the biLM or a scalar mix loaded silently: NaN vectors, where
    the hdf5 and native readers refuse both. The error names the state_dict's key (and the file read)."""
    elmo = Elmo(*files, 2, dropout=0.0)
    state = elmo.allennlp_state_dict()
    if bad in ("nan", "inf"):
        state[key] = state[key].clone()
        state[key][0] = float(bad)
        match = rf"'{key}' holds 1 NaN or infinite value"
    else:
        state[key] = state[key].round().to(getattr(torch, bad))
        match = rf"'{key}' holds torch\.{bad} values, but weights are floating point"
    perturb(elmo, seed=9)
    refused(elmo, state, "^the state_dict: " + match)
    torch.save(state, tmp_path / "best.th")
    refused(elmo, tmp_path / "best.th", "^" + str(tmp_path / "best.th") + ": " + match)
    prefixed = {PREFIX + k: v for k, v in state.items()}
    refused(elmo, prefixed, rf"'{PREFIX}{match[1:]}", prefix=PREFIX)


def test_token_embedder_state_dict_of_a_non_finite_projection_is_refused(files):
    embedder = trained_embedder(files, seed=16, projection_dim=5)
    state = embedder.allennlp_state_dict()
    state["_projection.bias"] = state["_projection.bias"].clone()
    state["_projection.bias"][1] = float("nan")
    refused(embedder, state, r"'_projection\.bias' holds 1 NaN")
    state["_projection.bias"] = torch.ones(5, dtype=torch.int32)
    refused(embedder, state, r"'_projection\.bias' holds torch\.int32 values")
    state = embedder.allennlp_state_dict()
    state["_elmo.scalar_mix_0.gamma"] = torch.tensor([float("inf")])
    refused(embedder, state, r"'_elmo\.scalar_mix_0\.gamma' holds 1 NaN")


def test_allennlp_state_dict_file_that_is_no_torch_file_says_so(files, tmp_path):
    """An hdf5 weight file, a damaged file or a directory given as the state_dict file raised torch's errors,
    one advising weights_only=False (running code from the file)."""
    elmo = Elmo(*files, 1)
    (tmp_path / "truncated.th").write_bytes(b"PK\x03\x04garbage")
    (tmp_path / "empty.th").write_bytes(b"")
    # text met torch's legacy unpickler: a bare KeyError: 101 ("hello") or IndexError ("t...", "(", "]")
    texts = [tmp_path / f"text{i}.th" for i in range(3)]
    for path, text in zip(texts, ("hello world\n", "the corpus\n", "(a) list\n")):
        path.write_text(text, encoding="utf-8")
    for path in (files[1], tmp_path / "truncated.th", tmp_path / "empty.th", *texts):
        for module in (elmo, ElmoTokenEmbedder(*files)):
            cls = type(module).__name__
            with pytest.raises(ValueError, match=rf"is not a torch state_dict file .* use {cls}\(options_file, "
                                                 r"weight_file, \.\.\.\)") as err:
                module.load_allennlp_state_dict(path)
            assert str(path) in str(err.value) and "weights_only" not in str(err.value)
    with pytest.raises(ValueError, match=r"is a directory; Elmo\.load_allennlp_state_dict reads the state_dict file"):
        elmo.load_allennlp_state_dict(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"state_dict file .*best\.th does not exist"):
        elmo.load_allennlp_state_dict(tmp_path / "best.th")


def test_a_leading_tilde_is_expanded_as_allennlp_expands_it(files, tmp_path, monkeypatch):
    """AllenNLP's cached_path expands ~: Elmo("~/elmo/options.json", "~/elmo/weights.hdf5", 1) failed here."""
    monkeypatch.setenv("HOME", str(tmp_path.parent))
    home = "~/" + tmp_path.name
    options_file, weight_file = (f"{home}/{path.name}" for path in files)
    expected = Elmo(*files, 1, dropout=0.0, stateful=False)(batch_to_ids(BATCHES[0]))["elmo_representations"][0]
    for module in (Elmo(options_file, weight_file, 1, dropout=0.0, stateful=False),
                   Elmo(Path(options_file), Path(weight_file), 1, dropout=0.0, stateful=False)):
        out = module(batch_to_ids(BATCHES[0]))["elmo_representations"][0]
        torch.testing.assert_close(out, expected, atol=0, rtol=0)
    assert ElmoEmbedder(options_file, weight_file).elmo_bilm.config == BiLM.from_allennlp(*files).config
    BiLM.from_allennlp(*files).save(tmp_path / "m")
    assert Elmo(f"{home}/m", None, 1).bilm.config == BiLM.from_allennlp(*files).config


@pytest.mark.parametrize("key", ["_elmo_lstm._token_embedder.char_conv_0.bias",
                                 "_elmo_lstm._elmo_lstm.forward_layer_0.state_linearity.bias", "scalar_mix_0.gamma"])
def test_allennlp_state_dict_beyond_float32_is_refused_not_loaded_as_inf(files, key):
    """A float64 state_dict holding 1e39 loaded as inf weights (the biLM's through float32 arrays): its check
    is the native reader's (native_io.check_weight), which checks the values in the dtype they land in too. The
    error names the overflow (the state_dict holds no NaN nor inf, which it said before)."""
    elmo = Elmo(*files, 2, dropout=0.0)
    state = {k: v.double() for k, v in elmo.allennlp_state_dict().items()}
    state[key][0] = 1e39
    refused(elmo, state, rf"^the state_dict: '{key}' holds values reaching 1e\+39, beyond torch\.float32's range")
    state[key][0] = 3e38  # within float32's range: loaded
    elmo.load_allennlp_state_dict(state)
    assert all(bool(torch.isfinite(p).all()) for p in elmo.parameters())


# -- mutation audit (session 47): behaviour no test above pinned ----------------------------------------
def test_zero_output_representations_give_the_mask_alone(files):
    """num_output_representations=0 is allowed, as AllenNLP's constructor allows it (no scalar mix): the
    biLM runs for the mask alone; its AllenNLP state_dict is the biLM's keys only."""
    elmo = Elmo(*files, 0, stateful=False).eval()
    one = Elmo(*files, 1, stateful=False).eval()
    assert [name for name, _ in elmo.named_children()] == ["bilm", "_dropout"]
    ids = batch_to_ids(BATCHES[0])
    with torch.no_grad():
        out = elmo(ids)
    assert out["elmo_representations"] == []
    assert torch.equal(out["mask"], one(ids)["mask"]) and out["mask"].sum(1).tolist() == [6, 3, 0, 1]
    bilm_keys = [k for k in one.allennlp_state_dict() if k.startswith("_elmo_lstm.")]
    assert sorted(elmo.allennlp_state_dict()) == sorted(bilm_keys)


def test_token_embedder_reset_states_forgets_the_carried_states(files):
    """ElmoTokenEmbedder.reset_states() forgets what the stateful biLM carried: the same batch after a reset
    gives the first call's vectors (the oracle's from zero states), not the carried ones."""
    embedder = ElmoTokenEmbedder(*files, dropout=0.0).eval()
    set_mixes(embedder._elmo, MIXES[:1])
    oracle = NumpyElmo(OPTS, files[1])
    ids = batch_to_ids(BATCHES[1])
    with torch.no_grad():
        first, carried = embedder(ids), embedder(ids)
        embedder.reset_states()
        again = embedder(ids)
    assert not torch.allclose(first, carried, atol=1e-3)
    torch.testing.assert_close(again, first, atol=0, rtol=0)
    reps, _ = oracle_elmo(oracle, BATCHES[1], MIXES[:1], stateful=False)
    np.testing.assert_allclose(again.double().numpy(), reps[0], atol=ATOL, rtol=0)


def test_allennlp_state_dicts_are_float32_for_a_double_model(files):
    """AllenNLP's Elmo and ElmoTokenEmbedder are float32: a double() module exports float32 copies (the mixes'
    and the projection's too, not only the biLM's), which AllenNLP's load_state_dict copies exactly."""
    for module in (Elmo(*files, 2).double(), ElmoTokenEmbedder(*files, projection_dim=4).double()):
        state = module.allennlp_state_dict()
        assert {name: value.dtype for name, value in state.items() if value.dtype != torch.float32} == {}
        assert any("scalar_mix" in name for name in state)
    assert {"_projection.weight", "_projection.bias"} <= set(state)


def test_elmo_embedder_embed_sentences_carries_states_per_batch_row(files):
    """Stateful embed_sentences runs batch_size sentences per biLM call: sentence i continues the states of
    row i % batch_size (0.9's behaviour), as the oracle's stateful rows do; not one sentence per call."""
    embedder = ElmoEmbedder(*files)
    oracle = NumpyElmo(OPTS, files[1])
    sentences = [s for batch in BATCHES for s in batch if s][:7]
    got = list(embedder.embed_sentences(iter(sentences), batch_size=3))
    expected = [v for start in range(0, 7, 3) for v in oracle.batch(sentences[start:start + 3], stateful=True)]
    assert len(got) == len(expected) == 7
    for vec, want in zip(got, expected):
        np.testing.assert_allclose(vec, want, atol=ATOL, rtol=0)


def test_ids_of_another_width_are_refused_naming_the_shape_given(files):
    """Ids built for another max_characters_per_token: Elmo's error, naming the shape passed (more leading
    dimensions included), not the BiLM's, which named the flattened (6, 5, 49)."""
    elmo = Elmo(*files, 1)
    for shape in [(1, 3, 49), (2, 3, 5, 49)]:
        with pytest.raises(ValueError, match=r"^Elmo expects character ids .*found shape " + re.escape(str(shape))):
            elmo(torch.ones(shape, dtype=torch.long))


def test_ids_that_are_not_a_tensor_are_refused_naming_their_type_and_the_fix(files):
    """A NumPy array or nested lists given as ids: a TypeError naming the type and how to make a tensor of it,
    from Elmo and ElmoTokenEmbedder each by its own name; was Elmo's ValueError "found shape ndarray"."""
    elmo, embedder = Elmo(*files, 1), ElmoTokenEmbedder(*files)
    ids = batch_to_ids([["a", "b"]])
    for module, name, call in [(elmo, "Elmo", "elmo"), (embedder, "ElmoTokenEmbedder", "embedder")]:
        with pytest.raises(TypeError, match=rf"^{name} expects a tensor of character ids \(batch, timesteps, 50\); "
                                            rf"got an ndarray\. .*{call}\(torch\.from_numpy\(ids\)\)\.$"):
            module(ids.numpy())
        with pytest.raises(TypeError, match=rf"^{name} expects .*; got a list\. .*{call}\(spacy_elmo\.batch_to_ids"
                                            rf"\(sentences\)\) .*{call}\(torch\.tensor\(ids\)\)"):
            module(ids.tolist())
        with pytest.raises(ValueError, match=rf"^{name} expects character ids .*found shape \(1, 2, 49\)"):
            module(ids[..., :49])


def test_token_embedder_state_errors_advise_a_projection_dim_only_when_it_differs(files):
    """A state_dict refused for another reason (a key left over, the bias missing) whose projection has this
    embedder's projection_dim: no advice to build it "with projection_dim=5", which it already has."""
    good = trained_embedder(files, seed=13, projection_dim=5).allennlp_state_dict()
    embedder = trained_embedder(files, seed=15, projection_dim=5)
    partial = {k: v for k, v in good.items() if k != "_projection.bias"}
    for state, kwargs, match in ((dict(good, _extra=torch.ones(1)), {}, r"unexpected: _extra\."),
                                 (partial, {"strict": False}, r"missing: _projection\.bias\.")):
        with pytest.raises(ValueError, match=match) as info:
            embedder.load_allennlp_state_dict(state, **kwargs)
        assert "projection_dim=" not in str(info.value) and "projects its ELMo vectors" not in str(info.value)


def test_module_with_either_file_is_refused_as_in_allennlp(files):
    """AllenNLP raises "Don't provide options_file or weight_file with module" when either is given, not only
    both: Elmo("default", None, 1, module=bilm) would silently ignore the model named."""
    for args in ((files[0], None), (None, files[1]), ("default", None)):
        with pytest.raises(ValueError, match="takes no options_file or weight_file"):
            Elmo(*args, 1, module=BiLM.from_allennlp(*files))


def test_allennlp_state_dict_shapes_are_checked_exactly(files):
    """A tensor with the right number of elements but another shape (a transposed LSTM weight, a 0-d gamma) is
    refused, as AllenNLP's load_state_dict refuses it, not reshaped silently; nothing changes."""
    elmo = Elmo(*files, 1, dropout=0.0)
    good = elmo.allennlp_state_dict()
    perturb(elmo, seed=9)
    unchanged = {k: v.clone() for k, v in elmo.state_dict().items()}
    weight = "_elmo_lstm._elmo_lstm.forward_layer_0.input_linearity.weight"
    assert good[weight].shape == (48, 8)
    for name, value, shapes in ((weight, good[weight].t().contiguous(), r"\(8, 48\) \(expected \(48, 8\)\)"),
                                ("scalar_mix_0.gamma", torch.tensor(1.5), r"\(\) \(expected \(1,\)\)"),
                                ("scalar_mix_0.scalar_parameters.1", torch.ones(1, 1),
                                 r"\(1, 1\) \(expected \(1,\)\)")):
        for strict in (True, False):
            with pytest.raises(ValueError, match=rf"wrong shape: {re.escape(name)} {shapes}"):
                elmo.load_allennlp_state_dict(dict(good, **{name: value}), strict=strict)
            assert all(torch.equal(v, unchanged[k]) for k, v in elmo.state_dict().items())


def test_allennlp_state_dict_prefix_selects_keys_that_start_with_it(files):
    """prefix= selects the keys that start with it, not those where it occurs later ('model.enc.' + name
    under prefix 'enc.'): the error says where the weights are; a state_dict refused for a missing key whose
    weights are under the prefix given gets no such hint."""
    elmo = Elmo(*files, 1, dropout=0.0)
    good = elmo.allennlp_state_dict()
    nested = {"model.enc." + k: v for k, v in good.items()}
    hint = r"No key of the state_dict starts with prefix='enc\.'\. .*under prefix='model\.enc\.'"
    with pytest.raises(ValueError, match=hint):
        elmo.load_allennlp_state_dict(nested, prefix="enc.")
    with pytest.raises(ValueError, match=r"missing: scalar_mix_0\.gamma") as info:
        elmo.load_allennlp_state_dict({k: v for k, v in nested.items() if not k.endswith("gamma")}, prefix="model.enc.")
    assert "weights are under prefix" not in str(info.value)


@pytest.mark.parametrize("backend", BACKENDS)
def test_backend_is_passed_to_the_bilm_by_all_three_classes(files, backend):
    """backend= (keyword only, not in AllenNLP) reaches the biLM of Elmo, ElmoTokenEmbedder and ElmoEmbedder
    alike (the embedder's Elmo was built with "auto", the fused kernels wherever they are compiled), and an
    unknown one is refused by each."""
    assert Elmo(*files, 1, backend=backend).bilm.backend == backend
    assert ElmoTokenEmbedder(*files, backend=backend)._elmo.bilm.backend == backend
    assert ElmoEmbedder(*files, backend=backend).elmo_bilm.backend == backend
    for make in (lambda: Elmo(*files, 1, backend="nope"), lambda: ElmoTokenEmbedder(*files, backend="nope"),
                 lambda: ElmoEmbedder(*files, backend="nope")):
        with pytest.raises(ValueError, match="nope"):
            make()
