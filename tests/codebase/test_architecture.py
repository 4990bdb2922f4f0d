"""The tree tells a newcomer where a change goes: fleetctl/ is a few domain packages, each
module in them a pure decision or an edge named for its I/O, and no module imports another
that imports it back (the import-linter contracts in pyproject.toml, run by `make test`)."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import grimp
import pytest

from tests.support.import_cycles import AcyclicModulesContract, strongly_connected

REPO = Path(__file__).resolve().parents[2]
FLEETCTL = REPO / "fleetctl"
DOMAINS = ("inventory", "nodes", "jobs", "remediation", "reliability", "connections", "validation")
EDGE_SUFFIXES = ("_store", "_sync", "_client", "_server")
MAX_TOP_LEVEL_MODULES = 12


def _contracts() -> dict[str, dict]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    return {c["name"]: c for c in config["contracts"]}


def _decisions() -> set[str]:
    return set(_contracts()["the decisions are pure"]["source_modules"])


def test_few_modules_stay_at_the_top_of_fleetctl() -> None:
    top = sorted(p.name for p in FLEETCTL.glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL_MODULES, top


@pytest.mark.parametrize("domain", DOMAINS)
def test_every_module_of_a_domain_is_a_decision_or_a_named_edge(domain: str) -> None:
    decisions = _decisions()
    for path in sorted((FLEETCTL / domain).glob("*.py")):
        if path.name == "__init__.py":
            continue
        module = f"fleetctl.{domain}.{path.stem}"
        pure = module in decisions or f"fleetctl.{domain}" in decisions
        edge = path.stem.endswith(EDGE_SUFFIXES)
        assert pure != edge, (
            f"{module}: name an edge *_store/_sync/_client/_server, or list a decision "
            "in the purity contract (never both)"
        )


@pytest.mark.parametrize("domain", DOMAINS)
def test_every_domain_says_what_lives_there_and_what_it_may_import(domain: str) -> None:
    init = FLEETCTL / domain / "__init__.py"
    doc = ast.get_docstring(ast.parse(init.read_text())) or ""
    assert "May import:" in doc and "Entry point:" in doc, init
    listed = {line.split()[0] for line in doc.splitlines() if line.startswith("    ") and line.split()}
    modules = {p.stem for p in (FLEETCTL / domain).glob("*.py") if p.name != "__init__.py"}
    assert modules <= listed, f"{init}: not described: {sorted(modules - listed)}"


def test_the_checks_may_import_no_other_part_of_fleetctl() -> None:
    contract = _contracts()["checks imports nothing of the project"]
    parts = {f"fleetctl.{p.stem}" for p in FLEETCTL.glob("*.py") if p.name != "__init__.py"}
    parts |= {f"fleetctl.{p.parent.name}" for p in FLEETCTL.glob("*/__init__.py")}
    assert contract["source_modules"] == ["fleetctl.checks"]
    assert sorted(parts - {"fleetctl.checks"}) == sorted(contract["forbidden_modules"])


def test_the_top_level_folders_are_fleetctls_subpackages() -> None:
    # workflows/, checks/, migrations/ and runbooks/ stay at the top of the repository and are
    # imported, type-checked and shipped as fleetctl.<name> through a link each.
    for folder in ("workflows", "checks", "migrations", "runbooks"):
        link = FLEETCTL / folder
        assert link.is_symlink() and link.resolve() == REPO / folder, link


def test_architecture_md_names_every_package() -> None:
    text = (REPO / "ARCHITECTURE.md").read_text()
    packages = sorted(p.parent.name for p in FLEETCTL.glob("*/__init__.py"))
    assert [p for p in packages if f"`fleetctl.{p}`" not in text] == []


@pytest.mark.parametrize(
    ("imports", "cycles"),
    [
        ({}, []),
        ({"a": {"b"}, "b": {"c"}}, []),
        ({"a": {"a"}}, []),  # a module importing itself is no order problem
        ({"a": {"b"}, "b": {"a"}}, [["a", "b"]]),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
        ({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c"}, "e": {"a", "c"}}, [["a", "b"], ["c", "d"]]),
        ({"a": {"outside"}, "outside": {"a"}}, []),  # only the named packages' modules count
    ],
)
def test_cycles_are_the_strongly_connected_modules(imports: dict[str, set[str]], cycles: list[list[str]]) -> None:
    modules = {m for m in (*imports, *(x for deps in imports.values() for x in deps)) if m != "outside"}
    assert strongly_connected(modules, imports) == cycles


def test_a_deep_chain_is_no_cycle_and_closing_it_is_one() -> None:
    chain = {f"m{i}": {f"m{i + 1}"} for i in range(5000)}
    modules = set(chain) | {"m5000"}
    assert strongly_connected(modules, chain) == []
    chain["m5000"] = {"m0"}
    assert len(strongly_connected(modules, chain)[0]) == 5001


def _graph(*imports: tuple[str, str]) -> grimp.ImportGraph:
    graph = grimp.ImportGraph()
    for module in ("pkg", "pkg.a", "pkg.b", "pkg.sub", "pkg.sub.c"):
        graph.add_module(module)
    for importer, imported in imports:
        graph.add_import(importer=importer, imported=imported)
    return graph


def _check(graph: grimp.ImportGraph):
    contract = AcyclicModulesContract(name="test", session_options={}, contract_options={"packages": ["pkg"]})
    return contract.check(graph, verbose=False)


def test_the_contract_finds_a_cycle_through_a_subpackage_and_keeps_a_dag() -> None:
    assert _check(_graph(("pkg.a", "pkg.b"), ("pkg.b", "pkg.sub.c"))).kept
    broken = _check(_graph(("pkg.a", "pkg.b"), ("pkg.b", "pkg.sub.c"), ("pkg.sub.c", "pkg.a")))
    assert not broken.kept and broken.metadata["cycles"] == [["pkg.a", "pkg.b", "pkg.sub.c"]]
