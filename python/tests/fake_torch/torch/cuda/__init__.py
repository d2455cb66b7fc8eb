"""`torch.cuda`, faked (see `torch/__init__.py`). One device; its figures
live in `_fake` and tests set them."""

import os
import types

from .._log import log
from . import memory  # noqa: F401

GiB = 1 << 30

# peak: the highest reserved bytes between two reads (a spike the test sets).
_fake = types.SimpleNamespace(reserved=0, allocated=0, total=80 * GiB, fraction=1.0, peak=0)


class OutOfMemoryError(RuntimeError):
    pass


def is_available():
    return os.environ.get("FAKE_TORCH_CUDA", "1") != "0"


def device_count():
    return 1 if is_available() else 0


def current_device():
    return 0


def synchronize():
    log("synchronize")


def empty_cache():
    log("empty_cache")


def _lazy_call(callable):
    callable()


def memory_reserved(device=None):
    return _fake.reserved


def memory_allocated(device=None):
    return _fake.allocated


def memory_stats(device=None):
    return {
        "reserved_bytes.all.current": _fake.reserved,
        "reserved_bytes.all.peak": max(_fake.peak, _fake.reserved),
        "allocated_bytes.all.current": _fake.allocated,
        "num_ooms": 0,
    }


def mem_get_info(device=None):
    return _fake.total - _fake.reserved, _fake.total


def get_per_process_memory_fraction(device=None):
    return _fake.fraction


def get_allocator_backend():
    return os.environ.get("FAKE_TORCH_BACKEND", "native")


def reset_peak_memory_stats(device=None):
    log("reset_peak")


def reset_accumulated_memory_stats(device=None):
    log("reset_accumulated")


def get_device_properties(device):
    return types.SimpleNamespace(
        name="Fake GPU", total_memory=_fake.total, pci_domain_id=0, pci_bus_id=1, pci_device_id=0
    )


def _fake_oom(requested):
    """What the caching allocator does when an allocation fails: tells the
    OOM observers, then raises."""
    from .. import _C

    for observer in list(_C.observers):
        observer(0, requested, _fake.allocated, _fake.total - _fake.reserved)
    raise OutOfMemoryError("CUDA out of memory. Tried to allocate %d bytes (fake)" % requested)
