"""torchrun's store, which its agent holds and which outlives the job's processes: where a rank leaves word for the
others as it ends (the first rank a signal stopped, a rank that failed), its process group being of no use then."""

import os
import threading
from datetime import timedelta
from typing import Any, Callable, Optional, TypeVar

T = TypeVar("T")

#: Seconds a rank waits for torchrun's store to answer: a store whose host stopped answering (a node that hangs or
#: lost its network, the connection still open) blocks a call whatever ``set_timeout`` says.
STORE_WAIT_S = 2.0


def job_key(name: str) -> str:
    """The store's key ``name`` of this attempt of the job: an elastic restart (``TORCHELASTIC_RESTART_COUNT``) starts
    afresh in the same store."""
    return f"spacy_elmo/pretrain/{name}/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"


def ask_job_store(ask: Callable[[Any], T], wait: float = STORE_WAIT_S) -> Optional[T]:
    """``ask(store)`` on torchrun's store, waited for ``wait`` seconds at most; None without an answer: no such store
    (before the process group started, or ranks started otherwise, whose store rank 0 holds and takes along when it
    ends: asking it then logs a C++ stack trace), an error, or no answer in time."""
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return None
    try:
        import torch.distributed as dist  # loaded by the run already

        store = dist.distributed_c10d._get_default_store()  # ValueError before init_process_group
    except Exception:  # noqa: BLE001 - no process group yet
        return None
    answers = []

    def call() -> None:
        try:
            store.set_timeout(timedelta(seconds=wait))
            answers.append(ask(store))
        except Exception:  # noqa: BLE001 - torchrun's store unreachable
            pass

    # A daemon thread: one blocked on a store that never answers must not keep the process from exiting.
    asking = threading.Thread(target=call, name="spacy-elmo job store", daemon=True)
    asking.start()
    asking.join(wait)
    return answers[0] if answers else None


#: The key under which a rank that failed with its own error records its rank (:func:`record_failure`).
_FAILED = "failed"


def record_failure(rank: int) -> None:
    """Leave this rank's number in torchrun's store as it fails with an error of its own (not a lost peer's): the
    ranks that then lose it name it (:func:`failed_rank`). Nothing without that store."""
    ask_job_store(lambda store: store.set(job_key(_FAILED), str(rank)))


def failed_rank() -> Optional[int]:
    """The rank that recorded its failure in torchrun's store (:func:`record_failure`); None: none did, or no store."""
    key = job_key(_FAILED)
    return ask_job_store(lambda store: int(store.get(key)) if store.check([key]) else None)
