"""Helpers of the tests that run code from several threads at once."""

import threading
from typing import Any, Callable, List, Sequence


class Meeting:
    """A wait for ``parties`` threads to be at the same point at once (call it there). A lock that the
    code under test holds at that point is passed through :meth:`watch` (the test puts what it returns
    in the lock's place): a thread found blocked on it counts as met, since it cannot come while the
    one inside waits, so the one inside goes on alone at once (and the test checks the same results
    either way). Without that lock all of them come and meet. ``timeout`` seconds is only a guard
    against a thread that never comes for another reason: then the one waiting goes on."""

    def __init__(self, parties: int = 2, timeout: float = 10.0) -> None:
        self.parties, self.timeout = parties, timeout
        self.changed = threading.Condition()
        self.arrived = 0
        self.blocked = 0

    def __call__(self) -> None:
        with self.changed:
            self.arrived += 1
            self.changed.notify_all()
            self.changed.wait_for(lambda: self.arrived + self.blocked >= self.parties, timeout=self.timeout)

    def watch(self, lock) -> "_Watched":
        return _Watched(lock, self)

    def _blocked(self, n: int) -> None:
        with self.changed:
            self.blocked += n
            self.changed.notify_all()


class _Watched:
    """``lock`` (a Lock or RLock), which tells its :class:`Meeting` while a thread waits for it."""

    def __init__(self, lock, meeting: Meeting) -> None:
        self.lock, self.meeting = lock, meeting

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if self.lock.acquire(False):
            return True
        if not blocking:
            return False
        self.meeting._blocked(1)
        try:
            return self.lock.acquire(True, timeout)
        finally:
            self.meeting._blocked(-1)

    def release(self) -> None:
        self.lock.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def meeting(parties: int = 2, timeout: float = 10.0) -> Meeting:
    """A :class:`Meeting` of ``parties`` threads."""
    return Meeting(parties, timeout)


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
