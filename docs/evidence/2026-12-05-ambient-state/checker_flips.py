"""Ad-hoc mutation run over the checkers (28th session): every comparison (``<`` / ``<=``, ``==`` / ``!=``, ``is`` /
``is not``, ``in`` / ``not in``), every ``and`` / ``or`` and every ``not`` of the files given flipped, one at a time,
in scratch copies of the repository; the tests given run with ``-x``; a flip none of them fails prints SURVIVED.

    python checker_flips.py /tmp/mutrepo properties/tolerance.py,properties/exact.py tests/foundation 2

(``/tmp/mutrepo``: a ``git clone`` of the repository; copies ``/tmp/mutrepo-0`` .. ``-{jobs-1}`` are made beside it.)
"""

from __future__ import annotations

import ast
import copy
import os
import shutil
import subprocess
import sys
import threading
import time

SWAP = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq,
        ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.In: ast.NotIn, ast.NotIn: ast.In}


def sites(tree) -> list[tuple[str, int, int]]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and type(node.ops[0]) in SWAP:
            out.append(("cmp", node.lineno, node.col_offset))
        elif isinstance(node, ast.BoolOp):
            out.append(("bool", node.lineno, node.col_offset))
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            out.append(("not", node.lineno, node.col_offset))
    return out


class Flip(ast.NodeTransformer):
    def __init__(self, site):
        self.site, self.done = site, False

    def visit(self, node):
        node = self.generic_visit(node) or node
        kind, line, col = self.site
        if self.done or getattr(node, "lineno", None) != line or getattr(node, "col_offset", None) != col:
            return node
        if kind == "cmp" and isinstance(node, ast.Compare) and type(node.ops[0]) in SWAP:
            node.ops[0] = SWAP[type(node.ops[0])]()
            self.done = True
        elif kind == "bool" and isinstance(node, ast.BoolOp):
            node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
            self.done = True
        elif kind == "not" and isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            self.done = True
            return node.operand
        return node


def run_one(root: str, path: str, site, src: str, tests: list[str]) -> str:
    mutated = Flip(site).visit(copy.deepcopy(ast.parse(src)))
    ast.fix_missing_locations(mutated)
    target = os.path.join(root, path)
    try:
        with open(target, "w") as fh:
            fh.write(ast.unparse(mutated))
        t0 = time.time()
        r = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-n", "0", *tests],
                           cwd=root, capture_output=True, text=True, timeout=900,
                           env={**os.environ, "CUTE_DSL_ARCH": "sm_90a"})
        verdict = {1: "killed", 0: "SURVIVED"}.get(r.returncode, f"rc{r.returncode}")
        line = src.splitlines()[site[1] - 1].strip()
        return f"{verdict:9s} {path}:{site[1]} [{site[0]}] {time.time() - t0:5.1f}s  {line[:110]}"
    finally:
        with open(target, "w") as fh:
            fh.write(src)


def main() -> None:
    repo, files, tests = sys.argv[1], sys.argv[2].split(","), sys.argv[3].split(",")
    jobs = int(sys.argv[4]) if len(sys.argv) > 4 else 2
    work = []
    for path in files:
        with open(os.path.join(repo, path)) as fh:
            src = fh.read()
        work += [(path, s, src) for s in sites(ast.parse(src))]
    print(f"{len(work)} mutants", flush=True)
    for j in range(jobs):
        if not os.path.exists(f"{repo}-{j}"):
            shutil.copytree(repo, f"{repo}-{j}", symlinks=True, ignore=shutil.ignore_patterns(".venv"))
    run_all(repo, work, tests, jobs)


def run_all(repo: str, work: list, tests: list[str], jobs: int) -> None:
    """Every ``(path, site, src)`` of ``work`` flipped and tested in turn, ``jobs`` at a time, each in its own
    scratch copy ``{repo}-{slot}``; one line printed per flip."""
    lock = threading.Lock()

    def worker(slot: int) -> None:
        while True:
            with lock:
                if not work:
                    return
                path, site, src = work.pop(0)
            print(run_one(f"{repo}-{slot}", path, site, src, tests), flush=True)

    threads = [threading.Thread(target=worker, args=(j,)) for j in range(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

if __name__ == "__main__":
    main()
