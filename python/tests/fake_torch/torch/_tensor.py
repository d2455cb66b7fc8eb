"""Tensors, autograd and grad modes, faked just enough for the capture
module's probe (`vramscope_capture._probe_free_stacks`): a one-element
backward on the CPU whose `backward` calls `max(dim=0)` under a
saved-tensor hook that raises.

$FAKE_TORCH_FREE_STACKS=lost makes the fake behave as PyTorch 2.11 on
Python < 3.13 does while frees are recorded with their stacks (history
context `all`): the hook's exception, raised inside backward, comes out as
a SystemError. Any other value (or none) keeps the exception.
"""

import contextlib
import os

from ._log import log

_grad_enabled = [True]
_hooks = []
_in_backward = [0]


class device:
    def __init__(self, type, index=None):
        self.type, self.index = type, index


class Tensor:
    def __init__(self, device="cpu", requires_grad=False, grad_fn=None):
        self.device = getattr(device, "type", device)
        self.requires_grad = requires_grad
        self.grad_fn = grad_fn

    def requires_grad_(self, flag=True):
        self.requires_grad = flag
        return self

    def clone(self):
        return Tensor(self.device, self.requires_grad)

    def sum(self):
        return Tensor(self.device, self.requires_grad, grad_fn=self.grad_fn)

    def max(self, dim=None):
        """(values, indices); the backward saves `indices`."""
        values = Tensor(self.device, self.requires_grad and _grad_enabled[-1])
        indices = Tensor(self.device)
        if values.requires_grad and _hooks:
            pack, _unpack = _hooks[-1]
            try:
                pack(indices)
            except Exception:
                from .cuda import memory

                if (_in_backward[0] and memory._context == "all" and self.device == "cuda"
                        and os.environ.get("FAKE_TORCH_FREE_STACKS") == "lost"):
                    raise SystemError("<built-in method max of Tensor object> returned NULL without setting an exception") from None
                raise
        return values, indices

    def backward(self):
        if not self.requires_grad or self.grad_fn is None:
            raise RuntimeError("element 0 of tensors does not require grad and does not have a grad_fn")
        function, ctx = self.grad_fn
        _in_backward[0] += 1
        try:
            function.backward(ctx, Tensor(self.device))
        finally:
            _in_backward[0] -= 1
        log("backward")


def ones(*size, device="cpu", requires_grad=False):
    return Tensor(device, requires_grad)


def zeros(*size, device="cpu", requires_grad=False):
    return Tensor(device, requires_grad)


@contextlib.contextmanager
def _grad_mode(enabled):
    _grad_enabled.append(enabled)
    try:
        yield
    finally:
        _grad_enabled.pop()


def enable_grad():
    return _grad_mode(True)


def no_grad():
    return _grad_mode(False)


def inference_mode(mode=True):
    return _grad_mode(not mode)


class Function:
    """`torch.autograd.Function`: `apply` runs `forward` and records the
    node that `backward()` runs."""

    @classmethod
    def apply(cls, *args):
        ctx = object()
        out = cls.forward(ctx, *args)
        if _grad_enabled[-1] and any(getattr(a, "requires_grad", False) for a in args):
            out.requires_grad = True
            out.grad_fn = (cls, ctx)
        return out


@contextlib.contextmanager
def saved_tensors_hooks(pack, unpack):
    _hooks.append((pack, unpack))
    try:
        yield
    finally:
        _hooks.pop()
