"""The README's compatibility table, written from the matrix's results
(`tests/gpu/compat_job.py`, committed under tests/gpu/results/):

    python3 tests/gpu/compat_table.py tests/gpu/results/compat-*.json            # prints the table
    python3 tests/gpu/compat_table.py --check README.md tests/gpu/results/compat-*.json

Several results files (the matrix run in parts) are merged, set-up by
set-up. The table stands in the README between the lines
`<!-- compat-table: begin -->` and `<!-- compat-table: end -->`; `--check`
exits 1 when it differs from what the results give (the test suite runs
it, so the README cannot drift from the results).
"""

import argparse
import json
import sys

import doc_table

BEGIN = "<!-- compat-table: begin -->"
END = "<!-- compat-table: end -->"

#: Column order and headings.
COLUMNS = [
    ("agent", "agent"),
    ("hf_callback", "transformers callback"),
    ("lightning_callback", "Lightning callback"),
    ("pytest", "pytest marker"),
    ("recorded_memory", "recorded_memory"),
]


def merged(paths):
    """(the first file's facts, the cells set-up by set-up, a later file's
    set-up replacing an earlier one's), with each later file's facts and
    the set-ups it gave under `facts["later_runs"]`."""
    facts, cells, later = None, {}, []
    for path in paths:
        with open(path) as f:
            results = json.load(f)
        if facts is None:
            facts = dict(results["facts"])
        else:
            later.append((results["facts"], [results["cells"][name]["what"] for name in results["cells"]]))
        cells.update(results["cells"])
    facts["later_runs"] = later
    return facts, cells


def cell_text(cell):
    if cell is None:
        return "·"
    if not cell["pass"]:
        why = []
        if not cell.get("finished"):
            why.append("did not finish (exit %s)" % cell.get("exit_code"))
        elif not cell.get("losses_identical"):
            why.append("losses differ")
        if cell.get("snapshot_ok") is False:
            why.append("snapshot: %s" % cell.get("snapshot"))
        return "**fails**: " + "; ".join(why)
    ratio = cell.get("step_time_ratio")
    text = "ok, %.2f×" % ratio if ratio is not None else "ok"
    if "cudaMallocAsync" in (cell.get("snapshot") or ""):
        text += ", no snapshot¹"
    return text


def table(facts, cells):
    lines = [
        "| set-up | %s |" % " | ".join(heading for _, heading in COLUMNS),
        "|---|" + "---|" * len(COLUMNS),
    ]
    for name, row in cells.items():
        lines.append("| %s | %s |" % (row["what"], " | ".join(cell_text(row["modes"].get(mode)) for mode, _ in COLUMNS)))
    lines += [
        "",
        "%s, torch %s, Python %s, transformers %s, Lightning %s, %s; %d steps a run. Each cell: the job finished, its "
        "per-step losses were bit-identical to the same seeded run without capture, and its snapshot's counters "
        "(`vramscope stats`) equalled `memory_stats()` at the same moment; the figure is the median step time with "
        "capture over without (steps after the first %d). · : the mode does not apply. ¹ cudaMallocAsync keeps no "
        "allocator history: the job is told so and runs uncaptured (the agent still streams telemetry)."
        % (facts["gpu"], facts["torch"], facts["python"], facts.get("transformers"), facts.get("lightning"),
           facts["date"], facts["steps"], facts["warmup_steps"]),
    ]
    for run, whats in facts.get("later_runs", []):
        lines += [
            "",
            "Run again on %s, %s, one set-up at a time, after a fix: %s."
            % (run["gpu"], run["date"], "; ".join(whats)),
        ]
    if facts.get("setups_at_a_time", 1) > 1:
        lines += [
            "",
            "%d set-ups ran at a time on the one GPU (each set-up's own runs one after another), so a step-time "
            "ratio carries the neighbours' noise: read it as \"no stall\", not as the cost of recording. That "
            "cost, measured one run at a time, is in [docs/capture.md](docs/capture.md#what-recording-costs)."
            % facts["setups_at_a_time"],
        ]
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--check", metavar="README", help="exit 1 when README's table is not the one the results give")
    parser.add_argument("results", nargs="+")
    args = parser.parse_args()
    text = table(*merged(args.results))
    if not args.check:
        sys.stdout.write(text)
        return 0
    return doc_table.check(args.check, BEGIN, END, text, "the compatibility table",
                           "python3 tests/gpu/compat_table.py %s" % " ".join(args.results))


if __name__ == "__main__":
    sys.exit(main())
