"""A pipeline served: several threads calling ``nlp(text)`` / ``nlp.pipe`` at once (caches on and off),
weights swapped while a call runs, a child forked while another thread holds a lock, workers of
``nlp.pipe(n_process=2)`` under the spawn and forkserver start methods, a pipeline loaded in a spawned
process, pickled and copied pipelines: the results of a serial run.
(The biLM from threads, without spaCy: tests/bilm/test_concurrency.py.)"""

import copy
import multiprocessing
import pickle
import random
import threading

import numpy
import pytest
import spacy
import torch
from spacy.language import Language
from spacy.training import Example
from spacy.vectors import Vectors

from spacy_elmo import BiLM, BiLMConfig
from spacy_elmo.bilm.token_cache import TokenCache
from spacy_elmo.pipeline import component as component_module
from spacy_elmo.pipeline import runner as runner_module
from spacy_elmo.pipeline.listener import ElmoListener
from spacy_elmo.pipeline.bilm_layer import get_runner
from tests.threads import meeting, run_in_threads

from .conftest import TINY, make_docs
from .test_listener import LISTENER, NER, TOK2VEC, _nlp_with, _textcat_model, _two_elmo_pipeline

WORDS = ["bank", "river", "money", "Alice", "Bob", "Paris", "London", "went", "home", "good", "bad", "it", "was"]


def _texts(n: int, seed: int):
    """Distinct texts of two sentences, many of their words new to the token cache."""
    rng = random.Random(seed)
    return [
        " ".join(rng.choice(WORDS + [f"w{seed}x{i}y{j}" for j in range(6)]) for _ in range(rng.randint(3, 9)))
        + " . " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 5))) + " ."
        for i in range(n)
    ]


@pytest.fixture(scope="module")
def served(tiny_dir):
    """elmo (float32 layers and doc.tensor) feeding ner and textcat through listeners, trained a little."""
    nlp = _nlp_with(tiny_dir, "textcat", _textcat_model("textcat", TOK2VEC))
    nlp.add_pipe("sentencizer", first=True)
    nlp.add_pipe("ner", config={"model": {**NER, "tok2vec": LISTENER}})
    elmo = nlp.get_pipe("elmo")
    elmo.cfg.update(store_dtype="float32", set_doc_tensor=True)
    examples = [Example(nlp.make_doc(d.text), d) for d in make_docs(8)]
    optimizer = nlp.initialize(lambda: examples)
    for _ in range(3):
        nlp.update(examples, sgd=optimizer)
    return nlp


def _results(doc):
    return doc._.elmo, doc.tensor, [(e.start, e.end, e.label_) for e in doc.ents], doc.cats


def _assert_same(got, want):
    """Equal up to float32 rounding: which tokens the char-CNN cache encoded together and which docs
    shared a batch change the last bits (test_component.py), nothing else."""
    for a, b in zip(got[:2], want[:2]):
        numpy.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    assert got[2] == want[2]
    assert got[3].keys() == want[3].keys()
    numpy.testing.assert_allclose(list(got[3].values()), list(want[3].values()), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("layer_cache_mb", [0, 1])
def test_threads_calling_the_pipeline_at_once(served, layer_cache_mb):
    """Four threads, two calling nlp(text) and two nlp.pipe, over texts with words new to the caches
    (and a share of texts all of them run): each doc as a serial run gives it. The char-CNN cache,
    shared by the threads, gave one thread's new words another's vectors (or crashed)."""
    nlp, elmo = served, served.get_pipe("elmo")
    shared = _texts(10, 99)
    batches = [_texts(20, k) + shared for k in range(4)]
    want = {text: _results(nlp(text)) for batch in batches for text in batch}
    get_runner(elmo.model).clear_caches()  # the threads meet the new words, not the serial run's cache
    elmo.layer_cache_mb = layer_cache_mb
    try:
        def serve(k, texts):
            return list(nlp.pipe(texts, batch_size=4)) if k % 2 else [nlp(text) for text in texts]

        got = run_in_threads(serve, list(enumerate(batches)))
    finally:
        elmo.layer_cache_mb = 0
    for texts, docs in zip(batches, got):
        for text, doc in zip(texts, docs):
            _assert_same(_results(doc), want[text])


def test_threads_starting_with_a_call_load_the_weights_once(tiny_dir, monkeypatch):
    """Threads that each start with a call of a pipeline whose weights load at first use: each loaded
    them, and set them under the others' running biLM."""
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(tiny_dir)})
    loads, meet, load = [], meeting(), component_module.load_weights

    def load_together(*args):
        loads.append(args)
        meet()  # both threads loading at once, unless a lock lets only one in (then it goes on at once)
        return load(*args)

    monkeypatch.setattr(component_module, "load_weights", load_together)
    elmo = nlp.get_pipe("elmo")
    monkeypatch.setitem(component_module._LOADING, elmo, meet.watch(component_module._loading_lock(elmo)))
    texts = ["The bank .", "A river bank ."]
    got = run_in_threads(nlp, [(text,) for text in texts])
    assert len(loads) == 1
    for text, doc in zip(texts, got):
        numpy.testing.assert_array_equal(doc._.elmo, nlp(text)._.elmo)


_MEET = {"wait": lambda: None}  # what the component below waits for


@Language.component("serving_test_meet")
def _meet(doc):
    _MEET["wait"]()
    return doc


def test_threads_with_two_elmo_components(tiny_dir, tmp_path, monkeypatch):
    """Two elmo components of the same shape, a listener of each: at prediction a listener reads the
    layers its upstream handed it for the batch, doc._.elmo holding the last upstream's. Another
    thread's batch replaced that hand-over, so the first elmo's listener read the second's layers."""
    torch.manual_seed(1)
    BiLM(BiLMConfig(**TINY)).save(tmp_path / "b")
    nlp = _two_elmo_pipeline(tiny_dir, tmp_path / "b")
    nlp.add_pipe("serving_test_meet", after="elmo_b")
    (listener,) = [n for n in nlp.get_pipe("ner_a").model.walk() if isinstance(n, ElmoListener)]
    read, forward = {}, listener._func

    def recording(model, docs, is_train):
        outputs, backprop = forward(model, docs, is_train)
        read[docs[0].text] = outputs[0]
        return outputs, backprop

    texts = ["Yesterday Alice went home .", "Bob was in Paris and it was good ."]
    monkeypatch.setattr(listener, "_func", recording)
    for text in texts:
        nlp(text)
    want = dict(read)
    monkeypatch.setitem(_MEET, "wait", meeting())  # both threads past both elmo components before either listener reads
    run_in_threads(nlp, [(text,) for text in texts])
    for text in texts:  # float32 (listeners read the layers before store_dtype rounds them): the last bit may differ
        # with how many threads each product got while the two ran at once; the other biLM's layers differ wholly
        numpy.testing.assert_allclose(read[text], want[text], rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("copier", [lambda x: pickle.loads(pickle.dumps(x)), copy.deepcopy], ids=["pickle", "deepcopy"])
def test_pickled_and_copied_pipeline(served, copier):
    """A copy of the pipeline gives the original's results and starts with empty caches: the
    char-CNN cache's (50,000 x P) matrix went with every pickled pipeline (to every spawned worker
    of nlp.pipe(n_process=N)); so does a copy of the elmo component alone."""
    nlp = served
    texts = _texts(6, 7)
    get_runner(nlp.get_pipe("elmo").model).clear_caches()
    want = [_results(doc) for doc in nlp.pipe(texts)]  # from empty caches, as the copy's run below
    assert len(get_runner(nlp.get_pipe("elmo").model).cache.index) > 0
    back = copier(nlp)
    runner = get_runner(back.get_pipe("elmo").model)
    assert runner.cache.index == {} and runner.cache.matrix is None and len(runner.layer_cache) == 0
    for got, expected in zip(back.pipe(texts), want):  # the same calls from the same state: the same bits
        got = _results(got)
        numpy.testing.assert_array_equal(got[0], expected[0])
        numpy.testing.assert_array_equal(got[1], expected[1])
        assert got[2:] == expected[2:]
    elmo = copier(nlp.get_pipe("elmo"))
    assert get_runner(elmo.model).cache.index == {}
    docs = [nlp.get_pipe("sentencizer")(nlp.make_doc(text)) for text in texts]
    for doc, expected in zip(elmo.pipe(docs), want):
        numpy.testing.assert_array_equal(doc._.elmo, expected[0])


@pytest.fixture
def start_method(request):
    """The process-wide start method (spaCy's nlp.pipe(n_process=N) takes it) for one test, then the one before."""
    if request.param not in multiprocessing.get_all_start_methods():
        pytest.skip(f"no {request.param} on this platform")
    before = multiprocessing.get_start_method(allow_none=True)
    multiprocessing.set_start_method(request.param, force=True)
    yield request.param
    multiprocessing.set_start_method(before, force=True)


@pytest.mark.parametrize("start_method", ["spawn", "forkserver"], indirect=True)
def test_n_process_2_under_spawn_and_forkserver(served, start_method):
    """Workers that unpickle the pipeline (the default start method on macOS and Windows) give the
    docs of one process, listeners' predictions included."""
    texts = _texts(8, 11)
    want = [_results(doc) for doc in served.pipe(texts, batch_size=2)]
    got = list(served.pipe(texts, batch_size=2, n_process=2))
    assert [doc.text for doc in got] == texts
    for doc, expected in zip(got, want):
        _assert_same(_results(doc), expected)


def _load_and_run(path, texts):  # module level: run in a spawned process
    return [_results(doc) for doc in spacy.load(path).pipe(texts)]


def test_saved_pipeline_loaded_in_a_spawned_process(served, tmp_path):
    texts = _texts(4, 12)
    served.to_disk(tmp_path / "p")
    want = [_results(doc) for doc in spacy.load(tmp_path / "p").pipe(texts)]
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        got = pool.apply(_load_and_run, (str(tmp_path / "p"), texts))
    for results, expected in zip(got, want):
        _assert_same(results, expected)


def _elmo_pipeline(weights, **model):
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("elmo", config={"weights": str(weights), "store_dtype": "float32", "model": model})
    return nlp


def _layers(docs):
    """Each doc's layers and its tokens' vectors (the layers mixed: doc._.elmo_mix)."""
    return [array for doc in docs for array in (doc._.elmo, numpy.stack([token.vector for token in doc]))]


def _all_close(got, want) -> bool:
    return len(got) == len(want) and all(
        g.shape == w.shape and numpy.allclose(g, w, rtol=1e-6, atol=1e-6) for g, w in zip(got, want)
    )


@pytest.mark.parametrize("shape", ["same shape", "other shape"])
def test_weights_swapped_while_a_call_runs(tiny_dir, tmp_path, monkeypatch, shape):
    """A thread's batch paused after the first of its biLM runs while another thread loads other
    weights (load_weights): the batch gives what the old weights alone give it, and the next call
    what the new ones give. The batch's later runs took the new biLM (or failed on its shape, as did
    its token vectors, mixed by the new weights' layer count), and the layers of its runs went into the
    layer cache after the swap had emptied it: calls of the new weights were served the old weights' layers."""
    torch.manual_seed(2)
    other = {} if shape == "same shape" else {"projection_dim": 6, "n_layers": 1}
    BiLM(BiLMConfig(**{**TINY, **other})).save(tmp_path / "new")
    texts = _texts(4, 21)
    small = {"batch_tokens": 12}  # a run per sentence or two: a batch of these texts takes several
    want_old = _layers(_elmo_pipeline(tiny_dir, **small).pipe(texts))
    want_new = _layers(_elmo_pipeline(tmp_path / "new", **small).pipe(texts))
    assert not _all_close(want_old, want_new)
    nlp = _elmo_pipeline(tiny_dir, **small)
    elmo = nlp.get_pipe("elmo")
    elmo.layer_cache_mb = 1
    nlp("Loaded before the batch .")
    paused, resume, run_rows = threading.Event(), threading.Event(), runner_module.run_rows

    def pausing(*args, **kwargs):  # the serving thread's first biLM run, done: wait for the swap
        output = run_rows(*args, **kwargs)
        if threading.current_thread().name == "serving" and not paused.is_set():
            paused.set()
            resume.wait(60)
        return output

    monkeypatch.setattr(runner_module, "run_rows", pausing)
    got, errors = [], []

    def serve():
        try:
            got.extend(_layers(nlp.pipe(texts, batch_size=len(texts))))
        except BaseException as err:  # pragma: no cover - raised below
            errors.append(err)
            paused.set()

    thread = threading.Thread(target=serve, name="serving")
    thread.start()
    assert paused.wait(60)
    elmo.load_weights(str(tmp_path / "new"))
    cache = get_runner(elmo.model).layer_cache
    nlp(texts[0])  # the new weights' layers kept while the old batch still runs ...
    kept = list(cache.entries)
    assert kept
    resume.set()
    thread.join()
    if errors:
        raise errors[0]
    assert _all_close(got, want_old) or _all_close(got, want_new), "one batch ran on both biLMs"
    # ... and not dropped by that batch's end (it emptied the cache and filled it with its own)
    assert list(cache.entries) == kept and all(cache.get(key) is not None for key in kept)
    assert _all_close(_layers(nlp.pipe(texts, batch_size=len(texts))), want_new)


@pytest.mark.parametrize("how", ["load_weights", "from_bytes", "from_disk"])
def test_weights_set_while_a_call_loads_them_at_first_use(tiny_dir, tmp_path, monkeypatch, how):
    """One thread's call loads the weights at first use while another thread sets other weights:
    the weights set are the ones kept (the call may run either). The first-use load, done later,
    replaced them after the setting had returned."""
    torch.manual_seed(3)
    BiLM(BiLMConfig(**TINY)).save(tmp_path / "new")
    text = "Alice went to the river bank ."
    new = _elmo_pipeline(tmp_path / "new")
    want_new = new(text)._.elmo
    new.get_pipe("elmo").to_disk(tmp_path / "saved")
    swap = {
        "load_weights": lambda elmo: elmo.load_weights(str(tmp_path / "new")),
        "from_bytes": lambda elmo, data=new.get_pipe("elmo").to_bytes(): elmo.from_bytes(data),
        "from_disk": lambda elmo: elmo.from_disk(tmp_path / "saved"),
    }[how]
    nlp = _elmo_pipeline(tiny_dir)
    elmo = nlp.get_pipe("elmo")
    meet, load = meeting(), component_module.load_weights

    def first_use(*args):  # the serving thread's load waits until the other thread set its weights (or waits for the lock)
        if threading.current_thread().name == "serving":
            meet()
        return load(*args)

    def set_weights():
        swap(elmo)
        meet()

    monkeypatch.setattr(component_module, "load_weights", first_use)
    monkeypatch.setitem(component_module._LOADING, elmo, meet.watch(component_module._loading_lock(elmo)))
    serving = threading.Thread(target=nlp, args=(text,), name="serving")
    serving.start()
    set_weights()
    serving.join()
    numpy.testing.assert_allclose(nlp(text)._.elmo, want_new, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("how", ["load_weights", "from_bytes", "from_disk"])
def test_weights_refused_leave_the_component_as_it_was(tiny_dir, tmp_path, how):
    """Weights the listeners cannot read (another width than the listener's configured one) are refused with the
    error, and the pipeline gives, bitwise, what it gave before, from the old weights. load_weights set the new
    weights before it checked the listeners (the pipeline then ran them: its output changed); from_bytes and
    from_disk checked no listener (the saved cfg, then loaded, stored "mix": the listener found no layers) and
    kept the refused cfg."""
    torch.manual_seed(4)
    BiLM(BiLMConfig(**{**TINY, "projection_dim": 6})).save(tmp_path / "new")
    saved = spacy.blank("en")
    saved.add_pipe("elmo", config={"weights": str(tmp_path / "new"), "store": "mix"})
    saved("Loaded .")
    saved.get_pipe("elmo").to_disk(tmp_path / "saved")
    stores_mix = saved.get_pipe("elmo").to_bytes()
    nlp = _nlp_with(tiny_dir, "ner", {**NER, "tok2vec": {**LISTENER, "width": 16}})
    examples = [Example(nlp.make_doc(d.text), d) for d in make_docs(8)]
    nlp.initialize(lambda: examples)
    text = "Yesterday Alice went home and it was good ."
    elmo = nlp.get_pipe("elmo")
    elmo.layer_cache_mb = 1
    before, cfg, source = nlp(text), copy.deepcopy(elmo.cfg), elmo.source
    refuse, error = {
        "load_weights": (lambda: elmo.load_weights(str(tmp_path / "new")), "expects width 16"),
        "from_bytes": (lambda: elmo.from_bytes(stores_mix), "expects width 16"),
        "from_disk": (lambda: elmo.from_disk(tmp_path / "saved"), "expects width 16"),
    }[how]
    with pytest.raises(ValueError, match=error):
        refuse()
    after = nlp(text)
    assert elmo.source == source and elmo.cfg == cfg
    numpy.testing.assert_array_equal(after._.elmo, before._.elmo)
    numpy.testing.assert_array_equal(after.tensor, before.tensor)
    assert [(e.start, e.end, e.label_) for e in after.ents] == [(e.start, e.end, e.label_) for e in before.ents]


def _other_width_loads(tmp_path):
    """``{how: load(elmo)}`` of weights of width 12 (TINY's is 16): load_weights, from_bytes, from_disk."""
    torch.manual_seed(5)
    BiLM(BiLMConfig(**{**TINY, "projection_dim": 6})).save(tmp_path / "wide")
    saved = _elmo_pipeline(tmp_path / "wide")
    saved("Loaded .")
    saved.get_pipe("elmo").to_disk(tmp_path / "saved")
    data = saved.get_pipe("elmo").to_bytes()
    return {
        "load_weights": lambda elmo: elmo.load_weights(str(tmp_path / "wide")),
        "from_bytes": lambda elmo: elmo.from_bytes(data),
        "from_disk": lambda elmo: elmo.from_disk(tmp_path / "saved"),
    }


_TASKS = {"ner": {**NER, "tok2vec": LISTENER}, "textcat": _textcat_model("textcat", TOK2VEC)}


def _task_pipeline(tiny_dir, task):
    nlp = _nlp_with(tiny_dir, task, _TASKS[task])
    nlp.initialize(lambda: [Example(nlp.make_doc(d.text), d) for d in make_docs(8)])
    return nlp


def _task_results(doc):
    return doc._.elmo, [(e.start, e.end, e.label_) for e in doc.ents], doc.cats


@pytest.mark.parametrize("task", ["ner", "textcat"])
@pytest.mark.parametrize("how", ["load_weights", "from_bytes", "from_disk"])
@pytest.mark.parametrize("pipeline", ["initialized", "saved and loaded"])
def test_weights_of_another_width_are_refused_once_a_listening_component_is_initialized(
    tiny_dir, tmp_path, task, how, pipeline
):
    """A listener sized by 'elmo' itself took weights of another width (its check skipped the sizes the
    component had set): the layers after it, initialized for width 16, then failed at the next call with
    blis's 'Shape mismatch for blis.gemm'; from_bytes / from_disk failed with thinc's raw 'Attempt to change
    dimension'. Refused now, naming both widths and the fix, with the pipeline unchanged; the fix named works."""
    load = _other_width_loads(tmp_path)[how]
    nlp = _task_pipeline(tiny_dir, task)
    if pipeline == "saved and loaded":
        nlp.to_disk(tmp_path / "pipeline")
        nlp = spacy.load(tmp_path / "pipeline")
    text = "Yesterday Alice went home and it was good ."
    elmo = nlp.get_pipe("elmo")
    before, cfg, source = _task_results(nlp(text)), copy.deepcopy(elmo.cfg), elmo.source
    with pytest.raises(ValueError) as refused:
        load(elmo)
    said = str(refused.value)
    assert f"'{task}' was initialized on the layers of 'elmo' (3 layers of width 16)" in said, said
    assert "have 3 layers of width 12" in said and f"nlp.remove_pipe('{task}')" in said
    after = _task_results(nlp(text))
    assert elmo.source == source and elmo.cfg == cfg
    numpy.testing.assert_array_equal(after[0], before[0])
    assert after[1:] == before[1:]
    # the fix: remove the component, load the weights, add it anew and initialize it
    nlp.remove_pipe(task)
    load(elmo)
    nlp.add_pipe(task, config={"model": _TASKS[task]})
    nlp.get_pipe(task).initialize(lambda: [Example(nlp.make_doc(d.text), d) for d in make_docs(8)], nlp=nlp)
    assert nlp(text)._.elmo.shape == (3, 9, 12)


@pytest.mark.parametrize("how", ["load_weights", "from_bytes", "from_disk"])
def test_weights_of_another_width_are_accepted_before_the_listening_component_is_initialized(tiny_dir, tmp_path, how):
    """Listeners 'elmo' sized (its weights loaded before 'ner' was added) and nothing built on them yet take
    weights of any width: 'ner' is then initialized for the new one."""
    load = _other_width_loads(tmp_path)[how]
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(tiny_dir)})
    nlp("Loaded before .")
    nlp.add_pipe("ner", config={"model": _TASKS["ner"]})
    listener = next(n for n in nlp.get_pipe("ner").model.walk() if isinstance(n, ElmoListener))
    assert listener.get_dim("nO") == 16
    load(nlp.get_pipe("elmo"))
    nlp.initialize(lambda: [Example(nlp.make_doc(d.text), d) for d in make_docs(8)])
    assert listener.get_dim("nO") == 12 and nlp("Yesterday Alice went home .")._.elmo.shape == (3, 5, 12)


@pytest.mark.parametrize("how", ["from_bytes", "from_disk"])
@pytest.mark.parametrize("shape", ["same shape", "other width"])
def test_a_vocab_that_fails_to_be_set_puts_the_weights_back(tiny_dir, tmp_path, monkeypatch, how, shape):
    """A saved vocab that reads into a vocab of its own but fails while the shared one is set (here its
    lookups) was set after the weights were accepted and put in: the component kept the new weights, cfg
    and sizes. The error surfaces as raised, and weights, cfg and settings are the old ones."""
    torch.manual_seed(6)
    BiLM(BiLMConfig(**{**TINY, **({} if shape == "same shape" else {"projection_dim": 6})})).save(tmp_path / "new")
    saved = _elmo_pipeline(tmp_path / "new")
    saved("Loaded .")
    saved.get_pipe("elmo").to_disk(tmp_path / "saved")
    load = {
        "from_bytes": lambda elmo, data=saved.get_pipe("elmo").to_bytes(): elmo.from_bytes(data),
        "from_disk": lambda elmo: elmo.from_disk(tmp_path / "saved"),
    }[how]
    nlp = _elmo_pipeline(tiny_dir)
    elmo = nlp.get_pipe("elmo")
    text = "Alice went to the river bank ."
    before, cfg, source, bilm = _layers([nlp(text)]), copy.deepcopy(elmo.cfg), elmo.source, get_runner(elmo.model).bilm
    dims = dict(elmo.model._dims)

    def broken(*args, **kwargs):
        raise OSError("lookups could not be set")

    monkeypatch.setattr(nlp.vocab.lookups, "from_bytes", broken)
    with pytest.raises(OSError, match="lookups could not be set"):
        load(elmo)
    assert get_runner(elmo.model).bilm is bilm and elmo.source == source and elmo.cfg == cfg
    assert dict(elmo.model._dims) == dims
    numpy.testing.assert_array_equal(_layers([nlp(text)])[0], before[0])
    monkeypatch.undo()
    load(elmo)  # set, it loads
    assert elmo.source == str(tmp_path / "new") and elmo.cfg == cfg and not _all_close(_layers([nlp(text)]), before)


@pytest.mark.parametrize("how", ["from_bytes", "from_disk"])
def test_refused_load_leaves_the_vocab(tiny_dir, tmp_path, how):
    """The shared vocab (vectors, strings) is left as it was by a refused from_bytes / from_disk (spaCy loads it
    before the model: it was replaced, the vectors emptied), and loaded by one accepted."""
    torch.manual_seed(4)
    BiLM(BiLMConfig(**{**TINY, "projection_dim": 6})).save(tmp_path / "wide")
    saved = {}
    for weights in (tmp_path / "wide", tiny_dir):  # other weights of width 12, refused once ner is initialized
        saved[weights] = spacy.blank("en")
        saved[weights].add_pipe("elmo", config={"weights": str(weights)})
        saved[weights]("Zyxwv only here .")
    load = {
        "from_bytes": lambda elmo, path, weights: elmo.from_bytes(saved[weights].get_pipe("elmo").to_bytes()),
        "from_disk": lambda elmo, path, weights: elmo.from_disk(saved[weights].get_pipe("elmo").to_disk(path) or path),
    }[how]
    nlp = _nlp_with(tiny_dir, "ner", {**NER, "tok2vec": {**LISTENER}})
    nlp.vocab.set_vector("home", numpy.ones(4, dtype="f"))
    nlp.initialize(lambda: [Example(nlp.make_doc(d.text), d) for d in make_docs(8)])
    elmo, strings, vectors = nlp.get_pipe("elmo"), set(nlp.vocab.strings), nlp.vocab.vectors.to_bytes()
    with pytest.raises(ValueError, match="was initialized on the layers of 'elmo'"):
        load(elmo, tmp_path / "refused", tmp_path / "wide")
    assert nlp.vocab.vectors.to_bytes() == vectors and nlp.vocab.has_vector("home")
    assert set(nlp.vocab.strings) == strings and "Zyxwv" not in nlp.vocab.strings
    load(elmo, tmp_path / "accepted", tiny_dir)
    assert nlp.vocab.vectors.shape == (0, 0) and "Zyxwv" in nlp.vocab.strings


def test_a_component_directory_without_its_vocab_changes_nothing(tiny_dir, tmp_path):
    """nlp.to_disk saves each component without its vocab: elmo.from_disk of such a directory fails on
    the missing vocab, and must do so before anything changed (the vocab, read after the weights were
    accepted, left the new weights and settings in place)."""
    torch.manual_seed(4)
    BiLM(BiLMConfig(**TINY)).save(tmp_path / "new")
    other = _elmo_pipeline(tmp_path / "new")
    other("Loaded .")
    other.to_disk(tmp_path / "pipeline")
    assert not (tmp_path / "pipeline" / "elmo" / "vocab").exists()
    nlp = _elmo_pipeline(tiny_dir)
    elmo = nlp.get_pipe("elmo")
    text = "Alice went to the river bank ."
    before, cfg, source = _layers([nlp(text)]), copy.deepcopy(elmo.cfg), elmo.source
    with pytest.raises(ValueError, match="vocab"):
        elmo.from_disk(tmp_path / "pipeline" / "elmo")
    assert elmo.source == source and elmo.cfg == cfg
    assert _all_close(_layers([nlp(text)]), before)
    elmo.from_disk(tmp_path / "pipeline" / "elmo", exclude=["vocab"])  # as nlp.from_disk loads it
    assert elmo.source == str(tmp_path / "new") and not _all_close(_layers([nlp(text)]), before)


@pytest.mark.parametrize("how", ["from_bytes", "from_disk"])
def test_a_saved_component_brings_its_weights_not_its_settings(tiny_dir, tmp_path, how):
    """A saved component that stores only the mix, float32, with a mix of its own, loaded into one that a listener
    reads: its weights are taken and this component's settings stay (its config's; spacy.load builds it from the
    saved config.cfg). The saved cfg was loaded: refused for its store ("load it with exclude=["cfg"]"), or, with
    no listener, taken."""
    torch.manual_seed(4)
    BiLM(BiLMConfig(**TINY)).save(tmp_path / "new")
    saved = spacy.blank("en")
    saved.add_pipe("elmo", config={"weights": str(tmp_path / "new"), "store": "mix", "store_dtype": "float32",
                                   "mix": [1.0, 0.0, 0.0]})  # fmt: skip
    saved("Loaded .")
    saved.get_pipe("elmo").to_disk(tmp_path / "saved")
    load = {
        "from_bytes": lambda elmo: elmo.from_bytes(saved.get_pipe("elmo").to_bytes()),
        "from_disk": lambda elmo: elmo.from_disk(tmp_path / "saved"),
    }[how]
    nlp = _nlp_with(tiny_dir, "ner", {**NER, "tok2vec": {**LISTENER}})
    nlp.initialize(lambda: [Example(nlp.make_doc(d.text), d) for d in make_docs(8)])
    elmo = nlp.get_pipe("elmo")
    cfg = copy.deepcopy(elmo.cfg)
    load(elmo)
    assert elmo.source == str(tmp_path / "new") and elmo.cfg == cfg
    doc = nlp("Alice went home .")
    assert doc._.elmo.shape == (3, 4, 16) and doc._.elmo.dtype == numpy.float16
    want = _elmo_pipeline(tmp_path / "new")("Alice went home .")._.elmo  # the new weights' layers, float32
    numpy.testing.assert_allclose(doc._.elmo, want, rtol=1e-3, atol=1e-3)


def test_a_vocab_that_fails_to_be_set_leaves_the_shared_vectors_and_lookups(tiny_dir, monkeypatch):
    """spaCy sets a saved vocab's strings, then its vectors, then its lookups: one whose lookups failed to be set
    left the saved vectors in the pipeline's shared vocab (what token.vector and static-vector features read).
    They and the lookups are put back; the load then succeeds and sets them."""
    saved = _elmo_pipeline(tiny_dir)
    saved.vocab.set_vector("river", numpy.full(4, 2.0, "float32"))
    saved.vocab.lookups.add_table("saved", {"river": "RIVER"})
    saved("Loaded .")
    data = saved.get_pipe("elmo").to_bytes()
    nlp = _elmo_pipeline(tiny_dir)
    nlp("Serving .")
    nlp.vocab.set_vector("bank", numpy.ones(4, "float32"))
    nlp.vocab.lookups.add_table("mine", {"bank": "BANK"})
    vectors, lookups = nlp.vocab.vectors.to_bytes(exclude=["strings"]), nlp.vocab.lookups.to_bytes()
    _lookups_fail_once(nlp.vocab.lookups, monkeypatch)
    with pytest.raises(OSError, match="lookups could not be set"):
        nlp.get_pipe("elmo").from_bytes(data)
    assert nlp.vocab.vectors.to_bytes(exclude=["strings"]) == vectors and nlp.vocab.lookups.to_bytes() == lookups
    assert not nlp.vocab.has_vector("river") and nlp.vocab.lookups.has_table("mine")
    nlp.get_pipe("elmo").from_bytes(data)  # set, it loads
    assert nlp.vocab.has_vector("river") and nlp.vocab.lookups.has_table("saved")


def _lookups_fail_once(lookups, monkeypatch) -> None:
    """The next ``lookups.from_bytes`` fails (spaCy sets a vocab's lookups after its vectors); later ones set them."""
    set_lookups, failures = type(lookups).from_bytes, []

    def fails_once(data, **kwargs):
        if not failures:
            failures.append(True)
            raise OSError("lookups could not be set")
        return set_lookups(lookups, data, **kwargs)

    monkeypatch.setattr(lookups, "from_bytes", fails_once)


def _saved_elmo_bytes(weights) -> bytes:
    saved = _elmo_pipeline(weights)
    saved.vocab.set_vector("river", numpy.full(4, 2.0, "float32"))
    saved("Loaded .")
    return saved.get_pipe("elmo").to_bytes()


@pytest.mark.parametrize("mode", ["default", "floret"])
def test_vectors_put_back_after_a_failed_vocab_set_stay_writeable(tiny_dir, monkeypatch, mode):
    """The shared vectors put back after a vocab that failed to be set are the same table as before: the same
    array, still writeable (they came back as a new, read-only copy: nlp.vocab.set_vector then raised "assignment
    destination is read-only"), and the same settings (the token attribute of default-mode vectors came back as
    ORTH). The vectors of the failed load were set meanwhile (spaCy sets them before the lookups)."""
    data = _saved_elmo_bytes(tiny_dir)
    nlp = _elmo_pipeline(tiny_dir)
    nlp("Serving .")
    if mode == "default":
        nlp.vocab.vectors = Vectors(strings=nlp.vocab.strings, shape=(10, 4), attr="LOWER")
        nlp.vocab.set_vector("bank", numpy.ones(4, "float32"))
    else:
        nlp.vocab.vectors = Vectors(
            strings=nlp.vocab.strings, mode="floret", data=numpy.ones((10, 4), "float32"), minn=1, maxn=2, hash_seed=3
        )
    vectors = nlp.vocab.vectors
    table, key2row, attr, settings = vectors.data, vectors.key2row, vectors.attr, vectors._get_cfg()
    _lookups_fail_once(nlp.vocab.lookups, monkeypatch)
    with pytest.raises(OSError, match="lookups could not be set"):
        nlp.get_pipe("elmo").from_bytes(data)
    assert nlp.vocab.vectors is vectors and vectors.data is table and vectors.data.flags.writeable
    assert vectors.key2row is key2row and vectors.attr == attr and vectors._get_cfg() == settings
    if mode == "default":  # (floret has a vector for every word)
        assert not nlp.vocab.has_vector("river") and vectors.is_full is False
        assert nlp("BANK")[0].has_vector  # LOWER: "BANK" reads "bank"
        nlp.vocab.set_vector("shore", numpy.full(4, 3.0, "float32"))  # a spare row
        assert vectors.data is table and nlp.vocab.get_vector("shore").tolist() == [3.0] * 4
    else:
        vectors.data[0] = 3.0  # floret: rows of n-grams, written in place
        assert nlp.vocab.vectors.data[0].tolist() == [3.0] * 4


def test_vectors_put_back_after_a_failed_vocab_set_keep_their_free_rows(tiny_dir, monkeypatch):
    """The failed load set a full vectors table (spaCy then recomputes the free rows, ``_unset``, for it): put back,
    the table has its own free rows again, not the failed table's none (is_full was True, and vectors.add of a new
    key raised spaCy's E197 "table is full")."""
    saved = _elmo_pipeline(tiny_dir)
    saved.vocab.vectors = Vectors(strings=saved.vocab.strings, shape=(1, 4))
    saved.vocab.vectors.add("river", vector=numpy.full(4, 2.0, "float32"))
    assert saved.vocab.vectors.is_full
    saved("Loaded .")
    data = saved.get_pipe("elmo").to_bytes()
    nlp = _elmo_pipeline(tiny_dir)
    nlp("Serving .")
    nlp.vocab.vectors = Vectors(strings=nlp.vocab.strings, shape=(10, 4))
    nlp.vocab.vectors.add("bank", vector=numpy.ones(4, "float32"))
    vectors, table = nlp.vocab.vectors, nlp.vocab.vectors.data
    _lookups_fail_once(nlp.vocab.lookups, monkeypatch)
    with pytest.raises(OSError, match="lookups could not be set"):
        nlp.get_pipe("elmo").from_bytes(data)
    assert vectors.data is table and vectors.is_full is False
    row = vectors.add("shore", vector=numpy.full(4, 3.0, "float32"))
    assert row != vectors.key2row[nlp.vocab.strings["bank"]] and 0 <= row < 10
    assert vectors.data is table and nlp.vocab.get_vector("shore").tolist() == [3.0] * 4


def test_lookups_msgpack_cannot_write_do_not_stop_a_load(tiny_dir, monkeypatch):
    """The shared lookups may hold tables msgpack cannot write (a set): a component load that brings a vocab
    failed on them (TypeError "can not serialize 'set' object") before it read anything. A failed set puts the
    same tables back; one that succeeds sets the saved lookups."""
    data = _saved_elmo_bytes(tiny_dir)
    nlp = _elmo_pipeline(tiny_dir)
    mine = nlp.vocab.lookups.add_table("mine", {"a": {1, 2}})
    _lookups_fail_once(nlp.vocab.lookups, monkeypatch)
    with pytest.raises(OSError, match="lookups could not be set"):
        nlp.get_pipe("elmo").from_bytes(data)
    assert nlp.vocab.lookups.get_table("mine") is mine and mine["a"] == {1, 2}
    nlp.get_pipe("elmo").from_bytes(data)
    assert nlp.vocab.has_vector("river") and not nlp.vocab.lookups.has_table("mine")


class _Watched(dict):
    """A dict that records every moment a change of it leaves out one of the keys it started with."""

    def __init__(self, data):
        super().__init__(data)
        self.first, self.gaps = set(data), []

    def _changed(self, result=None):
        if not self.first <= self.keys():
            self.gaps.append(self.first - self.keys())
        return result

    def __setitem__(self, key, value):
        self._changed(super().__setitem__(key, value))

    def __delitem__(self, key):
        self._changed(super().__delitem__(key))

    def clear(self):
        self._changed(super().clear())

    def pop(self, *args):
        return self._changed(super().pop(*args))

    def popitem(self):
        return self._changed(super().popitem())

    def update(self, *args, **kwargs):
        self._changed(super().update(*args, **kwargs))


def test_refused_load_never_leaves_a_setting_out(tiny_dir, tmp_path):
    """Calls of other threads read cfg and the model's dims and attrs without the loading lock while a refused
    load puts them back: at no moment may a key they had be missing (they were emptied, then refilled: a
    serving thread got KeyError 'mix' / 'max_window')."""
    torch.manual_seed(4)
    BiLM(BiLMConfig(**{**TINY, "n_layers": 1})).save(tmp_path / "shallow")
    saved = _elmo_pipeline(tmp_path / "shallow")
    saved("Loaded .")
    refused = saved.get_pipe("elmo").to_bytes()  # two output layers
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(tiny_dir), "mix": [0.0, 0.0, 0.0]})  # three values
    nlp("Loaded .")
    elmo = nlp.get_pipe("elmo")
    elmo.cfg = _Watched(elmo.cfg)
    watched = [elmo.cfg]
    for node in elmo.model.walk():
        node._attrs, node._dims = _Watched(node._attrs), _Watched(node._dims)
        watched += [node._attrs, node._dims]
    with pytest.raises(ValueError, match="mix has 3 value"):
        elmo.from_bytes(refused, exclude=["vocab"])
    assert all(d.first <= d.keys() for d in watched)
    assert [d.gaps for d in watched] == [[] for _ in watched]


_HOLDERS = {
    # what another thread holds while this one forks: the lazy-loading lock, the char-CNN cache's and
    # the layer cache's locks, rows of the char-CNN cache reserved for words it is encoding
    "loading lock": component_module._loading_lock,
    "char-CNN cache lock": lambda elmo: get_runner(elmo.model).cache.lock,
    "layer cache lock": lambda elmo: get_runner(elmo.model).layer_cache.lock,
}


@pytest.mark.parametrize("held", [*_HOLDERS, "char-CNN cache rows"])
def test_fork_while_another_thread_holds_a_lock(tiny_dir, tmp_path, monkeypatch, held):
    """A child forked (nlp.pipe(n_process=N) under fork) while another thread holds one of the
    component's locks, or has reserved rows of the char-CNN cache: the child runs the pipeline and
    gives the parent's result. It inherited the lock locked, with no thread of its own to release it
    (or rows no thread of its own would write), and hung for ever."""
    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("no fork on this platform")
    text = "Alice went to the river bank ."
    nlp = _elmo_pipeline(tiny_dir)
    elmo = nlp.get_pipe("elmo")
    if held != "loading lock":  # else the child loads the weights at first use
        elmo.layer_cache_mb = 1
        nlp("Loaded before the fork .")
    holding, release = threading.Event(), threading.Event()
    if held in _HOLDERS:
        lock = _HOLDERS[held](elmo)

        def hold():
            with lock:
                holding.set()
                release.wait(120)
    else:
        encode = TokenCache._encode

        def encoding(bilm, words, markers, device):  # the holder reserved the rows of the text's words
            if threading.current_thread().name == "holder":
                holding.set()
                release.wait(120)
            return encode(bilm, words, markers, device)

        monkeypatch.setattr(TokenCache, "_encode", staticmethod(encoding))

        def hold():
            nlp(text)

    def child():
        numpy.save(tmp_path / "child.npy", nlp(text)._.elmo)

    holder = threading.Thread(target=hold, name="holder")
    holder.start()
    try:
        assert holding.wait(60)
        process = multiprocessing.get_context("fork").Process(target=child)
        process.start()
        process.join(120)  # the tiny model runs in well under a second: only a hung child takes this long
        hung = process.is_alive()
        if hung:
            process.kill()
            process.join()
    finally:
        release.set()
        holder.join()
    assert not hung, f"the forked child hung on the {held} another thread held"
    assert process.exitcode == 0
    numpy.testing.assert_allclose(numpy.load(tmp_path / "child.npy"), nlp(text)._.elmo, rtol=1e-6, atol=1e-6)


def test_a_pipeline_saved_before_the_mark_refuses_another_width_after_from_disk(tiny_dir, tmp_path):
    """A listener carries only what releases before the check saved with it (its initialize's "warming_up",
    no "built_upon"), loaded into a pipeline whose elmo had weights already, so that elmo sized it itself:
    weights of another width were accepted and the next call failed in blis ('Shape mismatch')."""
    load = _other_width_loads(tmp_path)["load_weights"]
    trained = _task_pipeline(tiny_dir, "ner")
    listener = next(n for n in trained.get_pipe("ner").model.walk() if isinstance(n, ElmoListener))
    listener.attrs.pop("built_upon", None)  # as saved before the check
    trained.to_disk(tmp_path / "pipeline")
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(tiny_dir)})
    nlp("Loaded first .")
    nlp.add_pipe("ner", config={"model": _TASKS["ner"]})
    nlp.from_disk(tmp_path / "pipeline")
    before = _task_results(nlp("Yesterday Alice went home ."))
    with pytest.raises(ValueError, match="'ner' was initialized on the layers of 'elmo'"):
        load(nlp.get_pipe("elmo"))
    after = _task_results(nlp("Yesterday Alice went home ."))
    numpy.testing.assert_array_equal(after[0], before[0])
    assert after[1:] == before[1:]


def test_a_sourced_listener_never_initialized_takes_another_width(tiny_dir, tmp_path):
    """Sizes that came with a sourced component no one initialized are no sign that anything was built on
    them: it takes weights of another width (it was refused, "was initialized", which it was not)."""
    load = _other_width_loads(tmp_path)["load_weights"]
    source = spacy.blank("en")
    source.add_pipe("elmo", config={"weights": str(tiny_dir)})
    source("Loaded first .")
    source.add_pipe("ner", config={"model": _TASKS["ner"]})
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(tiny_dir)})
    nlp("Loaded first .")
    nlp.add_pipe("ner", source=source)
    load(nlp.get_pipe("elmo"))
    nlp.initialize(lambda: [Example(nlp.make_doc(d.text), d) for d in make_docs(8)])
    assert nlp("Yesterday Alice went home .")._.elmo.shape == (3, 5, 12)


@pytest.mark.parametrize("how", ["from_bytes", "from_disk"])
@pytest.mark.parametrize("outcome", ["accepted", "refused"])
def test_sizes_stay_the_serving_weights_until_a_load_sets_new_ones(tiny_dir, tmp_path, monkeypatch, how, outcome):
    """While from_bytes / from_disk checked other weights (width 12; TINY's is 16), the model's sizes were unset
    (so that thinc could set the new ones): another thread's elmo.model.get_dim("nO"), which takes no lock, got
    thinc's "Cannot get dimension". Read by a thread of its own at the checking point, they are the serving
    weights' until the new weights are set, then the new ones; a refused load leaves the old ones."""
    torch.manual_seed(5)
    BiLM(BiLMConfig(**{**TINY, "projection_dim": 6})).save(tmp_path / "wide")
    saved = _elmo_pipeline(tmp_path / "wide")
    saved("Loaded .")
    saved.get_pipe("elmo").to_disk(tmp_path / "saved")
    load = {
        "from_bytes": lambda elmo, data=saved.get_pipe("elmo").to_bytes(): elmo.from_bytes(data),
        "from_disk": lambda elmo: elmo.from_disk(tmp_path / "saved"),
    }[how]
    wide = BiLM.load(tmp_path / "wide").config
    nlp = _elmo_pipeline(tiny_dir)
    nlp("Serving .")
    if outcome == "refused":  # a listener of width 16 reads it (its component runs in none of the calls below)
        nlp.add_pipe("ner", config={"model": {**NER, "tok2vec": {**LISTENER, "width": 16}}})
    elmo = nlp.get_pipe("elmo")

    def sizes():
        try:
            return elmo.model.get_dim("nO"), elmo.model.get_dim("nL")
        except ValueError as err:  # thinc's "Cannot get dimension"
            return str(err)

    old, seen = sizes(), []
    assert old == (16, 3)
    check = component_module.ElmoComponent._check_weights

    def checking(self, bilm, source):
        reader = threading.Thread(target=lambda: seen.append((sizes(), elmo.mix_weights().shape)))
        reader.start()
        reader.join()
        return check(self, bilm, source)

    monkeypatch.setattr(component_module.ElmoComponent, "_check_weights", checking)
    if outcome == "refused":
        with pytest.raises(ValueError, match="expects width 16"):
            load(elmo)
    else:
        load(elmo)
    # the sizes are the old ones; so is the mix of the weights serving (mix_weights() takes the biLM's count)
    assert seen and all(got == old for got, _ in seen), seen
    assert all(mix == (3,) for _, mix in seen), seen
    assert sizes() == (old if outcome == "refused" else (wide.output_dim, wide.n_output_layers))
    assert elmo(nlp.make_doc("Alice went home ."))._.elmo.shape == (3, 4, sizes()[0])
