"""Summarise a gate report dir: statuses, this session's new checks."""
import collections
import glob
import json
import sys

status, inrow, inst, untouched, failed = (collections.Counter() for _ in range(5))
wrote = []
for f in glob.glob(sys.argv[1] + "/cases-*.jsonl"):
    for line in open(f):
        r = json.loads(line)
        status[r["status"]] += 1
        for c in (r.get("checks") or []):
            if not isinstance(c, dict):
                continue
            ex = c.get("extra") or {}
            state = "skipped" if c.get("skipped") else "passed" if c.get("passed") else "failed"
            if str(ex.get("replay", "")).startswith("in_a_row"):
                inrow[(c["name"], state)] += 1
            if ".burst" in str(ex.get("call", "")):
                inst[state] += 1
            if c.get("name") == "inputs_untouched":
                untouched[state] += 1
                if "wrote into" in str(c.get("detail")):
                    wrote.append(str(c.get("detail"))[:300])
            if state == "failed":
                failed[c["name"]] += 1
print("cases by status:", dict(status))
print("graph replays in a row:", dict(inrow))
print("instances back to back (checks):", dict(inst))
print("inputs_untouched:", dict(untouched), "write failures:", wrote[:3])
print("failed checks:", dict(failed))
