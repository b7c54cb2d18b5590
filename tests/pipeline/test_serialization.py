"""Doc data through bytes, DocBin and multiprocessing; pipeline save/load."""

import json
import pickle
import re
import shutil
import subprocess
import sys

import numpy
import pytest
import spacy
import srsly
import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save
from spacy.tokens import Doc, DocBin

from spacy_elmo import BiLM, batch_to_ids
from spacy_elmo.pipeline import install_hooks
from spacy_elmo.pipeline.bilm_layer import get_bilm


def test_doc_to_bytes(nlp):
    doc = nlp("The bank of the river .")
    back = Doc(nlp.vocab).from_bytes(doc.to_bytes())
    numpy.testing.assert_array_equal(back._.elmo, doc._.elmo)
    assert back._.elmo.dtype == numpy.float16
    numpy.testing.assert_allclose(back[1]._.elmo_vector, doc[1]._.elmo_vector)
    install_hooks(back)  # hooks are not serialized by spaCy; the data is
    assert abs(back[1].similarity(back[4]) - doc[1].similarity(doc[4])) < 1e-6


def test_docbin(nlp):
    docs = list(nlp.pipe(["a b c", "", "d e"]))
    data = DocBin(docs=docs, store_user_data=True).to_bytes()
    back = list(DocBin().from_bytes(data).get_docs(nlp.vocab))
    for d, b in zip(docs, back):
        numpy.testing.assert_array_equal(b._.elmo, d._.elmo)


def test_pickle_doc(nlp):
    doc = nlp("a b c")
    back = pickle.loads(pickle.dumps(doc))
    numpy.testing.assert_array_equal(back._.elmo, doc._.elmo)
    assert back[0].has_vector


# A fresh process without any elmo component: it reads the docs written below (a pickled doc or a
# DocBin, each in a process of its own) and prints what it sees.
_READER = """
import json, pickle, sys
import spacy
from spacy.tokens import DocBin
if sys.argv[1] == "pickle":
    doc = pickle.load(open(sys.argv[2], "rb"))  # its user hooks import spacy_elmo.pipeline, nothing else does
    print(json.dumps([doc[1].vector.tolist(), doc[1].has_vector, doc[1].similarity(doc[2]), doc._.elmo.tolist()]))
else:
    from spacy_elmo.pipeline import install_hooks
    (read,) = DocBin().from_disk(sys.argv[2]).get_docs(spacy.blank("en").vocab)
    install_hooks(read)
    elmo = read._.elmo.tolist()  # before any hook runs: install_hooks registered the extension
    print(json.dumps([read[1].vector.tolist(), read[1].has_vector, read[1].similarity(read[2]), elmo]))
"""


def test_docs_read_in_a_process_without_the_component(nlp, tmp_path):
    """A consumer process (no elmo component) that unpickles docs, or reads a DocBin and calls
    install_hooks, reads the vectors and doc._.elmo: the extensions are registered by the unpickled
    doc's hooks and by install_hooks (not by importing spacy_elmo.pipeline, which spaCy does in every
    process that creates a Language)."""
    doc = nlp("The bank of the river .")
    pickle.dump(doc, open(tmp_path / "doc.pkl", "wb"))
    DocBin(docs=[doc], store_user_data=True).to_disk(tmp_path / "docs.spacy")
    vector, similarity = doc[1].vector, doc[1].similarity(doc[2])
    for kind, path in (("pickle", tmp_path / "doc.pkl"), ("docbin", tmp_path / "docs.spacy")):
        result = subprocess.run([sys.executable, "-c", _READER, kind, str(path)],
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        seen = json.loads(result.stdout)
        numpy.testing.assert_allclose(seen[0], vector, rtol=1e-6)
        assert seen[1] is True
        assert abs(seen[2] - similarity) < 1e-6
        numpy.testing.assert_array_equal(numpy.asarray(seen[3], dtype="float16"), doc._.elmo)


_USER_EXTENSION = """
import spacy
import spacy_elmo.pipeline  # what spaCy's entry points import in spacy.blank / spacy.load
from spacy.tokens import Doc, Token
nlp = spacy.blank("en")
Doc.set_extension("elmo", getter=lambda doc: "mine")
Token.set_extension("elmo_vector", default="mine too")
doc = nlp("a b")
print(doc._.elmo, "|", doc[0]._.elmo_vector)
"""


def test_a_process_without_the_component_keeps_the_extension_names_free():
    """Importing spacy_elmo.pipeline (spaCy does in every spacy.blank / spacy.load where spacy-elmo is
    installed) registers no extension: a user's own Doc.set_extension("elmo", ...) after
    spacy.blank("en") raised spaCy's E090."""
    result = subprocess.run([sys.executable, "-c", _USER_EXTENSION], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "mine | mine too"


def test_n_process_2(nlp):
    texts = ["The bank .", "A river bank .", "", "Money in the bank ."] * 2
    single = [d._.elmo for d in nlp.pipe(texts)]
    multi = [d._.elmo for d in nlp.pipe(texts, n_process=2, batch_size=2)]
    for a, b in zip(single, multi):  # other batches: equal up to rounding (one float16 ulp)
        numpy.testing.assert_allclose(a.astype("float32"), b.astype("float32"), rtol=1e-3, atol=1e-6)


def test_nlp_to_disk_and_bytes(nlp, tmp_path):
    doc = nlp("I went to the bank .")
    nlp.to_disk(tmp_path / "p")
    loaded = spacy.load(tmp_path / "p")
    numpy.testing.assert_array_equal(loaded("I went to the bank .")._.elmo, doc._.elmo)
    assert loaded.get_pipe("elmo").is_loaded
    fresh = spacy.blank("en")
    fresh.add_pipe("elmo")
    fresh.from_bytes(nlp.to_bytes())
    numpy.testing.assert_array_equal(fresh("I went to the bank .")._.elmo, doc._.elmo)


def test_a_saved_pipeline_keeps_how_its_biLM_reads_text(tiny_dir, tmp_path):
    """The biLM's reading provenance (pretrain's language and tokenizer) goes with the pipeline's bytes, not the
    facts of its training (steps); a pipeline saved before it was kept loads with none."""
    import srsly

    reading = {"trained_by": "spacy-elmo pretrain", "lang": "en", "reading": "streams"}
    BiLM.load(tiny_dir).save(tmp_path / "pretrained", provenance={**reading, "steps": 3})
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(tmp_path / "pretrained")})
    nlp("warm up")
    fresh = spacy.blank("en")
    fresh.add_pipe("elmo")
    fresh.from_bytes(nlp.to_bytes())
    assert get_bilm(fresh.get_pipe("elmo").model).provenance == reading
    data = srsly.msgpack_loads(nlp.get_pipe("elmo").model.to_bytes())
    for node in data["shims"]:
        for i, shim in enumerate(node):
            outer = srsly.msgpack_loads(shim)
            state = srsly.msgpack_loads(outer["state"])
            del state["provenance"]  # as an older pipeline saved it
            node[i] = srsly.msgpack_dumps({**outer, "state": srsly.msgpack_dumps(state)})
    older = spacy.blank("en")
    older.add_pipe("elmo")
    older.get_pipe("elmo").model.from_bytes(srsly.msgpack_dumps(data))
    assert get_bilm(older.get_pipe("elmo").model).provenance == {}


def test_saved_before_first_use_needs_no_weight_files(tiny_dir, tmp_path, monkeypatch):
    """to_disk / to_bytes before the first call store the weights, not their (relative) path."""
    shutil.copytree(tiny_dir, tmp_path / "weights")
    monkeypatch.chdir(tmp_path)
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": "weights", "store_dtype": "float32"})
    nlp.to_disk(tmp_path / "p")
    data = nlp.to_bytes()
    bilm = BiLM.load(tmp_path / "weights", backend="reference")
    shutil.rmtree(tmp_path / "weights")
    monkeypatch.chdir(tmp_path / "p")
    words = "I went to the bank .".split()
    with torch.no_grad():
        expected = torch.stack(bilm(batch_to_ids([words])).activations)[:, 0].numpy()
    loaded = spacy.load(tmp_path / "p")
    numpy.testing.assert_allclose(loaded(" ".join(words))._.elmo, expected, atol=1e-5)
    fresh = spacy.blank("en")
    fresh.add_pipe("elmo", config={"weights": "weights", "store_dtype": "float32"})  # built as saved: its settings run
    fresh.from_bytes(data)
    numpy.testing.assert_allclose(fresh(" ".join(words))._.elmo, expected, atol=1e-5)


def _threads_after_unpickling(nlp, queue):  # module level: run in a spawned process
    queue.put(torch.get_num_threads())


def _spawned_threads(nlp) -> int:
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    worker = ctx.Process(target=_threads_after_unpickling, args=(nlp, queue))
    worker.start()
    threads = queue.get(timeout=120)
    worker.join(60)
    return threads


def test_spawned_worker_runs_one_thread(nlp):
    """A spawned worker (nlp.pipe(n_process=N) under the spawn start method) that unpickles the
    component runs torch on one thread, as a forked one does, instead of one per core each."""
    default = _spawned_threads(None)
    if default == 1:
        pytest.skip("a spawned process runs one thread here anyway")
    assert _spawned_threads(nlp) == 1


def test_float16_weights_stay_float16_in_a_saved_pipeline(tiny_dir, tmp_path):
    """A float16 model (as the bundled default) runs in float32; the saved pipeline stored that upcast
    copy (the default: 54 MB in every saved pipeline, model-best and model-last each, for 27 MB of
    weights). Weights that float16 holds exactly are stored in it and load back equal; others stay float32."""
    BiLM.load(tiny_dir).save(tmp_path / "half", dtype=torch.float16)
    sizes, weights = {}, {}
    for name, source in (("half", tmp_path / "half"), ("float32", tiny_dir)):
        nlp = spacy.blank("en")
        nlp.add_pipe("elmo", config={"weights": str(source)})
        nlp.to_disk(tmp_path / name)
        sizes[name] = (tmp_path / name / "elmo" / "model").stat().st_size
        weights[name] = get_bilm(spacy.load(tmp_path / name).get_pipe("elmo").model).state_dict()
        for key, value in BiLM.load(source).state_dict().items():
            assert value.dtype == weights[name][key].dtype == torch.float32
            assert torch.equal(weights[name][key], value), key
    assert sizes["half"] < 0.6 * sizes["float32"]


BIAS = "lstm.forward_layers.0.bias"


def _nan_at_first(weight: torch.Tensor) -> torch.Tensor:
    weight = weight.clone()
    weight[0] = float("nan")
    return weight


def _with_weight(model_bytes: bytes, change) -> bytes:
    """The elmo model's bytes (thinc's; its one shim holds the biLM, bilm_layer._serialize_runner's) with the weight
    :data:`BIAS` replaced by ``change(weight)``: what a spacy-elmo that checked nothing on save wrote."""
    msg = srsly.msgpack_loads(model_bytes)
    (node,) = [i for i, shims in enumerate(msg["shims"]) if shims]
    shim = srsly.msgpack_loads(msg["shims"][node][0])
    state = srsly.msgpack_loads(shim["state"])
    weights = st_load(state["weights"])
    weights[BIAS] = change(weights[BIAS])
    state["weights"] = st_save(weights)
    shim["state"] = srsly.msgpack_dumps(state)
    msg["shims"][node][0] = srsly.msgpack_dumps(shim)
    return srsly.msgpack_dumps(msg)


@pytest.mark.parametrize(
    "change,error",
    [
        (_nan_at_first, r"holds 1 NaN or infinite value\(s\), so the pipeline would give NaN vectors"),
        (lambda w: torch.full_like(w, float("inf")), r"holds 64 NaN or infinite value"),
        # load_state_dict would copy it into the float parameter without a word
        (lambda w: w.round().to(torch.int32), r"holds torch\.int32 values, but weights are floating point"),
    ],
)
def test_a_saved_biLM_weight_that_cannot_serve_is_refused_on_load(nlp, tmp_path, change, error):
    """A pipeline saved with a NaN biLM weight (fine-tuning that diverged, saved by a spacy-elmo that did not
    refuse it) loaded without a word and gave NaN vectors: refused, naming the component and the weight."""
    doc = nlp("I went to the bank .")
    nlp.to_disk(tmp_path / "p")
    model = tmp_path / "p" / "elmo" / "model"
    model.write_bytes(_with_weight(model.read_bytes(), change))
    error = r"the saved biLM weight 'lstm\.forward_layers\.0\.bias' " + error
    with pytest.raises(ValueError, match="The 'elmo' component: " + error):
        spacy.load(tmp_path / "p")
    # into a pipeline that runs: refused before they replace its own, which serve on
    with pytest.raises(ValueError, match=error):
        nlp.from_disk(tmp_path / "p")
    numpy.testing.assert_array_equal(nlp("I went to the bank .")._.elmo, doc._.elmo)
    # the layer read by thinc alone (spacy_elmo.ElmoBiLM.v1 inside another component): the same check
    fresh = spacy.blank("en")
    fresh.add_pipe("elmo")
    with pytest.raises(ValueError, match="The saved elmo biLM layer: " + error):
        fresh.get_pipe("elmo").model.from_bytes(model.read_bytes())


def test_a_biLM_with_a_non_finite_weight_is_not_saved(nlp, tmp_path):
    """Saved, it gave NaN vectors at every use; the error says so before anything of it is written."""
    nlp("I went to the bank .")
    with torch.no_grad():
        get_bilm(nlp.get_pipe("elmo").model).lstm.forward_layers[0].bias[3] = float("-inf")
    error = r"Cannot save the elmo biLM: its weight 'lstm\.forward_layers\.0\.bias' holds 1 NaN or infinite value"
    with pytest.raises(ValueError, match=error):
        nlp.to_disk(tmp_path / "p")
    with pytest.raises(ValueError, match=error):
        nlp.to_bytes()
    with pytest.raises(ValueError, match=error):
        nlp.get_pipe("elmo").model.to_bytes()


def test_a_pipeline_whose_save_was_refused_says_its_model_file_is_incomplete(nlp, tmp_path):
    """thinc opens elmo/model before the biLM's weights are checked, so a refused save (as spacy train's model-last,
    rewritten at each checkpoint, over a good one) leaves it empty: loading names the file, not msgpack's error."""
    nlp("I went to the bank .")
    nlp.to_disk(tmp_path / "p")
    bias = get_bilm(nlp.get_pipe("elmo").model).lstm.forward_layers[0].bias
    keep = bias.detach().clone()
    with torch.no_grad():
        bias[3] = float("nan")
    with pytest.raises(ValueError, match="Cannot save the elmo biLM"):
        nlp.to_disk(tmp_path / "p")
    with torch.no_grad():
        bias.copy_(keep)
    doc = nlp("I went to the bank .")
    model = tmp_path / "p" / "elmo" / "model"
    error = re.escape(f"{model} cannot be read (Unpack failed: incomplete input): ") + ".* incomplete .* model-best"
    with pytest.raises(ValueError, match=error):
        spacy.load(tmp_path / "p")
    with pytest.raises(ValueError, match=error):  # into a pipeline that runs: its own weights serve on
        nlp.get_pipe("elmo").from_disk(tmp_path / "p" / "elmo", exclude=["vocab"])
    numpy.testing.assert_array_equal(nlp("I went to the bank .")._.elmo, doc._.elmo)
    saved = srsly.msgpack_loads(nlp.get_pipe("elmo").to_bytes())
    saved["model"] = saved["model"][:-10]  # its model's bytes cut short
    with pytest.raises(ValueError, match="The elmo component's saved model cannot be read"):
        nlp.get_pipe("elmo").from_bytes(srsly.msgpack_dumps(saved))
