"""TokenCache behaviour a mutation audit found untested (session 50): capacity 0 and below, pickling, a lookup
started over under its own encode, the matrix exactly full, and a biLM told apart by itself, not its weights."""

import copy
import pickle

import pytest
import torch

from spacy_elmo import BiLM, BiLMConfig
from spacy_elmo.bilm import token_cache as token_cache_module
from spacy_elmo.bilm.token_cache import TokenCache, run_rows
from tests.bilm.test_token_cache import TINY, _assert_cached_rows_equal_whole_bilm, _per_row, _tiny_bilm

ROWS = [["The", "bank"], ["the", "river", "."]]


@pytest.mark.parametrize("capacity", [0, -1])
def test_a_cache_of_no_capacity_is_no_cache(capacity):
    """``TokenCache(0)`` (``token_cache_size: 0``) and below: no room, so ``run_rows`` runs the whole biLM and the cache
    never holds a matrix; a negative capacity is taken as 0."""
    bilm, cache = _tiny_bilm(), TokenCache(capacity)
    assert cache.capacity == 0
    _assert_cached_rows_equal_whole_bilm(bilm, ROWS, cache)
    assert cache.matrix is None and cache.index == {} and cache.used == 3


@pytest.mark.parametrize("how", ["pickle", "copy", "deepcopy"])
def test_a_pickled_or_copied_cache_keeps_its_capacity_and_starts_empty(how):
    bilm, cache = _tiny_bilm(), TokenCache(37)
    with torch.no_grad():
        run_rows(bilm, ROWS, cache)
    assert cache.matrix is not None
    other = {"pickle": lambda c: pickle.loads(pickle.dumps(c)), "copy": copy.copy, "deepcopy": copy.deepcopy}[how](cache)
    assert other.capacity == 37 and other.matrix is None and other.index == {} and other.pending == {}
    assert other.lock is not cache.lock
    _assert_cached_rows_equal_whole_bilm(bilm, ROWS, other)
    assert other.matrix is not None and other.matrix.shape[0] == 37


def _clearing_encode(cache: TokenCache, times: int):
    """The cache's ``_encode`` that clears the cache (another thread's ``clear``, a weights change) during its first
    ``times`` calls; a call after that many more is an error (a lookup that never stops starting over)."""
    calls = []

    def encode(*args):
        calls.append(args)
        if len(calls) > times + 2:
            raise AssertionError("the cache kept starting over")
        out = TokenCache._encode(*args)
        if len(calls) <= times:
            cache.clear()
        return out

    cache._encode = encode
    return calls


def test_a_lookup_whose_rows_were_dropped_under_it_looks_its_words_up_again():
    """Cleared while it encoded: ``lookup`` reserves its words again and hands out indices (long) of the matrix as it is
    then, never another call's vectors."""
    bilm, cache = _tiny_bilm(), TokenCache(100)
    calls = _clearing_encode(cache, times=1)
    with torch.no_grad():
        idx = cache.lookup(bilm, ROWS, torch.device("cpu"))
    assert len(calls) == 2
    assert idx.dtype == torch.long and torch.equal(idx, _per_row(cache, ROWS))


def test_vectors_whose_rows_were_dropped_under_them_are_encoded_on_their_own():
    """Cleared while it encoded: ``vectors`` encodes the batch once more on its own (a cache no other thread can start
    over), not through the shared cache again, which another thread may keep starting over; the cache stays as that
    thread left it."""
    bilm, cache = _tiny_bilm(), TokenCache(100)
    calls = _clearing_encode(cache, times=10)
    with torch.no_grad():
        got = cache.vectors(bilm, ROWS, torch.device("cpu"))
        want = TokenCache(100).vectors(bilm, ROWS, torch.device("cpu"))
    assert len(calls) == 1
    torch.testing.assert_close(got, want)
    assert cache.matrix is None and cache.index == {}


def test_a_cache_exactly_full_keeps_its_rows():
    """Rows 0-2 and one per word: a cache of capacity 3 + n holds n words, and a batch of those words reads them
    without starting over; one more word starts it over."""
    bilm = _tiny_bilm()
    words = sorted({w for row in ROWS for w in row})
    cache = TokenCache(3 + len(words))
    with torch.no_grad():
        run_rows(bilm, ROWS, cache)
        generation = cache.generation
        assert cache.used == cache.capacity and set(cache.index) == set(words)
        run_rows(bilm, ROWS, cache)
        assert cache.generation == generation
        run_rows(bilm, [["new"]], cache)
    assert cache.generation == generation + 1 and set(cache.index) == {"new"}
    _assert_cached_rows_equal_whole_bilm(bilm, ROWS, cache)


def test_a_cache_filled_by_another_bilm_starts_over_whatever_its_weights_key(monkeypatch):
    """The owner check alone: a biLM freed and another built may get its weights' storage addresses and version
    counters (the key :func:`_weights_key` gives), so the cache tells the biLM that filled it by the object."""
    monkeypatch.setattr(token_cache_module, "_weights_key", lambda bilm: (0, ()))
    old = _tiny_bilm()
    torch.manual_seed(1)
    new = BiLM(BiLMConfig(**TINY), backend="reference").eval()
    cache = TokenCache(100)
    with torch.no_grad():
        run_rows(old, ROWS, cache)
    generation = cache.generation
    _assert_cached_rows_equal_whole_bilm(new, ROWS, cache)
    assert cache.generation == generation + 1
