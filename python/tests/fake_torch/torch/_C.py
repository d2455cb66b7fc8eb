"""`torch._C`, faked: cuBLAS workspaces and the OOM observers."""

from ._log import log

observers = []


def _cuda_clearCublasWorkspaces():
    log("clear_cublas")


def _cuda_attach_out_of_memory_observer(observer):
    observers.append(observer)
    log("attach_oom_observer")


def _cuda_emptyCache():
    log("empty_cache")
