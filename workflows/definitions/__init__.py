"""The workflow definitions (deterministic code only; activities do the I/O), and in
`shared` what several of them do alike.

Every payload module is imported here by its own name, inside the workflow sandbox (this
package runs there before each workflow module): the sandbox passes a module through only
under the name it is imported as, and a payload's type hints are resolved in its own module,
which must be in the sandbox's sys.modules. `from workflows.api import X` alone would leave
`workflows.api.nodes` out, and decoding a NodeLifecycleState would fail on a NameError.
tests/workflows/test_payload_modules.py holds this list to workflows/api/.
"""

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    import fleetctl.workflows.api.jobs
    import fleetctl.workflows.api.names
    import fleetctl.workflows.api.nodes
    import fleetctl.workflows.api.remediation
    import fleetctl.workflows.api.validation  # noqa: F401
