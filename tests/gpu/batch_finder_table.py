"""docs/python.md's table of batch-size finders, written from a run of
`tests/gpu/batch_finder_job.py all` (committed under tests/gpu/results/):

    python3 tests/gpu/batch_finder_table.py tests/gpu/results/batch-finders-h100-2026-12-08.json
    python3 tests/gpu/batch_finder_table.py --check docs/python.md tests/gpu/results/batch-finders-*.json

With several results files the newest (last in name order) gives the table.
The table stands between the lines `<!-- batch-finders: begin -->` and
`<!-- batch-finders: end -->`; `--check` exits 1 when it differs from what
the results give (the test suite runs it, so the docs cannot drift from
the results).
"""

import argparse
import json
import re
import sys

import doc_table

BEGIN = "<!-- batch-finders: begin -->"
END = "<!-- batch-finders: end -->"

#: Each finder's name in the table, in the table's order.
LABELS = {
    "vramscope": "`vramscope.largest_batch(step, sizes=(2, 4, 8))`",
    "vramscope_lightning": "`LargestBatchFinder` (Lightning)",
    "vramscope_hf": "`largest_batch_size(trainer)` (transformers)",
    "lightning": "Lightning `BatchSizeFinder(mode=\"binsearch\")`",
    "accelerate": "accelerate `find_executable_batch_size`, from 1024",
    "hf_auto": "transformers `auto_find_batch_size`, from 1024",
}


def trained(row):
    check = row.get("train_check")
    if not isinstance(check, dict) or "ok" not in check:
        return "not checked"
    if not check["ok"]:
        asked = re.search(r"Tried to allocate ([0-9.]+ [KMGT]iB)", check.get("error") or "")
        return "**runs out of memory**" + (" (asking for %s)" % asked.group(1) if asked else "")
    text = "trains"
    predicted = row.get("predicted_peak_bytes")
    if row["finder"] == "vramscope" and isinstance(predicted, int):
        reserved = check["max_memory_reserved"]
        text += "; reserved peak {:,} bytes, ".format(reserved)
        if reserved == predicted:
            text += "the predicted peak to the byte"
        else:
            text += "{:+.2f} % from the predicted {:,}".format(100.0 * (reserved - predicted) / predicted, predicted)
    return text


def table(results):
    facts = results["facts"]
    rows = {row["finder"]: row for row in results["finders"]}
    lines = [
        "| finder | size | time to find | OOMs on the way | its size, trained in a fresh process |",
        "|---|---|---|---|---|",
    ]
    for finder, label in LABELS.items():
        row = rows.get(finder)
        if row is None:
            continue
        # The Lightning finders' own time, without the Trainer's start.
        seconds = row.get("finder_wall_s", row.get("wall_s"))
        lines.append("| %s | %s | %s | %s | %s |" % (
            label, row.get("size", "none"), "%.1f s" % seconds if seconds is not None else "·",
            row.get("ooms", "·"), trained(row)))
    m = facts["model"]
    lines += [
        "",
        "%s, torch %s, Lightning %s, accelerate %s, transformers %s, %s. The model: a GPT of %d layers, d %d, "
        "%d heads, sequence %d, vocabulary %d, AdamW, bf16 autocast; %d steps a trial. \"Trains\" is %d steps "
        "without an OOM." % (
            facts["gpu"], facts["torch"], facts.get("lightning"), facts.get("accelerate"), facts.get("transformers"),
            facts["date"], m["layers"], m["d"], m["heads"], m["seq"], m["vocab"], facts["steps_per_trial"],
            facts["check_steps"]),
    ]
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--check", metavar="DOC", help="exit 1 when DOC's table is not the one the results give")
    parser.add_argument("results", nargs="+")
    args = parser.parse_args()
    newest = sorted(args.results)[-1]
    with open(newest) as f:
        text = table(json.load(f))
    if not args.check:
        sys.stdout.write(text)
        return 0
    return doc_table.check(args.check, BEGIN, END, text, "the batch finders' table",
                           "python3 tests/gpu/batch_finder_table.py %s" % newest)


if __name__ == "__main__":
    sys.exit(main())
