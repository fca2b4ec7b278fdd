"""The production kernel's tensor factories name their device and dtype (CONTRACT "Caller's tensor defaults").

An engine builds its layers and calls them under ``torch.device(cuda)`` and a bf16 default dtype (vLLM's
``set_default_torch_dtype`` and ``with torch.device(device)``). A factory in kernel/ that leaves either to the default
makes a tensor where the engine says, not where the code meant: the unfused path's pinned host staging was built on
the GPU there ("Only dense CPU tensors can be pinned", found by the gate's engine-defaults cases on one H100, 30th
session), and flag words in the default dtype are half as many under bf16 (mutant ``FlagWordsInDefaultDtype``).
The gate finds such a factory only where a case reaches it on a GPU; this lint finds it on the CPU, wherever it is.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
CHECKED_DIRS = ("kernel",)
#: torch's factories that take the default device (and, for floating values, the default dtype).
FACTORIES = frozenset({
    "empty", "zeros", "ones", "full", "arange", "range", "linspace", "logspace", "eye", "empty_strided",
    "rand", "randn", "randint", "randperm", "tensor", "as_tensor", "scalar_tensor",
})


def unnamed_defaults(path: Path, root: Path) -> list[str]:
    """``file:line: torch.<factory>(...) without device/dtype`` for each factory call that leaves one to the
    default (a ``**kwargs`` call is taken as naming both: it is not this lint's to follow)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    hits = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in FACTORIES
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "torch"):
            continue
        named = {k.arg for k in node.keywords}
        if None in named:
            continue
        missing = [k for k in ("device", "dtype") if k not in named]
        if missing:
            hits.append(f"{path.relative_to(root)}:{node.lineno}: torch.{node.func.attr}(...) without "
                        + " and ".join(missing))
    return hits


def scan(root: Path, dirs=CHECKED_DIRS) -> tuple[list[Path], list[str]]:
    files = sorted(p for d in dirs for p in (root / d).rglob("*.py"))
    return files, [hit for p in files for hit in unnamed_defaults(p, root)]


def test_every_factory_in_the_kernel_names_its_device_and_dtype():
    files, hits = scan(REPO_ROOT)
    assert any(p.name == "unfused.py" for p in files) and any(p.name == "wrapper.py" for p in files)
    assert not hits, ("a tensor factory leaves its device or dtype to the caller's defaults (name them: "
                      "device=\"cpu\" for host buffers):\n" + "\n".join(hits))


def test_the_lint_finds_a_factory_that_leaves_its_device_or_dtype_to_the_defaults(tmp_path):
    (tmp_path / "kernel").mkdir()
    (tmp_path / "kernel" / "staging.py").write_text(
        "import torch\n"
        "a = torch.empty(4, 8, dtype=torch.bfloat16, pin_memory=True)\n"
        "b = torch.zeros(4, device='cpu')\n"
        "c = torch.arange(4, dtype=torch.int32, device='cpu')\n"
        "d = torch.empty_like(c)\n"
        "e = torch.full((2,), 1, **kw)\n"
        "f = torch.tensor([1, 2], dtype=torch.int64)\n")
    files, hits = scan(tmp_path)
    assert [p.name for p in files] == ["staging.py"]
    assert hits == ["kernel/staging.py:2: torch.empty(...) without device",
                    "kernel/staging.py:3: torch.zeros(...) without dtype",
                    "kernel/staging.py:7: torch.tensor(...) without device"]
