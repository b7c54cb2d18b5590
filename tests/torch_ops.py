"""What torch ops a block of code dispatches (tests that a path stays off some ops)."""

from torch.utils._python_dispatch import TorchDispatchMode


class TorchOps(TorchDispatchMode):
    """``with TorchOps() as ops: ...``: ``ops.names``, the names of the aten ops dispatched inside the block
    (``"nonzero"``, ``"masked_scatter"``, ...), views and creation included."""

    def __init__(self):
        super().__init__()
        self.names = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.add(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))
