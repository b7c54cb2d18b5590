"""Helpers of the tests that run code from several threads at once."""

import threading
from typing import Any, Callable, List, Sequence


def meeting(parties: int = 2, timeout: float = 2.0) -> Callable[[], None]:
    """A wait for ``parties`` threads to be at the same point at once, which gives up after ``timeout``
    seconds: where a lock lets only one of them in, the one inside goes on alone (and the test
    checks the same results either way)."""
    barrier = threading.Barrier(parties, timeout=timeout)

    def meet() -> None:
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            pass

    return meet


def run_in_threads(target: Callable[..., Any], args: Sequence[tuple]) -> List[Any]:
    """``target(*a)`` for each ``a`` of ``args``, each in its own thread, all at once: their results in
    that order; the first exception raised in any of them is raised here."""
    results: List[Any] = [None] * len(args)
    errors: List[BaseException] = []

    def run(i: int) -> None:
        try:
            results[i] = target(*args[i])
        except BaseException as err:  # pragma: no cover - raised below
            errors.append(err)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(args))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results
