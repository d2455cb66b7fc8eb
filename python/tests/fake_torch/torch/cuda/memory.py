"""`torch.cuda.memory`, faked (see `torch/__init__.py`)."""

import os
import pickle
import shutil

from .._log import log

_recording = False


def _record_memory_history(
    enabled="all", context="all", stacks="all", max_entries=1, global_record_annotations=False
):
    global _recording
    _recording = enabled is not None
    if _recording:
        extra = " annotations=global" if global_record_annotations else ""
        log("record enabled=%s max_entries=%s%s" % (enabled, max_entries, extra))
    else:
        log("record stop")


def _dump_snapshot(filename="dump_snapshot.pickle"):
    if not _recording:
        raise RuntimeError("fake torch: _dump_snapshot while history is not recorded")
    shutil.copyfile(os.environ["FAKE_TORCH_SNAPSHOT"], filename)
    log("dump %s" % os.path.basename(filename))


def _snapshot(device=None):
    with open(os.environ["FAKE_TORCH_SNAPSHOT"], "rb") as f:
        taken = pickle.load(f)
    log("snapshot")
    return taken
