"""`torch.autograd.graph.saved_tensors_hooks`, faked (see `torch/_tensor.py`)."""

from .._tensor import saved_tensors_hooks  # noqa: F401
