"""Re-run the SURVIVED lines of a ``checker_flips.py`` log (``../2026-12-05-ambient-state/``) with another test
selection: each site matched by file, line and kind (every site of that line and kind, once).

    python rerun_survivors.py flips.txt /tmp/mutrepo tests/engine/test_differential.py 2

(``/tmp/mutrepo``: a ``git clone`` of the repository; its copies ``/tmp/mutrepo-0`` .. ``-{jobs-1}`` must exist, as
``checker_flips.py`` leaves them.)
"""

from __future__ import annotations

import ast
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "2026-12-05-ambient-state"))
from checker_flips import run_all, sites  # noqa: E402


def main() -> None:
    log, repo, tests, jobs = sys.argv[1], sys.argv[2], sys.argv[3].split(","), int(sys.argv[4])
    work, seen = [], set()
    with open(log) as fh:
        for line in fh:
            m = re.match(r"SURVIVED\s+(\S+):(\d+) \[(\w+)\]", line)
            if not m:
                continue
            path, ln, kind = m.group(1), int(m.group(2)), m.group(3)
            with open(os.path.join(repo, path)) as src_fh:
                src = src_fh.read()
            for s in sites(ast.parse(src)):
                if s[1] == ln and s[0] == kind and (path, s) not in seen:
                    seen.add((path, s))
                    work.append((path, s, src))
    print(f"{len(work)} sites", flush=True)
    run_all(repo, work, tests, jobs)

if __name__ == "__main__":
    main()
