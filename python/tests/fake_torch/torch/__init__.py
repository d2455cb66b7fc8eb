"""A stand-in for `torch` on machines without a GPU, for the Python
package's tests: an extended copy of tests/fixtures/fake_torch.

Calls are logged to $FAKE_TORCH_LOG (one line each, when set).
`cuda.memory._dump_snapshot` writes a real snapshot, a copy of
$FAKE_TORCH_SNAPSHOT (a corpus file), and `_snapshot()` returns that file's
dict. $FAKE_TORCH_CUDA=0 makes `cuda.is_available()` false. The memory
figures the callbacks read are set through `torch.cuda._fake`. Tensors and
autograd are faked for the capture module's probe only (`_tensor.py`, where
$FAKE_TORCH_FREE_STACKS=lost loses exceptions as PyTorch 2.11 on Python <
3.13 does).
"""

from . import _C, autograd, cuda  # noqa: F401
from ._tensor import Tensor, device, enable_grad, inference_mode, no_grad, ones, zeros  # noqa: F401

__version__ = "2.11.0+fake"
