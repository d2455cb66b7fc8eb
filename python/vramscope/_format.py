"""Figures and stacks as text, the way the `vramscope` CLI writes them
(server/src/cli/check.rs `describe`, shared/src/analysis `stack_label`)."""

import os

_UNITS = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"]

#: Rule names in the JSON verdict, and the CLI option that set each.
RULE_OPTIONS = {
    "max_reserved_peak": "--max-reserved-peak",
    "max_allocated_peak": "--max-allocated-peak",
    "max_fragmentation": "--max-fragmentation",
    "max_growth_reserved_peak": "--max-growth (reserved peak)",
    "max_growth_requested_peak": "--max-growth (requested peak)",
}

_LIBRARY_PATHS = ("site-packages/", "dist-packages/", "/lib/python", "<frozen", "/torch/")


def format_bytes(count):
    """`2.71 GiB`, `236 MiB`, `512 B`: binary units, two decimals unless whole."""
    value = float(count)
    sign = "-" if value < 0 else ""
    value = abs(value)
    unit = 0
    while value >= 1024 and unit < len(_UNITS) - 1:
        value /= 1024
        unit += 1
    text = "%d" % value if value == int(value) else "%.2f" % value
    return "%s%s %s" % (sign, text, _UNITS[unit])


def _signed_bytes(delta):
    return ("+" if delta >= 0 else "-") + format_bytes(abs(delta))


def _is_python(frame):
    return frame.get("filename", "").endswith(".py")


def _is_user_code(frame):
    filename = frame.get("filename", "")
    return _is_python(frame) and not any(part in filename for part in _LIBRARY_PATHS)


def _is_noise(frame):
    return frame.get("filename", "").endswith("torch/nn/modules/module.py") and frame.get("name") in (
        "_call_impl",
        "_wrapped_call_impl",
    )


def stack_label(frames):
    """A one-line name for a stack (innermost frame first): its innermost
    readable frame and, when that is library code, the innermost frame of the
    program that led there: `linear.py:134 forward < /srv/jobs/train.py:96 run`."""
    frames = frames or []
    first_python = next((i for i, f in enumerate(frames) if _is_python(f)), 0)
    readable = [f for f in frames[first_python:] if not _is_noise(f)]
    if not readable:
        return "(no frames recorded)"

    def short(frame):
        filename = frame.get("filename", "")
        shown = filename if _is_user_code(frame) else os.path.basename(filename)
        return "%s:%s %s" % (shown, frame.get("line", 0), frame.get("name", "?"))

    first = readable[0]
    user = next((f for f in readable if _is_user_code(f)), None)
    if user is not None and not _is_user_code(first):
        return "%s < %s" % (short(first), short(user))
    return short(first)


def describe_rule(rule):
    """One line about one rule of a verdict: its figures against its limit."""
    window = " (within the trace window)" if rule.get("window_only") else ""
    device = rule.get("device")
    figure = format_bytes(rule.get("bytes", 0))
    name = rule.get("rule")
    if name in ("max_reserved_peak", "max_allocated_peak"):
        what = "reserved" if name == "max_reserved_peak" else "allocated"
        return "device %s: %s peak %s%s, limit %s" % (device, what, figure, window, format_bytes(rule.get("limit_bytes", 0)))
    if name == "max_fragmentation":
        return "device %s: %s cached but not in use at the end, %.1f%% of reserved, limit %s%%" % (
            device,
            figure,
            rule.get("pct") or 0.0,
            _number(rule.get("limit_pct")),
        )
    if name in ("max_growth_reserved_peak", "max_growth_requested_peak"):
        what = "reserved" if name == "max_growth_reserved_peak" else "requested"
        pct = rule.get("pct")
        growth = "from nothing" if pct is None else "%+.1f%%" % pct
        baseline = rule.get("baseline_bytes")
        return "device %s: %s peak %s against %s in the baseline%s, %s, limit +%s%%" % (
            device,
            what,
            figure,
            "-" if baseline is None else format_bytes(baseline),
            window,
            growth,
            _number(rule.get("limit_pct")),
        )
    return "device %s: %s" % (device, rule)


def _number(value):
    if value is None:
        return "?"
    return "%d" % value if float(value) == int(value) else "%g" % value


def describe_verdict(verdict, snapshot=None, top=None):
    """The verdict of `vramscope check --json` as text: the broken rules with
    their figures, then the stacks that grew most against the baseline."""
    rules = verdict.get("rules", [])
    broken = [r for r in rules if not r.get("passed", True)]
    name = snapshot or verdict.get("file") or "snapshot"
    lines = ["%s: memory budget broken, %d of %d %s" % (name, len(broken), len(rules), "rule" if len(rules) == 1 else "rules")]
    if verdict.get("baseline"):
        lines.append("baseline: %s" % verdict["baseline"])
    for rule in broken:
        option = RULE_OPTIONS.get(rule.get("rule"), rule.get("rule"))
        lines.append("  FAIL  %-30s %s" % (option, describe_rule(rule)))
    for device in verdict.get("grown", []):
        stacks = device.get("stacks") or []
        if top is not None:
            stacks = stacks[:top]
        if not stacks:
            continue
        lines.append(
            "stacks that grew most against the baseline (device %s vs baseline device %s; all stacks %s):"
            % (device.get("device"), device.get("baseline_device"), _signed_bytes(device.get("total_delta", 0)))
        )
        for stack in stacks:
            lines.append("  %12s  %s" % (_signed_bytes(stack.get("delta", 0)), stack_label(stack.get("frames"))))
    return "\n".join(lines)
