"""The gateway's rules as data: every method of Temporal's WorkflowService and
OperatorService classified, each caller allowed exactly its classes, and the nginx maps
refusing what they cannot hold."""

from __future__ import annotations

import json

import pytest

from fleetctl.authz.engine_roles import EngineRolesError
from fleetctl.authz.gateway import (
    METHODS,
    OPERATOR_SERVICE,
    WORKFLOW_SERVICE,
    Caller,
    MethodClass,
    RefusalLogError,
    allowed,
    method_class,
    method_path,
    parse_refusals,
    render_maps,
)
from fleetctl.authz.roles import Role
from tests.authz_engines.descriptors import all_methods


def test_every_method_of_the_services_is_classified_and_nothing_else() -> None:
    declared = all_methods()
    assert set(declared) == {WORKFLOW_SERVICE, OPERATOR_SERVICE}
    for service, methods in declared.items():
        unclassified = sorted(set(methods) - set(METHODS[service]))
        assert unclassified == [], f"classify these in fleetctl/authz/gateway.py: {unclassified}"
        gone = sorted(set(METHODS[service]) - set(methods))
        assert gone == [], f"no longer in {service}: {gone}"


def test_no_two_methods_differ_only_in_case() -> None:
    # nginx's map ignores case: two such paths would share one class.
    paths = [method_path(s, m) for s, methods in METHODS.items() for m in methods]
    assert len({p.lower() for p in paths}) == len(paths)


W = f"/{WORKFLOW_SERVICE}/"


@pytest.mark.parametrize(
    ("caller", "path", "expected"),
    [
        (Caller.VIEWER, W + "ListWorkflowExecutions", True),
        (Caller.VIEWER, W + "QueryWorkflow", True),
        (Caller.VIEWER, W + "GetSystemInfo", True),
        (Caller.VIEWER, W + "SignalWorkflowExecution", False),
        (Caller.VIEWER, W + "SignalWithStartWorkflowExecution", False),
        (Caller.VIEWER, W + "ExecuteMultiOperation", False),
        (Caller.VIEWER, W + "PollWorkflowTaskQueue", False),  # a poll takes tasks: not a read
        (Caller.VIEWER, W + "PollWorkflowExecutionTimeSkipping", False),
        (Caller.OPERATOR, W + "SignalWorkflowExecution", True),
        (Caller.OPERATOR, W + "TerminateWorkflowExecution", True),
        (Caller.OPERATOR, W + "CreateSchedule", False),
        (Caller.OPERATOR, W + "StartBatchOperation", False),
        (Caller.OPERATOR, W + "RespondWorkflowTaskCompleted", False),
        (Caller.ADMIN, W + "CreateSchedule", True),
        (Caller.ADMIN, f"/{OPERATOR_SERVICE}/AddSearchAttributes", True),
        (Caller.ADMIN, W + "PollActivityTaskQueue", False),
        (Caller.SERVICE, W + "PollActivityTaskQueue", True),
        (Caller.SERVICE, W + "DeleteWorkflowExecution", True),
        (None, W + "GetSystemInfo", False),
        (Caller.SERVICE, W + "NoSuchMethod", False),
        (Caller.SERVICE, "/grpc.health.v1.Health/Check", False),
        (Caller.SERVICE, "/temporal.api.workflowservice.v1.WorkflowService/StartWorkflowExecution/", False),
    ],
)
def test_who_may_call_what(caller: Caller | None, path: str, expected: bool) -> None:
    assert allowed(caller, path) is expected


def test_a_viewer_may_call_only_reads() -> None:
    for service, methods in METHODS.items():
        for method in methods:
            path = method_path(service, method)
            assert allowed(Caller.VIEWER, path) is (method_class(path) is MethodClass.READ), path


def test_the_maps_name_each_subject_and_service_once_by_its_whole_subject() -> None:
    text = render_maps({"alice": Role.VIEWER, "bob@corp": Role.ADMIN}, ["fleet-worker"])
    assert '    "CN=alice" viewer;' in text
    assert '    "CN=bob@corp" admin;' in text
    assert '    "CN=fleet-worker" service;' in text
    assert f"    {W}SignalWorkflowExecution write;" in text
    assert '    "viewer:read" "";' in text and '"viewer:write"' not in text
    custom = render_maps({"alice": Role.VIEWER}, [], dn="CN={subject},OU=gpu,O=Example")
    assert '    "CN=alice,OU=gpu,O=Example" viewer;' in custom


@pytest.mark.parametrize(
    ("subjects", "services", "dn", "refused"),
    [
        ({'al"ice': Role.VIEWER}, [], "CN={subject}", "subject"),
        ({"alice;": Role.VIEWER}, [], "CN={subject}", "subject"),
        ({"a" * 64: Role.VIEWER}, [], "CN={subject}", "at most 63"),
        ({"alice": Role.VIEWER}, ["Alice"], "CN={subject}", "named twice"),
        ({"alice": Role.VIEWER}, ["alice"], "CN={subject}", "named twice"),
        ({}, ["svc"], "CN=fixed", "{subject} once"),
        ({}, ["svc"], 'CN="{subject}"', "{subject} once"),
        ({}, ["svc"], "CN={subject};", "{subject} once"),
        ({}, ["svc"], "CN={subject}{x}", "{subject} once"),
    ],
)
def test_what_the_maps_cannot_hold_is_refused_in_one_line(subjects, services, dn, refused) -> None:
    with pytest.raises(EngineRolesError, match=refused.replace("{", r"\{").replace("}", r"\}")) as raised:
        render_maps(subjects, services, dn)
    assert "\n" not in str(raised.value)


def _line(**fields: str) -> str:
    base = {"msec": "1764942000.123", "request_id": "0" * 31 + "1", "subject_dn": "CN=alice", "caller": "viewer"}
    base |= {"method": method_path(WORKFLOW_SERVICE, "SignalWorkflowExecution"), "class": "write"}
    base |= {"reason": "the Temporal gateway: ... needs operator"}
    return json.dumps(base | fields)


@pytest.mark.parametrize(
    ("line", "dn", "subject", "caller", "needed"),
    [
        (_line(), "CN={subject}", "alice", "viewer", "operator"),
        (_line(subject_dn="CN=olga,OU=gpu,O=Example", caller="operator", method=method_path(WORKFLOW_SERVICE, "CreateSchedule")),
         "CN={subject},OU=gpu,O=Example", "olga", "operator", "admin"),
        # A certificate the gateway does not know: its whole subject, no role.
        (_line(subject_dn="CN=mallory,O=Elsewhere", caller=""), "CN={subject}", "CN=mallory,O=Elsewhere", "", "operator"),
        (_line(method="/grpc.health.v1.Health/Check"), "CN={subject}", "alice", "viewer", ""),  # refused to everyone
        (_line(method=method_path(WORKFLOW_SERVICE, "PollActivityTaskQueue")), "CN={subject}", "alice", "viewer", "service"),
    ],
)  # fmt: skip
def test_a_refusal_line_names_the_subject_its_role_and_the_role_needed(line, dn, subject, caller, needed) -> None:
    (refusal,) = parse_refusals(line + "\n\n", dn)
    assert (refusal.subject, refusal.caller, refusal.needed) == (subject, caller, needed)
    assert refusal.at.isoformat() == "2025-12-05T13:40:00.123000+00:00" and refusal.request_id.endswith("1")


@pytest.mark.parametrize(
    "bad",
    ["GET / HTTP/1.1 200", "[]", _line(msec="soon"), _line(request_id="short"), json.dumps({"msec": "1"}), _line(caller=None)],
)  # fmt: skip
def test_a_line_that_is_not_a_refusal_is_refused_naming_it(bad) -> None:
    with pytest.raises(RefusalLogError) as refused:
        parse_refusals(_line() + "\n" + bad + "\n", where="log")
    assert str(refused.value) == "log: line 2: not a line of the gateway's refusal log"
