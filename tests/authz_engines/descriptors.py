"""The gRPC services of the installed Temporal SDK, read from the proto descriptors its
generated modules carry. The serialized file is parsed on its own: loading the module would
resolve its imports (google.api's HTTP annotations), which the SDK does not install."""

from __future__ import annotations

import ast
import importlib.util

from google.protobuf import descriptor_pb2

SERVICE_MODULES = (
    "temporalio.api.workflowservice.v1.service_pb2",
    "temporalio.api.operatorservice.v1.service_pb2",
)


def services(module: str) -> dict[str, list[str]]:
    """{full service name: its method names} declared in `module`'s proto file."""
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None, module
    with open(spec.origin) as handle:
        tree = ast.parse(handle.read())
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "AddSerializedFile":
            proto = descriptor_pb2.FileDescriptorProto.FromString(node.args[0].value)
            return {f"{proto.package}.{s.name}": [m.name for m in s.method] for s in proto.service}
    raise AssertionError(f"{module}: no serialized proto file")


def all_methods() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for module in SERVICE_MODULES:
        found.update(services(module))
    return found
