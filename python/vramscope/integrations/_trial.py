"""What the batch-size integrations share: a few training steps at one
size, from nothing on the GPU, and the optimizer configurations frameworks
return."""

import contextlib


def optimizers_of(configured):
    """The optimizers in what `configure_optimizers()` returns: one, a list
    or tuple of them (or of lists, as `([optimizers], [schedulers])`), or a
    dict (or list of dicts) with an "optimizer" key."""
    found = []

    def walk(item):
        if item is None:
            return
        if isinstance(item, dict):
            walk(item.get("optimizer"))
        elif isinstance(item, (list, tuple)):
            for x in item:
                walk(x)
        elif hasattr(item, "step") and hasattr(item, "zero_grad") and hasattr(item, "param_groups"):
            found.append(item)

    walk(configured)
    return found


def loss_of(output):
    """The loss in a training step's output: the tensor itself, or its
    "loss" entry (None when the step does its own backward)."""
    if isinstance(output, dict):
        return output.get("loss")
    return output


def let_go(optimizers):
    """Gradients and optimizer state dropped, so the size leaves nothing
    on the GPU (the model is moved off by the caller)."""
    for optimizer in optimizers:
        optimizer.zero_grad(set_to_none=True)
        state = getattr(optimizer, "state", None)
        if state is not None and hasattr(state, "clear"):
            state.clear()


def autocast(torch, dtype_name):
    """`torch.autocast("cuda", dtype)` for "bf16"/"fp16", else nothing."""
    if dtype_name in ("bf16", "fp16"):
        dtype = torch.bfloat16 if dtype_name == "bf16" else torch.float16
        return torch.autocast("cuda", dtype=dtype)
    return contextlib.nullcontext()


def device_index(device):
    """The CUDA index of a `torch.device` (None: the current device)."""
    index = getattr(device, "index", None)
    return index if isinstance(index, int) and not isinstance(index, bool) else None
