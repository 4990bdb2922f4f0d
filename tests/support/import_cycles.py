"""An import-linter contract type: no import cycle among the modules of the named packages,
however deep, function-local and TYPE_CHECKING imports counted (grimp records them all).

import-linter's own `acyclic_siblings` compares siblings as whole subtrees, so it would call
two packages whose modules import each other one way each (fleetctl.db's stores read
fleetctl.nodes.lifecycle, fleetctl.nodes' stores read fleetctl.db) a cycle; a cycle of
modules is what makes an import order matter, and what this contract refuses. Registered in
pyproject.toml (`contract_types`); `make test` runs it with the other contracts.
"""

from __future__ import annotations

from importlinter.application import output
from importlinter.domain import fields
from importlinter.domain.contract import Contract, ContractCheck


def strongly_connected(modules: set[str], imports: dict[str, set[str]]) -> list[list[str]]:
    """The cycles of the graph: its strongly connected components of more than one module,
    each sorted (Tarjan's algorithm, iterative so a deep graph cannot exhaust the stack)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    for root in sorted(modules):
        if root in index:
            continue
        work = [(root, iter(sorted(imports.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, pending = work[-1]
            nxt = next((m for m in pending if m in modules), None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(imports.get(nxt, ())))))
                elif nxt in on_stack:
                    low[module] = min(low[module], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[module])
            if low[module] == index[module]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == module:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
    return sorted(cycles)


class AcyclicModulesContract(Contract):
    type_name = "acyclic_modules"
    packages = fields.ListField(subfield=fields.StringField())

    def check(self, graph, verbose: bool) -> ContractCheck:
        modules = {
            m
            for package in self.packages  # type: ignore[attr-defined]
            for m in graph.find_descendants(package) | {package}
        }
        imports = {m: graph.find_modules_directly_imported_by(m) for m in modules}
        cycles = strongly_connected(modules, imports)
        return ContractCheck(kept=not cycles, warnings=[], metadata={"cycles": cycles})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for cycle in check.metadata["cycles"]:
            output.print_error(f"import cycle: {' <-> '.join(cycle)}")
            output.new_line()
