"""The torch device a command asked for, with a clear error when it is not there."""

import torch

from .errors import Errors


def torch_device(name: str) -> torch.device:
    """``torch.device(name)``; RuntimeError naming the fix when CUDA is asked for and unavailable,
    or a GPU index that is not there (``cuda:99``: torch refuses it only when a tensor is moved)."""
    try:
        device = torch.device(name)
    except RuntimeError as err:
        raise RuntimeError(Errors.E_UNKNOWN_DEVICE.format(device=name)) from err
    if device.type not in ("cpu", "cuda", "mps"):
        raise RuntimeError(Errors.E_UNKNOWN_DEVICE.format(device=name))
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(Errors.E_DEVICE_UNAVAILABLE.format(device=name, reason="CUDA is not available"))
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        n = torch.cuda.device_count()
        raise RuntimeError(Errors.E_NO_SUCH_GPU.format(device=name, n_gpus=n, last=n - 1))
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise RuntimeError(Errors.E_DEVICE_UNAVAILABLE.format(device=name, reason="MPS (Apple GPU) is not available"))
    return device
