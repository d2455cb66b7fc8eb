#!/usr/bin/env python3
"""An assistant's conversation with `vramscope mcp`, over stdio, as an MCP
client runs it: initialize, the tool list, then `explain` on a snapshot of
a job that ran out of memory. Prints each message both ways (long ones
shortened for reading) and, at the end, the answer an assistant would give
from the JSON it got. Standard library only.

    python3 docs/mcp-conversation.py --vramscope target/debug/vramscope \\
        tests/fixtures/corpus/oom_leak.pickle > docs/mcp-conversation.out.txt
"""

import argparse
import json
import subprocess
import sys


def shorten(value, depth=0):
    """The message with long lists and strings cut, for printing only."""
    if isinstance(value, list):
        items = [shorten(v, depth + 1) for v in value[:3]]
        return items + ([f"... {len(value) - 3} more"] if len(value) > 3 else [])
    if isinstance(value, dict):
        return {k: shorten(v, depth + 1) for k, v in value.items()}
    if isinstance(value, str) and len(value) > 160:
        return value[:160] + f"... ({len(value)} characters)"
    return value


class Session:
    def __init__(self, vramscope):
        self.child = subprocess.Popen(
            [vramscope, "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
        )
        self.next_id = 1

    def send(self, message):
        print("assistant -> vramscope:")
        print(json.dumps(shorten(message), indent=2))
        self.child.stdin.write(json.dumps(message) + "\n")
        self.child.stdin.flush()

    def request(self, method, params):
        message = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}
        self.next_id += 1
        self.send(message)
        while True:
            line = self.child.stdout.readline()
            if not line:
                sys.exit(f"vramscope mcp closed its output before answering {method}")
            answer = json.loads(line)
            if answer.get("id") == message["id"]:
                print("vramscope -> assistant:")
                print(json.dumps(shorten(answer), indent=2))
                print()
                return answer

    def close(self):
        self.child.stdin.close()
        return self.child.wait()


def mib(n):
    return f"{n / 2**20:,.1f} MiB"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--vramscope", default="vramscope")
    p.add_argument("snapshot")
    a = p.parse_args()

    s = Session(a.vramscope)
    s.request(
        "initialize",
        {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "conversation.py", "version": "1"}},
    )
    s.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    print()
    tools = s.request("tools/list", {})["result"]["tools"]
    print("tools offered:", ", ".join(t["name"] for t in tools))
    print()
    print(f'user: "Why did the job that wrote {a.snapshot} run out of memory?"')
    print()
    result = s.request("tools/call", {"name": "explain", "arguments": {"snapshot": a.snapshot}})["result"]
    code = s.close()
    if result.get("isError"):
        sys.exit("explain failed: " + result["content"][0]["text"])
    answer = result["structuredContent"]

    print("assistant, from the JSON it got:")
    if not answer["ooms"]:
        print("  The snapshot records no out-of-memory error.")
    for oom in answer["ooms"]:
        top = oom["top_stacks"][0] if oom["top_stacks"] else None
        where = " < ".join(f"{f['filename'].rsplit('/', 1)[-1]}:{f['line']} {f['name']}" for f in top["frames"][:3]) if top else "-"
        print(f"  Device {oom['device']} failed to allocate {mib(oom['request_bytes'])} at trace entry {oom['row']}.")
        print(
            f"  PyTorch had reserved {mib(oom['reserved_bytes'])}, of which {mib(oom['allocated_bytes'])} were allocated;"
            f" {mib(oom['usable_free_bytes'])} were free in {oom['usable_free_blocks']} usable blocks,"
            f" the largest {mib(oom['largest_usable_free_block']['size'] if oom['largest_usable_free_block'] else 0)}."
        )
        print(f"  Cause: {oom['cause']} (limit: {oom['limit']}).")
        if top:
            print(f"  Most live memory came from {where}: {mib(top['bytes'])} in {top['count']} allocations.")
        fixes = [
            v["setting"] + (f" (if the process could reserve {mib(v['avoids']['bytes'])})" if "bytes" in v["avoids"] else "")
            for v in oom.get("avoided_by") or []
            if v["avoids"]["verdict"] != "no"
        ]
        if fixes:
            print(f"  The allocator model says {', '.join(fixes)} would have avoided it (PYTORCH_CUDA_ALLOC_CONF).")
    print()
    print(f"vramscope mcp exited with {code} when the assistant closed the session")


if __name__ == "__main__":
    main()
