"""A table that a document keeps between two marker lines, written from GPU
results by a script beside this one (compat_table.py, batch_finder_table.py),
and the check that the document still holds what the results give."""

import sys


def check(doc, begin, end, text, what, command):
    """0 when `doc` holds `text` between the lines `begin` and `end`; else 1,
    saying on stderr that its `what` differs and that `command` writes it."""
    with open(doc) as f:
        whole = f.read()
    if begin not in whole or end not in whole:
        print("%s: no %s ... %s lines" % (doc, begin, end), file=sys.stderr)
        return 1
    inside = whole.split(begin, 1)[1].split(end, 1)[0].strip("\n") + "\n"
    if inside != text:
        print("%s: %s differs from the results; write it anew with:\n  %s" % (doc, what, command), file=sys.stderr)
        return 1
    return 0
