"""TokenCache.lookup: the row indices of wrapped sentences (no spaCy)."""

import collections
import threading
import types

import pytest
import torch

from spacy_elmo import BiLM, BiLMConfig, batch_to_ids
from spacy_elmo.bilm.token_cache import TokenCache, run_rows
from tests.backends import BACKENDS
from tests.threads import meeting, run_in_threads

TINY = dict(projection_dim=8, cell_dim=16, filters=[[1, 4], [2, 4]])


def _tiny_bilm() -> BiLM:
    torch.manual_seed(0)
    return BiLM(BiLMConfig(**TINY), backend="reference").eval()


def _assert_layers_equal_whole_bilm(bilm, rows, layers):
    """``layers`` are the whole biLM's (no cache) of ``rows``."""
    with torch.no_grad():
        whole = run_rows(bilm, rows).activations
    for a, b in zip(layers, whole):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def _assert_cached_rows_equal_whole_bilm(bilm, rows, cache, whole_rows=None):
    """``run_rows`` through ``cache`` gives the whole biLM's layers of ``whole_rows`` (default: ``rows``)."""
    with torch.no_grad():
        cached = run_rows(bilm, rows, cache).activations
    _assert_layers_equal_whole_bilm(bilm, rows if whole_rows is None else whole_rows, cached)


def _per_row(cache: TokenCache, rows):
    """The index built row by row (how lookup built it before it wrote whole arrays)."""
    T = max((len(r) for r in rows), default=0)
    idx = torch.full((len(rows), T + 2), 2, dtype=torch.long)
    for b, row in enumerate(rows):
        idx[b, 0] = 0
        idx[b, 1 : len(row) + 1] = torch.tensor([cache.index[t] for t in row], dtype=torch.long)
        idx[b, len(row) + 1] = 1
    return idx


def test_lookup_index_layout():
    bilm = _tiny_bilm()
    cache = TokenCache(50)
    batches = [
        [["the", "bank", "of", "the", "river"], ["a"], [], ["bank", "bank", "x", "y", "z", "the", "."]],
        [["new", "words", "the"], ["river"]],
        [[]],
        [],
        [["only"]],
    ]
    with torch.no_grad():
        for rows in batches:
            idx = cache.lookup(bilm, rows, torch.device("cpu"))
            assert idx.dtype == torch.long and torch.equal(idx, _per_row(cache, rows))
            for b, row in enumerate(rows):  # <S>, the tokens, </S>, padding
                assert idx[b, 0] == 0 and idx[b, len(row) + 1] == 1 and (idx[b, len(row) + 2 :] == 2).all()
        # a full cache starts over: the index is rebuilt for this batch only
        rows = [[f"w{i}" for i in range(30)], [f"v{i}" for i in range(20)]]
        idx = cache.lookup(bilm, rows, torch.device("cpu"))
        assert len(cache.index) == 50 and torch.equal(idx, _per_row(cache, rows))


def test_cached_rows_equal_whole_bilm():
    rows = [["The", "bank", "of", "the", "river", "."], ["It", "rose"], ["the"]]
    _assert_cached_rows_equal_whole_bilm(_tiny_bilm(), rows, TokenCache(100))


def test_padded_positions_read_the_zero_row():
    """Row 2 of the matrix is the padding every position past a row's ``</S>`` reads (:meth:`TokenCache.lookup`):
    zero, never a word's vector, in a fresh matrix, one words were added to, and one started over when full. The
    first word written over it went unseen: the biLM reads no padded position, so its layers stayed right."""
    bilm, cache = _tiny_bilm(), TokenCache(20)
    batches = [  # the rows, the matrix rows used after them (3 + the words)
        ([["a", "b", "c", "d"], ["e"], []], 8),  # a fresh matrix
        ([["f", "g"], ["a", "h", "i", "j", "k"]], 14),  # words added to it
        ([[f"w{i}" for i in range(9)], ["x"]], 13),  # 10 words, 6 rows left: started over
    ]
    with torch.no_grad():
        for rows, used in batches:
            vectors = cache.vectors(bilm, rows, torch.device("cpu"))  # (B, T + 2, P)
            assert torch.all(cache.matrix[2] == 0) and cache.used == used
            T = max(len(row) for row in rows)
            ids = batch_to_ids(rows)
            mask = (ids > 0).any(-1)
            tokens = bilm.encode_tokens(ids, mask)  # (B, T, P), the whole biLM's token vectors
            for b, row in enumerate(rows):
                n = len(row)
                torch.testing.assert_close(vectors[b, 1 : n + 1], tokens[b, :n], atol=1e-6, rtol=1e-5)
                assert vectors.shape[1] == T + 2 and torch.all(vectors[b, n + 2 :] == 0), (rows, b)


def test_cached_rows_hand_contextualize_host_lengths_whatever_the_weights_device():
    """The lengths were made on the weights' device: on a GPU a blocking copy there, and contextualize's copy
    back to check them, two host syncs a batch. They are made on the host, which contextualize takes. The biLM is
    reported on the meta device here (a stand-in for a GPU on a machine without one) and runs on the CPU."""
    bilm, cache = _tiny_bilm(), TokenCache(100)
    rows = [["The", "bank", "of", "the", "river", "."], ["It", "rose"], ["the"]]
    seen = []

    class Elsewhere:  # the CPU biLM, its weights reported on another device
        config = bilm.config
        token_encoder = types.SimpleNamespace(char_embedding=types.SimpleNamespace(device=torch.device("meta")))

        @staticmethod
        def contextualize(x, lengths):
            seen.append(lengths.device)
            return bilm.contextualize(x, lengths)

    on_cpu = types.SimpleNamespace(capacity=cache.capacity,
                                   vectors=lambda _, rows, device: cache.vectors(bilm, rows, torch.device("cpu")))
    with torch.no_grad():
        layers = run_rows(Elsewhere(), rows, on_cpu).activations
    assert seen == [torch.device("cpu")]
    _assert_layers_equal_whole_bilm(bilm, rows, layers)


def test_a_device_not_the_bilms_is_refused_and_the_cache_kept():
    """The matrix lives with the char encoder's weights: a lookup for another device cannot be served from it
    (it failed deep in the char CNN or the gather). Refused with both devices named, the cache as it was."""
    bilm, cache = _tiny_bilm(), TokenCache(100)
    rows = [["The", "bank"], ["river"]]
    with torch.no_grad():
        idx = cache.lookup(bilm, rows, "cpu")  # a device's name does as well as the device
        for same in ("cpu:0", torch.device("cpu", 0)):  # tensor.to("cpu:0") lands on cpu
            assert torch.equal(cache.lookup(bilm, rows, same), idx)
        generation, index = cache.generation, dict(cache.index)
        for lookup in (cache.lookup, cache.vectors):
            with pytest.raises(ValueError, match=r"device meta is not the biLM's \(cpu\).*bilm\.to\(device\)"):
                lookup(bilm, rows, torch.device("meta"))
        # a GPU's index: refused as another device, not with torch's "Cannot access accelerator device"
        with pytest.raises(ValueError, match=r"device (0|cuda:0) is not the biLM's \(cpu\)"):
            cache.vectors(bilm, rows, 0)
        with pytest.raises(ValueError, match=r"device 1180591620717411303424 is not the biLM's"):  # torch's overflow
            cache.vectors(bilm, rows, 2**70)
        assert cache.generation == generation and cache.index == index
        assert torch.equal(cache.lookup(bilm, rows, torch.device("cpu")), idx)


def test_the_device_is_resolved_anew_for_every_lookup():
    """_home tells the weights' own device (and a CPU one) without allocating a tensor: nothing is remembered
    between lookups, so a biLM moved with .to() is compared where it is now, the old device refused."""
    from spacy_elmo.bilm.token_cache import _home

    bilm = _tiny_bilm()
    for device in (torch.device("cpu"), "cpu", "cpu:0", torch.device("cpu", 0)):
        assert _home(bilm, device) == torch.device("cpu")
    bilm.to("meta")
    for device in (torch.device("cpu"), "cpu", "cpu:0"):
        with pytest.raises(ValueError, match=r"device cpu is not the biLM's \(meta\)"):
            _home(bilm, device)
    assert _home(bilm, torch.device("meta")) == torch.device("meta")
    bilm.to_empty(device="cpu")  # back (a meta tensor has no data to copy)
    assert _home(bilm, torch.device("cpu")) == torch.device("cpu")
    with pytest.raises(ValueError, match=r"device meta is not the biLM's \(cpu\)"):
        _home(bilm, "meta")


def test_rows_are_taken_as_batch_to_ids_takes_sentences():
    """With a cache, a string row ran as its characters and a generator row as an empty row
    (lookup read it three times); batch_to_ids, the path without a cache, refuses the first."""
    bilm = _tiny_bilm()
    with torch.no_grad():
        for cache in (None, TokenCache(100)):
            with pytest.raises(TypeError, match=r"sentence 0 is a str. Tokenize first"):
                run_rows(bilm, ["The bank"], cache)
    _assert_cached_rows_equal_whole_bilm(bilm, [iter(["The", "bank"]), ("a",)], TokenCache(100),
                                         whole_rows=[["The", "bank"], ["a"]])


def _batches():
    """The batch forms every entry point takes, each with its rows as lists (fresh: generators are read once)."""
    import numpy as np

    from tests.test_chars import OrderedSentenceSet

    def gen(words):
        yield from words

    return {
        "list": [["a", "b"], ["c"]],
        "tuple": (("a", "b"), ("c",)),
        "numpy rows": [np.array(["a", "b"]), np.array(["c"])],
        "numpy 2-D": np.array([["a", "b"], ["c", "d"]]),
        "generator rows": [gen(["a", "b"]), iter(["c"])],
        "generator batch": (r for r in [["a", "b"], ["c"]]),
        "dict values": {1: ["a", "b"], 2: ["c"]}.values(),
        "dict keys": {("a", "b"): 1, ("c",): 2}.keys(),
        "ordered set": OrderedSentenceSet([("a", "b"), ("c",)]),
        "numpy.str_ tokens": [[np.str_("a"), "b"], [np.str_("c")]],
    }


_AS_LISTS = {"numpy 2-D": [["a", "b"], ["c", "d"]]}


def test_every_entry_point_takes_the_batches_batch_to_ids_takes_and_refuses_a_set():
    """A set or frozenset batch was refused by batch_to_ids alone: run_rows (with and without a cache),
    TokenCache.lookup and .vectors ran its rows in hash order. A dict is refused as by batch_to_ids (its keys were
    the sentences), saying how to pass its values or keys."""
    from tests.test_chars import DICT_BATCH

    bilm = _tiny_bilm()
    dev = torch.device("cpu")
    with torch.no_grad():
        for name in _batches():
            rows = _AS_LISTS.get(name, [["a", "b"], ["c"]])
            want = run_rows(bilm, rows).activations
            cache = TokenCache(100)
            for got in (run_rows(bilm, _batches()[name]).activations,
                        run_rows(bilm, _batches()[name], cache).activations):
                for a, b in zip(got, want):
                    torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5, msg=name)
            assert torch.equal(cache.lookup(bilm, _batches()[name], dev), cache.lookup(bilm, rows, dev)), name
            assert torch.equal(cache.vectors(bilm, _batches()[name], dev), cache.vectors(bilm, rows, dev)), name
        for call in (lambda: run_rows(bilm, {1: ["a"]}), lambda: run_rows(bilm, {1: ["a"]}, TokenCache(100)),
                     lambda: TokenCache(100).lookup(bilm, {1: ["a"]}, dev),
                     lambda: TokenCache(100).vectors(bilm, {1: ["a"]}, dev)):
            with pytest.raises(TypeError, match=DICT_BATCH):  # its values or its keys: the error says how to pass them
                call()
        for batch in ({("a", "b"), ("c",)}, frozenset([("a", "b")])):
            for call in (lambda: run_rows(bilm, batch), lambda: run_rows(bilm, batch, TokenCache(100)),
                         lambda: TokenCache(100).lookup(bilm, batch, dev),
                         lambda: TokenCache(100).vectors(bilm, batch, dev)):
                with pytest.raises(TypeError, match=r"^Expected a list of sentences in order, but got an unordered "
                                                    rf"set \(type {type(batch).__name__}\)"):
                    call()


@pytest.mark.parametrize("bad,type_name", [(3, "an int"), (["d"], "a list"), (None, "a NoneType")])
def test_a_token_that_is_no_str_is_named_where_it_is_and_the_cache_kept(bad, type_name):
    """Through the cache, the words not yet cached were checked alone (batch_to_ids of them as one row): a bad token
    in sentence 1 was "Token 1 of sentence 0", a list token a bare "unhashable type: 'list'", and the failed encode
    dropped the cache for every thread. Checked where the rows are taken, as without a cache, nothing reserved."""
    bilm, cache = _tiny_bilm(), TokenCache(100)
    with torch.no_grad():
        run_rows(bilm, [["a", "b"]], cache)
        generation, index, used = cache.generation, dict(cache.index), cache.used
        for grad in (True, False):  # without the cache (a gradient wanted), with it
            with torch.set_grad_enabled(grad), pytest.raises(
                    TypeError, match=rf"^Token 1 of sentence 1 is {type_name}, not a str\."):
                run_rows(bilm, [["a", "b"], ["c", bad]], cache)
        for lookup in (cache.lookup, cache.vectors):
            with pytest.raises(TypeError, match=rf"^Token 1 of sentence 1 is {type_name}, not a str\."):
                lookup(bilm, [["a", "b"], ["c", bad]], torch.device("cpu"))
        assert (cache.generation, cache.index, cache.used, cache.pending) == (generation, index, used, {})
    _assert_cached_rows_equal_whole_bilm(bilm, [["a", "c"], ["b"]], cache)


def test_a_non_str_equal_to_a_cached_str_is_refused_and_the_cache_kept():
    """A UserString equals the str of its text and has its hash. Only the words missing from the cache were checked:
    one equal to a word cached, or to one before it in the batch, found that word's row and was taken (batch_to_ids
    and run_rows without a cache refuse it). And with the weights changed since (a stale index), the words missing
    then were left to _encode's batch_to_ids of them as one row: "Token 3 of sentence 0" for token 1 of sentence 1,
    and the cache dropped. Every token is checked before anything is reserved."""
    U = collections.UserString
    bilm, cpu = _tiny_bilm(), torch.device("cpu")
    with torch.no_grad():
        with pytest.raises(TypeError, match=r"^Token 1 of sentence 0 is a UserString, not a str\."):
            TokenCache(50).lookup(bilm, [["w", U("w")]], cpu)
        cache = TokenCache(50)
        cache.lookup(bilm, [["word"]], cpu)
        for lookup in (cache.lookup, cache.vectors):
            with pytest.raises(TypeError, match=r"^Token 0 of sentence 1 is a UserString, not a str\."):
                lookup(bilm, [["a"], [U("word")]], cpu)
        bilm.token_encoder.char_embedding.add_(0.0)  # the weights changed: the index is stale
        generation, index, used = cache.generation, dict(cache.index), cache.used
        with pytest.raises(TypeError, match=r"^Token 1 of sentence 1 is a UserString, not a str\."):
            cache.lookup(bilm, [["b", "c"], ["d", U("word")]], cpu)
        assert (cache.generation, cache.index, cache.used, cache.pending) == (generation, index, used, {})


def test_a_cache_built_under_inference_mode_is_used_outside_it():
    """'Inplace update to inference tensor outside InferenceMode' at the first new token."""
    bilm = _tiny_bilm()
    cache = TokenCache(100)
    with torch.inference_mode():
        run_rows(bilm, [["The", "bank"]], cache)
    _assert_cached_rows_equal_whole_bilm(bilm, [["The", "river"], ["bank"]], cache)


def test_threads_encoding_new_tokens_at_once():
    """Two threads each meeting new tokens: both took the rows after the index as theirs and wrote
    their vectors there, so the index gave one thread's tokens the other's vectors from then on
    (and a thread that started the matrix over under another's read crashed or read zeros)."""
    bilm = _tiny_bilm()
    cache = TokenCache(100)
    with torch.no_grad():
        run_rows(bilm, [["The"]], cache)  # the matrix exists: each thread below only adds rows
    meet, encode = meeting(), bilm.encode_tokens

    def encode_together(*args):
        meet()  # both threads inside lookup, each with the rows it chose
        return encode(*args)

    bilm.encode_tokens = encode_together
    rows = [[["bank", "river"]], [["money", "rates", "rose"]]]

    def cached(batch):
        with torch.no_grad():
            return run_rows(bilm, batch, cache).activations

    got = run_in_threads(cached, [(batch,) for batch in rows])
    bilm.encode_tokens = encode
    for batch, layers in zip(rows, got):  # what each thread got, and what the cache gives the same rows afterwards
        _assert_layers_equal_whole_bilm(bilm, batch, layers)
        _assert_cached_rows_equal_whole_bilm(bilm, batch, cache)


class _HeldEncode:
    """``bilm.encode_tokens`` whose next call, once armed, encodes and then waits for :attr:`release`
    (run in a thread of its own: :meth:`start`), so that the test acts while a char-CNN run is going on."""

    def __init__(self, bilm, cache: TokenCache, rows, fail: bool = False):
        self.bilm, self.encode, self.fail = bilm, bilm.encode_tokens, fail
        self.started, self.release, self.released = threading.Event(), threading.Event(), []
        self.armed = True
        bilm.encode_tokens = self._encode
        self.result = []
        self.thread = threading.Thread(target=self._run, args=(cache, rows))

    def _encode(self, *args):
        out = self.encode(*args)
        if self.armed and threading.current_thread() is self.thread:
            self.armed = False
            self.started.set()
            self.released.append(self.release.wait(timeout=10))  # False: no one released it, it gave up
            if self.fail:
                raise RuntimeError("out of memory")
        return out

    def _run(self, cache, rows):
        with torch.no_grad():
            try:
                self.result.append(run_rows(self.bilm, rows, cache).activations)
            except RuntimeError as err:
                self.result.append(err)

    def start(self):
        self.thread.start()
        assert self.started.wait(timeout=10)

    def finish(self):
        self.release.set()
        self.thread.join()
        self.bilm.encode_tokens = self.encode
        return self.released == [True], self.result[0]


def test_cached_words_are_read_while_another_thread_encodes():
    """The lock was held through the char CNN: a thread whose words were all cached waited for another
    thread's encoding of new words (here it reads them while that encoding is held open)."""
    bilm = _tiny_bilm()
    cache = TokenCache(100)
    cached = [["The", "bank"], ["the", "river"]]
    with torch.no_grad():
        run_rows(bilm, cached, cache)
    held = _HeldEncode(bilm, cache, [["money", "rates", "rose", "bank"]])
    held.start()
    with torch.no_grad():
        layers = run_rows(bilm, cached, cache).activations  # before the other thread is released
    released, other = held.finish()
    assert released, "the cached-only lookup waited for the other thread's encoding"
    _assert_layers_equal_whole_bilm(bilm, cached, layers)
    _assert_layers_equal_whole_bilm(bilm, [["money", "rates", "rose", "bank"]], other)
    _assert_cached_rows_equal_whole_bilm(bilm, [["money", "bank"], ["rose", "The"]], cache)


class _WaitRecorded(threading.Condition):
    """A condition whose waits are announced on :attr:`waiting`."""

    def __init__(self, lock):
        super().__init__(lock)
        self.waiting = threading.Event()

    def wait(self, timeout=None):
        self.waiting.set()
        return super().wait(timeout)


@pytest.mark.parametrize("fail", [False, True], ids=["written", "encoding-failed"])
def test_a_word_another_thread_is_encoding_is_read_once_written(fail):
    """A thread that needs a word another thread reserved and is still encoding waits for its row
    (read earlier, the row would be zeros, or the word not yet indexed). When that encoding fails
    (out of memory), the rows it reserved are dropped and the waiting thread encodes the words itself."""
    bilm = _tiny_bilm()
    cache = TokenCache(100)
    with torch.no_grad():
        run_rows(bilm, [["The"]], cache)
    cache.written = _WaitRecorded(cache.lock)
    held = _HeldEncode(bilm, cache, [["bank", "river"]], fail=fail)
    held.start()
    got = []

    def needs_bank():
        with torch.no_grad():
            got.append(run_rows(bilm, [["The", "bank"]], cache).activations)

    waiter = threading.Thread(target=needs_bank, daemon=True)  # daemon: left waiting when the test fails
    waiter.start()
    assert cache.written.waiting.wait(timeout=10), "the thread needing 'bank' did not wait for it"
    assert not got
    released, other = held.finish()
    waiter.join(timeout=10)
    assert released and not waiter.is_alive(), "the thread needing 'bank' waits for rows no one writes"
    _assert_layers_equal_whole_bilm(bilm, [["The", "bank"]], got[0])
    if fail:
        assert isinstance(other, RuntimeError)
    else:
        _assert_layers_equal_whole_bilm(bilm, [["bank", "river"]], other)
    _assert_cached_rows_equal_whole_bilm(bilm, [["bank", "river", "The"]], cache)


def test_an_encoding_finished_after_a_clear_is_dropped():
    """Weights changed in place (thinc's optimizer step, ``use_params``) and the cache cleared while a
    thread encoded with the old weights: its vectors went into the cleared cache, stale from then on."""
    bilm = _tiny_bilm()
    cache = TokenCache(100)
    rows = [["The", "bank", "of", "the", "river"]]
    with torch.no_grad():
        run_rows(bilm, [["The"]], cache)
    held = _HeldEncode(bilm, cache, rows)
    held.start()  # encoded with the old weights, not yet written
    with torch.no_grad():
        for p in bilm.token_encoder.parameters():
            p.mul_(1.5)
    cache.clear()
    released, layers = held.finish()
    assert released
    _assert_layers_equal_whole_bilm(bilm, rows, layers)  # that thread's own result: the new weights
    _assert_cached_rows_equal_whole_bilm(bilm, rows, cache)  # and what the cache holds afterwards


def test_a_cache_filled_by_another_bilm_starts_over():
    """The component's weights replaced (set_bilm clears the caches) while a thread still ran the old
    biLM: that thread refilled the cache, and the new biLM read the old one's vectors from then on."""
    old = _tiny_bilm()
    torch.manual_seed(1)
    new = BiLM(BiLMConfig(**TINY), backend="reference").eval()
    cache = TokenCache(100)
    rows = [["The", "bank"], ["the", "river", "."]]
    with torch.no_grad():
        run_rows(old, rows, cache)  # after the clear, by the thread holding the old biLM
    _assert_cached_rows_equal_whole_bilm(new, rows, cache)
    _assert_cached_rows_equal_whole_bilm(old, rows, cache)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_cache_filled_under_autocast_keeps_the_weights_precision(backend):
    """Filled under CPU bfloat16 autocast, the float32 matrix held bfloat16-rounded vectors, which later
    float32 calls read (layer 0 off by 1.6e-3, 4e-3 relative, from the biLM's); and under autocast layer 0
    came back float32 with a cache, bfloat16 without. Now every layer has the same dtype with and without a
    cache, and a float64 model (autocast leaves it alone) float64; a float16 model under bfloat16 autocast
    is refused as without a cache, before it fills anything."""
    torch.manual_seed(0)
    bilm = BiLM(BiLMConfig(**TINY), backend=backend).eval()
    rows = [["The", "bank", "of", "the", "river"], ["It", "rose"]]
    cache = TokenCache(100)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        cached, whole = run_rows(bilm, rows, cache).activations, run_rows(bilm, rows).activations
    assert [a.dtype for a in cached] == [a.dtype for a in whole] == [torch.bfloat16] * 3
    for a, b in zip(cached, whole):
        torch.testing.assert_close(a.float(), b.float(), atol=0.05, rtol=0)
    _assert_cached_rows_equal_whole_bilm(bilm, rows, cache)  # read without autocast: the float32 vectors
    _assert_cached_rows_equal_whole_bilm(bilm, [["the", "bank", "rose"]], cache)
    double, cache = bilm.double(), TokenCache(100)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        cached, whole = run_rows(double, rows, cache).activations, run_rows(double, rows).activations
    assert [a.dtype for a in cached] == [a.dtype for a in whole] == [torch.float64] * 3
    half, cache = double.half(), TokenCache(100)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        for use in (None, cache):
            with pytest.raises(TypeError, match="weights are torch.float16 but cpu autocast is on in torch.bfloat16"):
                run_rows(half, rows, use)
    assert cache.matrix is None and not cache.index


def test_the_cache_starts_over_when_the_weights_change():
    """After an optimizer step the cache handed out the old weights' vectors (layer 0 off by 0.7) until
    cleared by hand; now a change of any char-encoder weight's version counter (an in-place edit:
    optimizer step, load_state_dict) or storage (``.data = ...``) starts it over. Calls between which
    nothing changed keep it (the same generation), also for a model built under inference mode (its
    weights keep no version counter)."""
    bilm = _tiny_bilm()
    rows = [["The", "bank"], ["the", "river", "."]]
    cache = TokenCache(100)
    with torch.no_grad():
        run_rows(bilm, rows, cache)
        generation = cache.generation
        run_rows(bilm, rows, cache)
        run_rows(bilm, [["bank", "rose"]], cache)
    assert cache.generation == generation and "rose" in cache.index  # nothing changed: kept
    optimizer = torch.optim.SGD(bilm.parameters(), lr=0.5)
    sum(layer.pow(2).sum() for layer in run_rows(bilm, rows).activations).backward()
    optimizer.step()
    _assert_cached_rows_equal_whole_bilm(bilm, rows, cache)
    torch.manual_seed(1)
    bilm.load_state_dict(BiLM(BiLMConfig(**TINY), backend="reference").state_dict())
    _assert_cached_rows_equal_whole_bilm(bilm, rows, cache)
    embedding = bilm.token_encoder.char_embedding
    embedding.data = embedding.data * 2  # a new storage, the version counter of the new tensor
    _assert_cached_rows_equal_whole_bilm(bilm, rows, cache)
    with torch.no_grad():
        embedding.mul_(-1)
    _assert_cached_rows_equal_whole_bilm(bilm, rows, cache)
    with torch.inference_mode():
        torch.manual_seed(0)
        frozen, cache = BiLM(BiLMConfig(**TINY), backend="reference").eval(), TokenCache(100)
        run_rows(frozen, rows, cache)
        generation = cache.generation
        run_rows(frozen, rows, cache)
        assert cache.generation == generation


@pytest.mark.parametrize("make", [lambda params: torch.optim.Adam(params, lr=0.5, fused=True),
                                  lambda params: torch.optim.SGD(params, lr=0.5, fused=True),
                                  lambda params: torch.optim.Adagrad(params, lr=0.5, initial_accumulator_value=1.0, fused=True)],
                         ids=["adam", "sgd", "adagrad"])
def test_the_cache_starts_over_after_a_fused_optimizer_step(make):
    """A fused optimizer (``fused=True``; pretrain's CPU Adagrad, as here) updates the weights in place without bumping
    their version counters: the version check alone handed out the old weights' vectors after its step."""
    bilm = _tiny_bilm()
    rows = [["The", "bank"], ["the", "river", "."]]
    cache = TokenCache(100)
    with torch.no_grad():
        run_rows(bilm, rows, cache)
    optimizer = make(list(bilm.parameters()))
    sum(layer.pow(2).sum() for layer in run_rows(bilm, rows).activations).backward()
    optimizer.step()
    _assert_cached_rows_equal_whole_bilm(bilm, rows, cache)


def test_a_cpu_cache_orders_no_cuda_streams(monkeypatch):
    """On CUDA each write and read of the matrix waits for its earlier writes (an event) and records its stream on
    it (record_stream): threads on streams of their own (tests/training/test_cuda_paths.py, on a GPU). On the CPU
    none of it is done: no event, no stream, whatever the threads."""
    def refused(*args, **kwargs):
        raise AssertionError("a CUDA stream or event on the CPU path")

    for name in ("current_stream", "Event", "Stream"):
        monkeypatch.setattr(torch.cuda, name, refused)
    monkeypatch.setattr(torch.Tensor, "record_stream", refused)
    bilm = _tiny_bilm()
    cache = TokenCache(100)
    rows = [["The", "bank"], ["the", "river", "."]]
    with torch.no_grad():
        results = run_in_threads(lambda: cache.vectors(bilm, rows, torch.device("cpu")), [(), ()])
    assert cache.written_event is None
    torch.testing.assert_close(results[0], results[1], rtol=0, atol=0)
    _assert_cached_rows_equal_whole_bilm(bilm, rows, cache)
