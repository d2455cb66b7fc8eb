from .. import _tensor
from . import graph, profiler  # noqa: F401

Function = _tensor.Function
