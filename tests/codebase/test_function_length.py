"""No function of the product is longer than a screen and a half: a longer one is doing
several jobs. The simulator's output templates (fleetctl/sim/render/) are the exception: each
is one tool's report written out as the tool prints it."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# fleetctl/ and the folders it links (Path.rglob does not follow links); a migration, once
# applied somewhere, is never edited again, however long its upgrade.
PRODUCT = ("fleetctl", "workflows", "checks")
TEMPLATES = REPO / "fleetctl" / "sim" / "render"
MAX_LINES = 100


def long_functions(source: str, limit: int = MAX_LINES) -> list[tuple[str, int]]:
    """(name, lines) of every function or method in `source` longer than `limit` lines."""
    return [
        (node.name, node.end_lineno - node.lineno + 1)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > limit
    ]


def test_the_scan_finds_a_long_function_and_a_long_method() -> None:
    source = "\n".join(
        [
            "def short():",
            "    return 1",
            "class C:",
            "    async def long(self):",
            "        a = 1",
            "        b = 2",
            "        return a + b",
        ]
    )
    assert long_functions(source, limit=3) == [("long", 4)]
    assert long_functions(source, limit=4) == []


def test_no_function_of_the_product_is_over_a_hundred_lines() -> None:
    found = {
        f"{path.relative_to(REPO)}:{name}": lines
        for top in PRODUCT
        for path in sorted((REPO / top).rglob("*.py"))
        if TEMPLATES not in path.parents
        for name, lines in long_functions(path.read_text())
    }
    assert found == {}
