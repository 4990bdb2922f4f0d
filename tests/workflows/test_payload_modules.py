"""Every payload module reaches the workflow sandbox under its own name.

Temporal's sandbox passes a module through only under the name it is imported as, and a
dataclass's type hints are resolved in its own module's namespace, looked up in the sandbox's
sys.modules: a payload module imported only through the `workflows.api` surface is missing
there, and decoding its classes fails with a NameError (a node's workflow task then fails
for ever). workflows/definitions/__init__.py imports each by name; this holds that list to
the files in workflows/api/.
"""

from __future__ import annotations

import ast
import pkgutil
from pathlib import Path

from fleetctl.workflows import api, definitions


def test_every_payload_module_is_imported_by_name_in_the_sandbox() -> None:
    modules = {f"fleetctl.workflows.api.{m.name}" for m in pkgutil.iter_modules(api.__path__)}
    tree = ast.parse(Path(definitions.__file__).read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    assert modules == imported & modules, (
        f"missing from workflows/definitions/__init__.py: {sorted(modules - imported)}"
    )
