"""bench/ measures the product with helpers of its own: it imports nothing from tests/, whose
modules are free to change with the tests (the tests may import bench's helpers)."""

from __future__ import annotations

import ast
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def imported_modules(source: str) -> list[str]:
    names: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module)
    return names


def test_the_scan_sees_imports_at_any_depth():
    nested = (
        "def f():\n    try:\n        from tests.support import cli\n    except ImportError:\n        import tests\n"
    )
    assert imported_modules(nested) == ["tests.support", "tests"]


def test_bench_imports_nothing_from_the_tests():
    found = [
        f"{path.relative_to(BENCH.parent)}: {module}"
        for path in sorted(BENCH.rglob("*.py"))
        for module in imported_modules(path.read_text())
        if module == "tests" or module.startswith("tests.")
    ]
    assert found == []
