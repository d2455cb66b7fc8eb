"""A quick check of the capture module's `auto` context on a GPU (device
tool): the probe's verdict, then issue 42's reproduction (dropout last in a
non-reentrant checkpoint) under the module installed as the agent installs
it. One process; prints one JSON line.

    python3 tests/gpu/probe_check.py
"""

import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "assets", "capture"))
import vramscope_capture as vc  # noqa: E402

vc.install(socket=None, spool_dir=tempfile.mkdtemp(), threshold=0.99, interval_s=60)
import torch  # noqa: E402

torch.cuda.init()
out = {"python": sys.version.split()[0], "torch": torch.__version__, "probed": vc._probed, "history": dict(vc._history)}
stats = torch.cuda.memory_stats()
out["fresh"] = [stats.get("reserved_bytes.all.current"), stats.get("allocation.all.allocated"),
                stats.get("reserved_bytes.all.peak")]
lin = torch.nn.Linear(256, 256).cuda()
block = lambda x: torch.nn.functional.dropout(lin(x).relu(), 0.1, training=True)  # noqa: E731
x = torch.randn(64, 256, device="cuda", requires_grad=True)
try:
    torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False).sum().backward()
    out["repro"] = "ok"
except SystemError as e:
    out["repro"] = "SystemError: %s" % e
print(json.dumps(out))
