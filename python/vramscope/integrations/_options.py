"""The options the framework callbacks share, documented once."""

CALLBACK_OPTIONS = """
    snapshot_dir: folder for the snapshots (default "memory-snapshots").
    server, token: upload each snapshot to this vramscope server (token
        defaults to $VRAMSCOPE_TOKEN); None keeps files only.
    threshold: write a snapshot when reserved memory reaches this fraction
        of capacity (default 0.9; None: never).
    at_steps: optimizer steps (the framework's global step after the step)
        at whose end a snapshot is written, e.g. [1, 100].
    on_oom: write a snapshot when an allocation fails (default True).
    job: the job's name in labels (default $VRAMSCOPE_JOB, else the run's name).
    max_entries: trace entries kept (default 100000).
    context: what the history records of each event (default "auto": the
        stacks of allocations and frees where this torch records the latter
        safely, else of allocations only; "all", "alloc" or "state").
"""
