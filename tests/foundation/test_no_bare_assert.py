"""No bare ``assert`` outside test modules (issue 2, item 7): under ``python -O`` it vanishes, and a
checker that asserts is a checker that always passes. Every .py under kernel/, oracle/, properties/,
fuzz/, ci/ that is not a test module (test_*.py, *_test.py, conftest.py) is parsed; any ``assert``
fails the test with file:line. The foundation tests' own helpers are held to the same rule."""

from __future__ import annotations

import ast
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
CHECKED_DIRS = ("kernel", "oracle", "properties", "fuzz", "ci")


def is_test_module(path: Path) -> bool:
    name = path.name
    return name.startswith("test_") or name.endswith("_test.py") or name == "conftest.py"


def bare_asserts(path: Path, root: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    rel = path.relative_to(root)
    return [
        f"{rel}:{node.lineno}: assert {ast.unparse(node.test)}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Assert)
    ]


def scan(root: Path, dirs=CHECKED_DIRS, extra: tuple[Path, ...] = ()) -> tuple[list[Path], list[str]]:
    files = sorted(p for d in dirs for p in (root / d).rglob("*.py") if not is_test_module(p))
    files += [p for p in extra if not is_test_module(p)]
    return files, [hit for p in files for hit in bare_asserts(p, root)]


def test_no_bare_assert_outside_test_modules():
    helpers = tuple(Path(__file__).resolve().parent.glob("*.py"))
    files, hits = scan(REPO_ROOT, extra=helpers)
    assert any(p.parent.name == "properties" for p in files) and any(p.parent.name == "oracle" for p in files)
    assert not hits, "bare assert outside test modules (use `if ...: raise`):\n" + "\n".join(hits)


def test_the_lint_finds_a_planted_assert(tmp_path):
    (tmp_path / "fuzz").mkdir()
    (tmp_path / "fuzz" / "helper.py").write_text("def check(x):\n    y = x\n    assert y > 0, 'positive'\n")
    (tmp_path / "fuzz" / "test_ok.py").write_text("def test_x():\n    assert True\n")
    (tmp_path / "fuzz" / "thing_test.py").write_text("assert True\n")
    (tmp_path / "fuzz" / "conftest.py").write_text("assert True\n")
    files, hits = scan(tmp_path, dirs=("fuzz",))
    assert [p.name for p in files] == ["helper.py"]
    assert hits == ["fuzz/helper.py:3: assert y > 0"]
