"""The elmo model's cache of output layers per sentence (the component's ``layer_cache_mb``, set by
``[initialize.components.elmo]``): the same layers as without it, the biLM run only on sentences not seen
before, bounded bytes, never stale. That it is off in a pipeline loaded for inference:
test_train_configs.py."""

import pickle
import warnings

import numpy
import pytest
import spacy
import torch
from spacy.training import Example
from thinc.api import ConfigValidationError, fix_random_seed

from spacy_elmo.pipeline import architectures
from spacy_elmo.pipeline.bilm_layer import get_bilm, get_runner, set_bilm
from spacy_elmo.pipeline.layer_cache import MB, LayerCache
from spacy_elmo.pipeline.loaders import load_weights

from tests.threads import meeting, run_in_threads

from .conftest import make_docs
from .test_listener import LISTENER, NER
from .test_train_configs import _cache_limit

SENTENCES = ["The bank raised its rates .", "We sat on the river bank .", "Money in the bank ."]
# repeated sentences inside a doc and across docs, a doc without boundaries cut into windows of 4
TEXTS = [" ".join(SENTENCES), " ".join(SENTENCES[::-1] * 2), SENTENCES[0], "x", ""]
LONG = "one two three four five six seven eight nine ten eleven"


MODEL = {"@architectures": "spacy_elmo.ElmoBiLM.v2", "max_window": 4}


def _pipeline(tiny_dir, layer_cache_mb, frozen=True, sentencizer=True, ner=False):
    """``(nlp, ner's examples, optimizer)``, initialized (as by spacy train) with
    ``[initialize.components.elmo] layer_cache_mb``."""
    nlp = spacy.blank("en")
    if sentencizer:
        nlp.add_pipe("sentencizer")
    nlp.add_pipe("elmo", config={"weights": str(tiny_dir), "model": MODEL, "frozen": frozen, "store_dtype": "float32"})
    nlp.config["initialize"]["components"]["elmo"] = {"layer_cache_mb": layer_cache_mb}
    examples = None
    if ner:
        nlp.add_pipe("ner", config={"model": {**NER, "tok2vec": LISTENER}})
        examples = [Example(nlp.make_doc(d.text), d) for d in make_docs(4)]
    optimizer = nlp.initialize(None if examples is None else lambda: examples)
    return nlp, examples, optimizer


def _nlp(tiny_dir, layer_cache_mb, **options):
    return _pipeline(tiny_dir, layer_cache_mb, **options)[0]


def _count_rows(monkeypatch, nlp):
    """The rows the runner (the biLM) gets, one list per call."""
    runner = get_runner(nlp.get_pipe("elmo").model)
    calls = []
    forward = runner.forward

    def counting(rows, **kwargs):
        calls.append([tuple(r) for r in rows])
        return forward(rows, **kwargs)

    monkeypatch.setattr(runner, "forward", counting)
    return calls


def _layers(nlp, texts):
    return [doc._.elmo for doc in nlp.pipe(texts)]


def test_cached_layers_are_the_uncached_ones(tiny_dir, monkeypatch):
    """Sentences (repeated within and across docs) and windows of a long doc: the same layers with and without
    the cache, at the first pass (a repeated sentence runs once) and at the second (all from the cache)."""
    plain, cached = _nlp(tiny_dir, 0), _nlp(tiny_dir, 1)
    no_sents = _nlp(tiny_dir, 1, sentencizer=False)
    calls, plain_calls = _count_rows(monkeypatch, cached), _count_rows(monkeypatch, plain)
    expected = _layers(plain, TEXTS) + _layers(plain, [LONG])
    for _ in range(2):
        got = _layers(cached, TEXTS) + _layers(no_sents, [LONG])
        for a, b in zip(got, expected):
            assert a.shape == b.shape
            numpy.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    first_pass = [row for call in calls for row in call]
    uncached = [row for call in plain_calls[:-1] for row in call]  # TEXTS, not LONG
    assert sorted(first_pass) == sorted(set(uncached)) and len(uncached) > len(first_pass)  # each distinct piece once


def test_second_pass_runs_no_piece(tiny_dir, monkeypatch):
    """In training (a frozen elmo's update, as every epoch) and at evaluation (nlp.pipe), the same docs
    again run the biLM on no piece."""
    nlp, examples, optimizer = _pipeline(tiny_dir, 1, ner=True)
    assert nlp.get_pipe("elmo").layer_cache_mb == 1
    calls = _count_rows(monkeypatch, nlp)
    docs = [d.text for d in make_docs(40)]
    for run in (lambda: nlp.update(examples, sgd=optimizer), lambda: _layers(nlp, docs)):
        run()
        assert calls
        calls.clear()
        run()
        assert calls == []


def test_cache_off_runs_every_piece(tiny_dir, monkeypatch):
    nlp = _nlp(tiny_dir, 0)
    calls = _count_rows(monkeypatch, nlp)
    _layers(nlp, TEXTS)
    n = len(calls)
    _layers(nlp, TEXTS)
    assert len(calls) == 2 * n and len(get_runner(nlp.get_pipe("elmo").model).layer_cache) == 0


def test_eviction_by_bytes_least_recently_used():
    cache = LayerCache(1)
    a, b, c = (numpy.zeros(MB // 4 // 3, dtype="float32") for _ in range(3))  # a third of a MB each
    cache.put("a", a)
    cache.put("b", b)
    cache.put("c", c)
    assert cache.nbytes == 3 * a.nbytes <= MB
    assert cache.get("a") is a  # now the most recent
    cache.put("d", numpy.zeros_like(a))
    assert set(cache.entries) == {"c", "a", "d"} and cache.nbytes <= MB
    cache.put("big", numpy.zeros(MB // 4 + 1, dtype="float32"))  # larger than the limit: not stored
    assert "big" not in cache.entries and cache.nbytes <= MB
    cache.put("e", numpy.zeros(MB // 4, dtype="float32"))  # the whole limit: everything else goes
    assert list(cache.entries) == ["e"] and cache.nbytes == MB


def test_layers_too_large_or_of_an_old_generation_leave_the_entries():
    """Layers over the limit, or made before the cache was emptied (a call whose biLM run overlapped a change of
    the weights), are not kept, and leave the entries there as they were (they emptied them, when the cache
    belonged to the biLM object that gave them: an old biLM's late call dropped the new one's entries)."""
    cache = LayerCache(1)
    old = cache.generation
    cache.clear()  # new weights: ElmoRunner.clear_caches
    now = cache.generation
    assert now != old
    cache.put("a", numpy.zeros(8, dtype="float32"), now)
    cache.put("big", numpy.zeros(MB // 4 + 1, dtype="float32"), now)
    cache.put("late", numpy.zeros(8, dtype="float32"), old)
    assert list(cache.entries) == ["a"] and cache.get("a", now) is not None


def test_a_call_never_reads_the_layers_of_weights_changed_since_it_began():
    """A call still running the weights from before a change (the cache emptied, then filled by calls of the
    new weights) reads none of the new entries; a call of the current generation reads them."""
    cache = LayerCache(1)
    old = cache.generation
    cache.put(("Hello", "world"), numpy.ones((3, 2, 4), dtype="float32"), old)
    cache.clear()
    layers = numpy.full((3, 2, 4), 7.0, dtype="float32")
    cache.put(("Hello", "world"), layers, cache.generation)
    assert cache.get(("Hello", "world"), old) is None
    assert cache.get(("Hello", "world"), cache.generation) is layers
    assert cache.get(("Hello", "world")) is layers  # no generation: the current one


def test_a_lower_limit_drops_the_least_recently_used():
    cache = LayerCache(2)
    for key in "abcd":
        cache.put(key, numpy.zeros(MB // 4 // 3, dtype="float32"))  # a third of a MB each
    cache.get("a")
    cache.set_limit(1)
    assert list(cache.entries) == ["c", "d", "a"] and cache.nbytes <= cache.limit == MB
    cache.set_limit(0)  # off: nothing kept
    assert len(cache) == 0 and cache.nbytes == 0 and cache.limit == 0



class _Layers:
    """An array's size, whose reading waits (:func:`tests.threads.meeting`) once ``put`` evicts it."""

    def __init__(self, meet) -> None:
        self.meet, self.reads = meet, 0

    @property
    def nbytes(self) -> int:
        self.reads += 1
        if self.reads == 2:  # the first reading is put's own; the second, the eviction's
            self.meet()
        return MB // 2


def test_threads_storing_the_same_sentence_at_once():
    """Two threads that ran the same new sentence store it at once: both found no entry and made room,
    then each counted its bytes, so the cache counted two entries for the one it held (and dropped
    more than the limit asks from then on; another interleaving read an entry evicted meanwhile, a
    KeyError in the middle of nlp(text))."""
    meet = meeting()
    cache = LayerCache(1)
    cache.lock = meet.watch(cache.lock)  # a thread blocked on it meets at once
    cache.put("old", _Layers(meet))
    cache.put("older", _Layers(meet))  # full: the first thread below evicts "old" (without a lock, each one)
    layers = numpy.zeros(MB // 8, dtype="float32")  # half a MB
    run_in_threads(cache.put, [("new", layers), ("new", layers)])
    assert list(cache.entries) == ["older", "new"] and cache.entries["new"] is layers  # one evicted: room enough
    assert cache.nbytes == sum(int(a.nbytes) for a in cache.entries.values()) == MB


def test_pipeline_stays_under_its_limit(tiny_dir):
    nlp = _nlp(tiny_dir, 1)
    cache = get_runner(nlp.get_pipe("elmo").model).layer_cache
    row_bytes = 3 * 16 * 4  # (L + 1) x 2P float32 per token
    cache.limit = 10 * row_bytes
    texts = [d.text for d in make_docs(20)]
    expected = _layers(_nlp(tiny_dir, 0), texts)
    for _ in range(2):
        for a, b in zip(_layers(nlp, texts), expected):
            numpy.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        assert 0 < cache.nbytes <= cache.limit
        assert cache.nbytes == sum(x.nbytes for x in cache.entries.values())


def test_fine_tuning_never_serves_stale_layers(tiny_dir):
    """frozen = false: after an update the layers are the new weights', as without the cache."""
    text = "Yesterday Alice went home and it was good ."
    outputs = []
    for mb in (0, 1):
        fix_random_seed(0)
        nlp, examples, opt = _pipeline(tiny_dir, mb, frozen=False, ner=True)
        before = nlp(text)._.elmo
        for _ in range(2):
            nlp.update(examples, sgd=opt)
        outputs.append((before, nlp(text)._.elmo))
        assert len(get_runner(nlp.get_pipe("elmo").model).layer_cache) == 0
    (before0, after0), (before1, after1) = outputs
    assert not numpy.allclose(after0, before0)
    numpy.testing.assert_allclose(before1, before0, rtol=1e-5, atol=1e-6)
    numpy.testing.assert_allclose(after1, after0, rtol=1e-4, atol=1e-5)


def test_cache_is_emptied_by_new_weights_and_not_saved(tiny_dir):
    nlp = _nlp(tiny_dir, 1)
    elmo = nlp.get_pipe("elmo")
    runner = get_runner(elmo.model)
    nlp(SENTENCES[0])
    n = len(runner.layer_cache)
    assert n > 0
    data = elmo.to_bytes()
    assert len(runner.layer_cache) == n  # saving keeps it ...
    elmo.from_bytes(data)
    assert len(runner.layer_cache) == 0  # ... loading empties it
    nlp(SENTENCES[0])
    back = pickle.loads(pickle.dumps(nlp))
    back_cache = get_runner(back.get_pipe("elmo").model).layer_cache
    assert len(back_cache) == 0 and back_cache.limit == MB  # not pickled, the setting kept
    assert len(get_runner(elmo.model.copy()).layer_cache) == 0
    set_bilm(elmo.model, get_bilm(elmo.model), "again")
    assert len(runner.layer_cache) == 0


@pytest.mark.filterwarnings("ignore:spacy-elmo. a sentence of:UserWarning")
def test_a_move_to_another_dtype_empties_the_caches(tiny_dir, monkeypatch):
    """thinc's ``model.to_cpu()`` / ``to_gpu(i)`` move the runner in place (``PyTorchShim.to_device`` ->
    ``runner.cpu()`` / ``cuda(0)``), as ``runner.to()`` and ``runner.double()`` do: the same biLM object, whose layer
    cache entries (arrays of the old device or dtype) were served after the move. Here the cast float32 -> float64
    (a GPU's move: test_a_move_off_the_gpu_empties_the_caches): both caches are emptied and every row runs again on
    the float64 weights, giving the float32 layers up to rounding. A move to where the weights are (thinc's
    ``to_cpu()`` on the CPU) keeps them."""
    nlp = _nlp(tiny_dir, 1)
    model = nlp.get_pipe("elmo").model
    runner = get_runner(model)
    expected = _layers(nlp, TEXTS)
    filled = len(runner.layer_cache), runner.cache.used
    assert filled[0] > 0 and filled[1] > 3
    model.to_cpu()
    assert (len(runner.layer_cache), runner.cache.used) == filled  # nothing moved: kept
    calls = _count_rows(monkeypatch, nlp)
    runner.double()
    assert (len(runner.layer_cache), runner.cache.used) == (0, 3)
    for a, b in zip(_layers(nlp, TEXTS), expected):
        numpy.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert sum(map(len, calls)) > 0  # run by the float64 biLM, none served from the float32 one's entries
    assert len(runner.layer_cache) > 0  # and kept afresh


@pytest.mark.filterwarnings("ignore:spacy-elmo. a sentence of:UserWarning")
def test_a_move_to_another_device_empties_the_caches(tiny_dir):
    """A device move (CPU -> meta, which needs no GPU) empties both caches, as the cast does."""
    nlp = _nlp(tiny_dir, 1)
    runner = get_runner(nlp.get_pipe("elmo").model)
    nlp(" ".join(SENTENCES))
    assert len(runner.layer_cache) > 0 and runner.cache.matrix is not None
    runner.to("meta")
    assert len(runner.layer_cache) == 0 and runner.cache.matrix is None


def test_a_call_running_during_a_move_keeps_none_of_its_layers(tiny_dir, monkeypatch):
    """Another thread moves the runner (here a cast to float64) between a call's biLM run and its putting the
    layers into the cache: the move emptied the cache, then the call kept its float32 layers there (the biLM the
    same object, moved in place), served to the next calls of the float64 weights (on a move off a GPU: cupy
    arrays, the TypeError of test_a_move_off_the_gpu_empties_the_caches). They are now refused: the next call
    runs its rows on the moved weights."""
    nlp = _nlp(tiny_dir, 1)
    runner = get_runner(nlp.get_pipe("elmo").model)
    cache = runner.layer_cache
    put, moved = cache.put, []

    def put_after_a_move(*args, **kwargs):
        if not moved:
            moved.append(runner.double())
            assert len(cache) == 0
        return put(*args, **kwargs)

    text = "We sat here ."  # one piece: one put
    monkeypatch.setattr(cache, "put", put_after_a_move)
    nlp(text)
    assert moved and len(cache) == 0
    monkeypatch.setattr(cache, "put", put)
    calls = _count_rows(monkeypatch, nlp)
    nlp(text)
    assert calls == [[tuple(text.split())]] and len(cache) == 1  # run by the float64 biLM, then kept


@pytest.mark.filterwarnings("ignore:spacy-elmo. a sentence of:UserWarning")
def test_set_bilm_empties_each_cache_once(tiny_dir):
    """set_bilm emptied the layer cache twice: under its lock with the swap, then again in clear_caches (two new
    generations for one change of weights). Each cache is emptied once now, and both are empty after it."""
    nlp = _nlp(tiny_dir, 1)
    model = nlp.get_pipe("elmo").model
    runner = get_runner(model)
    nlp("We sat here .")
    assert len(runner.layer_cache) == 1 and runner.cache.index
    layers, tokens = runner.layer_cache.generation, runner.cache.generation
    set_bilm(model, get_bilm(model), "again")
    assert runner.layer_cache.generation == layers + 1 and len(runner.layer_cache) == 0
    assert runner.cache.generation == tokens + 1 and not runner.cache.index


def _swap_with_a_call_in_it(nlp, swap, text):
    """The layers of ``nlp(text)`` (one piece) called by thread C while thread B runs ``swap()`` (set_bilm), B held at
    its emptying of the token cache until C has read the layer cache (a hit) or is about to keep its layers (read and
    made while B is held), or is blocked on the layer cache's lock (it cannot read while B swaps): a meeting
    (:func:`tests.threads.meeting`) forces the interleaving a thread switch can make."""
    import threading

    runner = get_runner(nlp.get_pipe("elmo").model)
    cache = runner.layer_cache
    meet = meeting(2)
    b_at_clear = threading.Event()
    real_get, real_put, real_clear, real_lock = cache.get, cache.put, runner.cache.clear, cache.lock
    out = {}

    def get(*args, **kwargs):
        hit = real_get(*args, **kwargs)
        if hit is not None and threading.current_thread().name == "C":
            meet()
        return hit

    def put(*args, **kwargs):
        if threading.current_thread().name == "C":
            meet()
        return real_put(*args, **kwargs)

    def clear():
        if threading.current_thread().name == "B":
            b_at_clear.set()
            meet()
        return real_clear()

    cache.get, cache.put, runner.cache.clear, cache.lock = get, put, clear, meet.watch(real_lock)
    try:
        b = threading.Thread(target=swap, name="B")
        c = threading.Thread(target=lambda: out.update(layers=nlp(text)._.elmo.copy()), name="C")
        b.start()
        assert b_at_clear.wait(10)
        c.start()
        b.join()
        c.join()
    finally:
        cache.get, cache.put, runner.cache.clear, cache.lock = real_get, real_put, real_clear, real_lock
    return out["layers"]


def _a_pipeline_and_other_weights(tiny_dir):
    """A one-thread pipeline, its model and runner, a copy of its biLM with every weight moved by 0.5, a text, and
    the text's layers from the weights before, kept in the layer cache."""
    import copy

    nlp = _nlp(tiny_dir, 1)
    model = nlp.get_pipe("elmo").model
    new = copy.deepcopy(get_bilm(model))
    with torch.no_grad():
        for p in new.parameters():
            p.add_(0.5)
    text = "We sat here ."
    return nlp, model, get_runner(model), new, text, nlp(text)._.elmo.copy()


def test_a_call_starting_while_the_weights_are_swapped_reads_no_layers_of_the_old_ones(tiny_dir):
    """set_bilm set the new biLM, then emptied the caches: a call starting in between read the old generation with
    the new biLM and was served the old biLM's layers kept there (diffrev2's repro). The biLM and the generation now
    change together (and the token cache with them: no window at all)."""
    nlp, model, runner, new, text, old_layers = _a_pipeline_and_other_weights(tiny_dir)
    during = _swap_with_a_call_in_it(nlp, lambda: set_bilm(model, new, "new"), text)
    assert runner.bilm is new
    runner.clear_caches()
    new_layers = nlp(text)._.elmo
    assert not numpy.allclose(new_layers, old_layers)
    numpy.testing.assert_allclose(during, new_layers, rtol=1e-5, atol=1e-6)


def test_a_call_during_set_bilm_keeps_no_layers_of_stale_token_vectors(tiny_dir):
    """set_bilm emptied the token cache after the layer cache's lock: a call starting in between read the new
    generation and the token cache's char vectors of the weights before (the same biLM, edited through ``.data``,
    which the token cache cannot see: set_bilm is how to say so), and kept layers made of them in the new generation,
    served to every later call (diffrev1's repro). The token cache is now emptied under the lock with the swap.
    Also kills the order "empty the layer cache, set the biLM, then empty the token cache" (its window too)."""
    nlp = _nlp(tiny_dir, 1)
    model = nlp.get_pipe("elmo").model
    runner, bilm = get_runner(model), get_bilm(model)
    text = "We sat here ."
    nlp(text)  # the token cache holds the char vectors of the weights now
    runner.layer_cache.clear()
    with torch.no_grad():
        for p in bilm.token_encoder.parameters():
            p.data.add_(0.5)
    during = _swap_with_a_call_in_it(nlp, lambda: set_bilm(model, bilm, "edited"), text)
    after = nlp(text)._.elmo.copy()  # served from the layer cache
    runner.clear_caches()
    fresh = nlp(text)._.elmo
    numpy.testing.assert_allclose(during, fresh, rtol=1e-5, atol=1e-6)
    numpy.testing.assert_allclose(after, fresh, rtol=1e-5, atol=1e-6)


def test_a_call_between_set_bilms_assignment_and_the_new_generation_waits_for_both(tiny_dir):
    """set_bilm assigns the biLM under the layer cache's lock with the emptying of both caches: assigned before it
    (then dropping and emptying under it), a call C starting in between ran the new biLM and read the old
    generation of the layer cache, a hit: the old biLM's layers (diffrev3's repro, a mutant the two tests above let
    live). B is paused at the assignment (torch's module registration hook) until C is done, or 3 s: C waits on the
    lock, so B's pause times out, and C gets the new biLM's layers."""
    import threading

    from torch.nn.modules.module import register_module_module_registration_hook

    nlp, model, runner, new, text, old = _a_pipeline_and_other_weights(tiny_dir)
    at_set, c_done, out = threading.Event(), threading.Event(), {}

    def hook(module, name, submodule):
        if name == "bilm" and threading.current_thread().name == "B":
            at_set.set()
            c_done.wait(3)  # set_bilm holds the lock here: C blocks, and this times out

    def call():
        out.update(layers=nlp(text)._.elmo.copy())
        c_done.set()

    handle = register_module_module_registration_hook(hook)
    try:
        b = threading.Thread(target=lambda: set_bilm(model, new, "new"), name="B")
        b.start()
        assert at_set.wait(10)
        c = threading.Thread(target=call, name="C")
        c.start()
        b.join()
        c.join()
    finally:
        handle.remove()
    runner.clear_caches()
    fresh = nlp(text)._.elmo
    assert not numpy.allclose(fresh, old)
    numpy.testing.assert_allclose(out["layers"], fresh, rtol=1e-5, atol=1e-6)


@pytest.mark.filterwarnings("ignore:spacy-elmo. a sentence of:UserWarning")
def test_a_move_that_fails_part_way_empties_the_caches(tiny_dir):
    """A move that raises after some weights moved (an out-of-memory error in ``.cuda()``; here a cast that fails
    on the third tensor) empties both caches: they were kept, and served the layers of the old placement to a
    biLM half moved."""
    nlp = _nlp(tiny_dir, 1)
    runner = get_runner(nlp.get_pipe("elmo").model)
    nlp(" ".join(SENTENCES))
    assert len(runner.layer_cache) > 0 and runner.cache.matrix is not None
    done = []

    def cast(tensor):
        if len(done) == 2:
            raise RuntimeError("out of memory")
        done.append(tensor)
        return tensor.double()

    with pytest.raises(RuntimeError, match="out of memory"):
        runner._apply(cast)
    assert {torch.float32, torch.float64} <= {dtype for _, dtype in runner._placement()}  # part way
    assert len(runner.layer_cache) == 0 and runner.cache.matrix is None


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_move_off_the_gpu_empties_the_caches(tiny_dir):
    """On a GPU (with cupy: spaCy's GPU ops). The entries kept on the GPU are cupy arrays: served after
    ``model.to_cpu()`` they went into numpy outputs (TypeError 'Implicit conversion to a NumPy array is not
    allowed'). Emptied, the layers are the CPU biLM's, the GPU's up to float32 rounding."""
    pytest.importorskip("cupy")
    from thinc.api import use_ops

    text = " ".join(SENTENCES)
    with use_ops("cupy"):
        nlp = _nlp(tiny_dir, 1)
        model = nlp.get_pipe("elmo").model
        runner = get_runner(model)
        on_gpu = model.ops.to_numpy(nlp(text)._.elmo)
        assert len(runner.layer_cache) > 0 and runner.bilm.token_encoder.char_embedding.is_cuda
    model.to_cpu()
    assert not runner.bilm.token_encoder.char_embedding.is_cuda and len(runner.layer_cache) == 0
    numpy.testing.assert_allclose(numpy.asarray(nlp(text)._.elmo), on_gpu, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("value", [-1, 1.5, "10", None, True])
def test_bad_layer_cache_mb(tiny_dir, nlp, value):
    """In [initialize.components.elmo] (spaCy's own validation would turn true and "10" into ints) and in Python."""
    message = rf"'elmo' component got layer_cache_mb = {value!r}; it must be an integer >= 0"
    with pytest.raises(ValueError, match=message):
        _nlp(tiny_dir, value)
    elmo = nlp.get_pipe("elmo")
    with pytest.raises(ValueError, match=message):
        elmo.layer_cache_mb = value
    assert elmo.layer_cache_mb == 0


def test_layer_cache_mb_in_a_v2_model_block_is_a_config_error(tiny_dir):
    """No model setting of ElmoBiLM.v2: a saved pipeline's config would turn it on in every loaded copy."""
    with pytest.raises(ConfigValidationError, match="layer_cache_mb"):
        spacy.blank("en").add_pipe("elmo", config={"weights": str(tiny_dir), "model": {**MODEL, "layer_cache_mb": 8}})


def _saved_with_v1(tiny_dir, path, layer_cache_mb):
    """A pipeline as saved before ElmoBiLM.v2: ElmoBiLM.v1 with layer_cache_mb in [components.elmo.model]
    (spaCy writes every default, so each one has it: 0, or 1024 with the shipped configs)."""
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("elmo", config={"weights": str(tiny_dir), "store_dtype": "float32"})  # the default model block
    nlp.initialize()
    nlp.to_disk(path)
    config = spacy.util.load_config(path / "config.cfg")
    model = config["components"]["elmo"]["model"]
    model.update({"@architectures": "spacy_elmo.ElmoBiLM.v1", "layer_cache_mb": layer_cache_mb})
    config.to_disk(path / "config.cfg")
    return path


def _loads_warned(load):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        nlp = load()
    ours = [w for w in caught if "ElmoBiLM.v1" in str(w.message)]
    assert all(w.filename == __file__ for w in ours), [w.filename for w in ours]  # the user's call, not spaCy's
    return nlp, [str(w.message) for w in ours]


def test_pipeline_saved_with_v1_and_a_layer_cache_loads_with_it(tiny_dir, tmp_path, monkeypatch):
    """spacy.load and load_model_from_config of a pipeline whose model block is ElmoBiLM.v1 with
    layer_cache_mb = 1024 (spaCy refused it: "unexpected argument"): the 1024 MB cache of the day it was
    saved, used at inference, and one warning per process that says how to switch it off."""
    monkeypatch.setattr(architectures, "_V1_LAYER_CACHE_WARNED", False, raising=False)
    path = _saved_with_v1(tiny_dir, tmp_path / "v1", 1024)
    nlp, warned = _loads_warned(lambda: spacy.load(path))
    assert len(warned) == 1 and "1024 MB" in warned[0] and 'nlp.get_pipe("elmo").layer_cache_mb = 0' in warned[0]
    assert "ElmoBiLM.v2" in warned[0]
    elmo = nlp.get_pipe("elmo")
    assert elmo.layer_cache_mb == 1024 and _cache_limit(nlp) == 1024 * MB
    calls = _count_rows(monkeypatch, nlp)
    _layers(nlp, SENTENCES)
    assert calls
    calls.clear()
    _layers(nlp, SENTENCES)
    assert calls == []  # from the cache
    again, warned = _loads_warned(lambda: spacy.util.load_model_from_config(nlp.config))
    assert warned == [] and _cache_limit(again) == 1024 * MB  # once per process
    elmo.layer_cache_mb = 0  # the component's property and initialize still set it
    assert _cache_limit(nlp) == 0 and len(get_runner(elmo.model).layer_cache) == 0
    elmo.initialize(lambda: [], layer_cache_mb=8)
    assert elmo.layer_cache_mb == 8


def test_pipeline_saved_with_v1_and_no_layer_cache_loads_without_it(tiny_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(architectures, "_V1_LAYER_CACHE_WARNED", False, raising=False)
    path = _saved_with_v1(tiny_dir, tmp_path / "v1", 0)
    nlp, warned = _loads_warned(lambda: spacy.load(path))
    assert warned == [] and nlp.get_pipe("elmo").layer_cache_mb == 0
    calls = _count_rows(monkeypatch, nlp)
    _layers(nlp, SENTENCES)
    n = len(calls)
    _layers(nlp, SENTENCES)
    assert len(calls) == 2 * n


def test_bad_layer_cache_mb_in_a_v1_model_block(tiny_dir):
    """The component's own check (spaCy's validation takes only ints there)."""
    model = {**MODEL, "@architectures": "spacy_elmo.ElmoBiLM.v1", "layer_cache_mb": -1}
    with pytest.raises(ValueError, match=r"'elmo' component got layer_cache_mb = -1; it must be an integer >= 0"):
        spacy.blank("en").add_pipe("elmo", config={"weights": str(tiny_dir), "model": model})


def test_initialize_sets_the_limit_once_weights_are_loaded(tiny_dir, tmp_path):
    """initialize(layer_cache_mb=...) sets the limit after its weights are loaded: a loader that fails leaves
    the cache (limit and entries) as it was (the limit was set first: entries over it dropped), a limit
    that is no integer >= 0 is refused before any loading, and one that loads sets it."""
    nlp = _nlp(tiny_dir, 1)
    elmo = nlp.get_pipe("elmo")
    cache = get_runner(elmo.model).layer_cache
    _layers(nlp, TEXTS)
    entries = len(cache)
    loaded = []

    def loader(path):
        def load(backend):
            loaded.append(path)
            return load_weights(path, backend)

        return load

    with pytest.raises(FileNotFoundError):
        elmo.initialize(lambda: [], weights_loader=loader(tmp_path / "missing"), layer_cache_mb=0)
    assert elmo.layer_cache_mb == 1 and len(cache) == entries > 0
    with pytest.raises(ValueError, match="layer_cache_mb = -1"):
        elmo.initialize(lambda: [], weights_loader=loader(tiny_dir), layer_cache_mb=-1)
    assert loaded == [tmp_path / "missing"] and elmo.layer_cache_mb == 1 and len(cache) == entries
    elmo.initialize(lambda: [], weights_loader=loader(tiny_dir), layer_cache_mb=0)
    assert elmo.layer_cache_mb == 0 and len(cache) == 0
