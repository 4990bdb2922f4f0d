"""The Temporal gateway's rules: every gRPC method of Temporal's WorkflowService and
OperatorService in one class, which callers may use each class, and the nginx `map`s that
enforce both in front of the Temporal frontend (deploy/nginx/temporal-gateway.conf).

    read      what a viewer may call: describe, get, list, count, query, and the polls for
              an outcome already asked for (an update's, an activity's)
    write     what an operator runs on workflows: start, signal, update, cancel, terminate,
              reset, pause; Temporal's own activity and Nexus operations likewise
    admin     the namespace and what applies to many workflows at once: namespaces,
              schedules, batch operations, worker deployments and versioning, rules,
              deletes, search attributes, clusters, Nexus endpoints
    worker    the task-queue protocol (polls, task completions, heartbeats): only the
              services that run workflows (workers, and the front door) call these

A method missing from METHODS is refused to everyone (tests/authz_engines walks the
services' descriptors and fails on an unclassified one). Each refusal is also a JSON line of
the gateway's refusal log (REFUSAL_LOG_FIELDS), which `fleetctl engines import-refusals`
reads into the audit trail (parse_refusals).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum

from fleetctl.authz.engine_roles import SUBJECT_RE, EngineRolesError, check_subject
from fleetctl.authz.roles import Role

WORKFLOW_SERVICE = "temporal.api.workflowservice.v1.WorkflowService"
OPERATOR_SERVICE = "temporal.api.operatorservice.v1.OperatorService"


class MethodClass(str, Enum):
    READ = "read"
    WRITE = "write"
    ADMIN = "admin"
    WORKER = "worker"


class Caller(str, Enum):
    """Who the gateway serves: a subject by its role, or a service (workers, the front door)."""

    VIEWER = "viewer"
    OPERATOR = "operator"
    ADMIN = "admin"
    SERVICE = "service"


ALLOWED: dict[Caller, frozenset[MethodClass]] = {
    Caller.VIEWER: frozenset({MethodClass.READ}),
    Caller.OPERATOR: frozenset({MethodClass.READ, MethodClass.WRITE}),
    Caller.ADMIN: frozenset({MethodClass.READ, MethodClass.WRITE, MethodClass.ADMIN}),
    Caller.SERVICE: frozenset(MethodClass),
}

# The least role that may call a class, for the refusal's message.
NEEDED: dict[MethodClass, str] = {
    MethodClass.READ: Caller.VIEWER.value,
    MethodClass.WRITE: Caller.OPERATOR.value,
    MethodClass.ADMIN: Caller.ADMIN.value,
    MethodClass.WORKER: "a worker's certificate",
}


def _classes(**names: str) -> dict[str, MethodClass]:
    return {method: MethodClass(kind) for kind, methods in names.items() for method in methods.split()}


METHODS: dict[str, dict[str, MethodClass]] = {
    WORKFLOW_SERVICE: _classes(
        read="""
            DescribeNamespace ListNamespaces GetWorkflowExecutionHistory GetWorkflowExecutionHistoryReverse
            ListOpenWorkflowExecutions ListClosedWorkflowExecutions ListWorkflowExecutions
            ListArchivedWorkflowExecutions ScanWorkflowExecutions CountWorkflowExecutions GetSearchAttributes
            QueryWorkflow DescribeWorkflowExecution DescribeTaskQueue GetClusterInfo GetSystemInfo
            ListTaskQueuePartitions DescribeSchedule ListScheduleMatchingTimes ListSchedules CountSchedules
            GetWorkerBuildIdCompatibility GetWorkerVersioningRules GetWorkerTaskReachability DescribeDeployment
            DescribeWorkerDeploymentVersion ListDeployments GetDeploymentReachability GetCurrentDeployment
            DescribeWorkerDeployment ListWorkerDeployments PollWorkflowExecutionUpdate DescribeBatchOperation
            ListBatchOperations DescribeWorkflowRule ListWorkflowRules ListWorkers CountWorkers DescribeWorker
            FetchWorkerConfig DescribeActivityExecution DescribeNexusOperationExecution PollActivityExecution
            PollNexusOperationExecution ListActivityExecutions ListNexusOperationExecutions
            CountActivityExecutions CountNexusOperationExecutions
        """,
        write="""
            StartWorkflowExecution ExecuteMultiOperation RequestCancelWorkflowExecution SignalWorkflowExecution
            SignalWithStartWorkflowExecution ResetWorkflowExecution TerminateWorkflowExecution
            UpdateWorkflowExecution UpdateWorkflowExecutionOptions UpdateActivityOptions PauseActivity
            UnpauseActivity ResetActivity PauseWorkflowExecution UnpauseWorkflowExecution StartActivityExecution
            StartNexusOperationExecution RequestCancelActivityExecution RequestCancelNexusOperationExecution
            TerminateActivityExecution PauseActivityExecution ResetActivityExecution UnpauseActivityExecution
            UpdateActivityExecutionOptions TerminateNexusOperationExecution
        """,
        # PollWorkflowExecutionTimeSkipping is undocumented and skips time: not a read.
        admin="""
            RegisterNamespace UpdateNamespace DeprecateNamespace DeleteWorkflowExecution CreateSchedule
            UpdateSchedule PatchSchedule DeleteSchedule UpdateWorkerBuildIdCompatibility
            UpdateWorkerVersioningRules SetCurrentDeployment SetWorkerDeploymentCurrentVersion
            DeleteWorkerDeployment DeleteWorkerDeploymentVersion SetWorkerDeploymentRampingVersion
            CreateWorkerDeployment CreateWorkerDeploymentVersion UpdateWorkerDeploymentVersionComputeConfig
            ValidateWorkerDeploymentVersionComputeConfig UpdateWorkerDeploymentVersionMetadata
            SetWorkerDeploymentManager StartBatchOperation StopBatchOperation CreateWorkflowRule
            DeleteWorkflowRule TriggerWorkflowRule UpdateTaskQueueConfig UpdateWorkerConfig
            DeleteActivityExecution DeleteNexusOperationExecution PollWorkflowExecutionTimeSkipping
        """,
        worker="""
            PollWorkflowTaskQueue RespondWorkflowTaskCompleted RespondWorkflowTaskFailed PollActivityTaskQueue
            RecordActivityTaskHeartbeat RecordActivityTaskHeartbeatById RespondActivityTaskCompleted
            RespondActivityTaskCompletedById RespondActivityTaskFailed RespondActivityTaskFailedById
            RespondActivityTaskCanceled RespondActivityTaskCanceledById RespondQueryTaskCompleted
            ResetStickyTaskQueue ShutdownWorker PollNexusTaskQueue RespondNexusTaskCompleted
            RespondNexusTaskFailed RecordWorkerHeartbeat
        """,
    ),
    OPERATOR_SERVICE: _classes(
        read="ListSearchAttributes ListClusters GetNexusEndpoint ListNexusEndpoints",
        admin="""
            AddSearchAttributes RemoveSearchAttributes DeleteNamespace AddOrUpdateRemoteCluster
            RemoveRemoteCluster CreateNexusEndpoint UpdateNexusEndpoint DeleteNexusEndpoint
        """,
    ),
}

# The subject's certificate must name it and nothing else by default: nginx writes the
# verified certificate's subject as RFC 2253 ($ssl_client_s_dn), and the map matches all of it.
DEFAULT_SUBJECT_DN = "CN={subject}"
_NOT_IN_DN = frozenset('"\\;$\n\r\t')


def method_path(service: str, method: str) -> str:
    """The gRPC request path of a method, as the client sends it."""
    return f"/{service}/{method}"


def method_class(path: str) -> MethodClass | None:
    """The class of the method at `path`; None: refused to everyone."""
    service, _, method = path.lstrip("/").rpartition("/")
    return METHODS.get(service, {}).get(method)


def allowed(caller: Caller | None, path: str) -> bool:
    """Whether the gateway lets `caller` (None: a certificate it does not know) call `path`."""
    kind = method_class(path)
    return caller is not None and kind is not None and kind in ALLOWED[caller]


def callers(subjects: Mapping[str, Role], services: Iterable[str]) -> dict[str, Caller]:
    """{subject: caller}: each subject by its role, each service as a service. A name given
    both ways, or two names nginx would not tell apart (its map ignores case), is refused."""
    result: dict[str, Caller] = {}
    seen: dict[str, str] = {}
    named = [(s, Caller(r.value)) for s, r in subjects.items()] + [(s, Caller.SERVICE) for s in services]
    for subject, caller in named:
        check_subject(subject, "gateway")
        other = seen.setdefault(subject.lower(), subject)
        if other != subject or subject in result:
            raise EngineRolesError(f"gateway: subject {subject!r} is named twice (nginx's map ignores case)")
        result[subject] = caller
    return result


def _bucket_for(longest: int) -> int:
    """A power of two holding the longest key and nginx's per-entry overhead (a pointer and a length)."""
    return 1 << (longest + 16).bit_length()


def render_maps(subjects: Mapping[str, Role], services: Iterable[str], dn: str = DEFAULT_SUBJECT_DN) -> str:
    """The nginx `map`s (http context) the gateway's server block reads: $fleetctl_caller
    from the verified certificate's subject, $fleetctl_method_class from the exact request
    path, and $fleetctl_refusal, empty when the call may go on."""
    if dn.count("{subject}") != 1 or dn.count("{") != 1 or dn.count("}") != 1 or any(c in dn for c in _NOT_IN_DN):
        raise EngineRolesError(
            f"gateway: subject DN {dn[:60]!r} must hold {{subject}} once and no quote, '\\', ';' or '$'"
        )
    paths = [method_path(service, m) for service, methods in METHODS.items() for m in methods]
    lines = [
        "# Written by `fleetctl engines gateway-config`; regenerate it, do not edit it.",
        # nginx's default bucket (64 bytes on x86-64) is too small for the method paths.
        f"map_hash_bucket_size {_bucket_for(max(map(len, paths)))};",
        "",
        "map $ssl_client_s_dn $fleetctl_caller {",
        '    default "";',
    ]
    lines += [f'    "{dn.format(subject=s)}" {c.value};' for s, c in sorted(callers(subjects, services).items())]
    lines += ["}", "", "# The raw request path: a method spelled any other way is refused."]
    lines += ["map $request_uri $fleetctl_method_class {", "    default unclassified;"]
    for service, methods in sorted(METHODS.items()):
        lines += [f"    {method_path(service, m)} {kind.value};" for m, kind in sorted(methods.items())]
    lines += ["}", "", 'map "$fleetctl_caller:$fleetctl_method_class" $fleetctl_refusal {']
    # Exact entries first, then the patterns in this order: an unknown certificate, then a
    # known one calling above its role ($request_uri is then one of the paths above).
    lines.append('    default "the Temporal gateway: this method is refused to every caller";')
    lines.append('    "~^:" "the Temporal gateway: no role for this client certificate";')
    for kind in MethodClass:
        lines.append(f'    "~:{kind.value}$" "the Temporal gateway: $request_uri needs {NEEDED[kind]}";')
    for caller, kinds in ALLOWED.items():
        lines += [f'    "{caller.value}:{kind.value}" "";' for kind in sorted(kinds, key=list(MethodClass).index)]
    return "\n".join([*lines, "}", ""])


# The refusal log's line (deploy/nginx/temporal-gateway.conf, log_format fleetctl_refusal): nginx's
# own variables, JSON-escaped by nginx.
REFUSAL_LOG_FIELDS = ("msec", "request_id", "subject_dn", "caller", "method", "class", "reason")
# The least caller a class needs, as the audit trail names roles.
NEEDED_CALLER: dict[MethodClass, str] = {
    kind: next(c for c in Caller if kind in ALLOWED[c]).value for kind in MethodClass
}


class RefusalLogError(ValueError):
    """A refusal log line fleetctl cannot read; one line naming it."""


@dataclass(frozen=True)
class Refusal:
    """One call the gateway answered PERMISSION_DENIED."""

    at: datetime
    request_id: str  # nginx's $request_id: 32 hex digits, one per request
    subject: str  # the subject the certificate names (its whole DN if it names none as --subject-dn does)
    caller: str  # the role the gateway held for it: viewer, operator, admin, service; "" unknown
    method: str  # the gRPC path asked
    needed: str  # the least caller that may call it; "" refused to everyone
    reason: str  # the refusal the client was sent


def parse_refusals(text: str, dn: str = DEFAULT_SUBJECT_DN, where: str = "refusal log") -> list[Refusal]:
    """Each line of the gateway's refusal log; RefusalLogError naming the first line that is
    not one (nothing is taken from a log that holds one)."""
    prefix, _, suffix = dn.partition("{subject}")
    refusals = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            fields = json.loads(line)
            missing = [f for f in REFUSAL_LOG_FIELDS if not isinstance(fields.get(f), str)]
            at = datetime.fromtimestamp(float(fields["msec"]), UTC) if not missing else None
        except (ValueError, TypeError, AttributeError, OverflowError):
            raise RefusalLogError(f"{where}: line {number}: not a line of the gateway's refusal log") from None
        if missing or at is None or len(fields["request_id"]) != 32:
            raise RefusalLogError(f"{where}: line {number}: not a line of the gateway's refusal log")
        subject_dn = fields["subject_dn"]
        inner = subject_dn[len(prefix) : len(subject_dn) - len(suffix)]
        named = subject_dn.startswith(prefix) and subject_dn.endswith(suffix) and bool(SUBJECT_RE.match(inner))
        kind = method_class(fields["method"])
        refusals.append(
            Refusal(
                at=at,
                request_id=fields["request_id"],
                subject=inner if named else subject_dn,
                caller=fields["caller"],
                method=fields["method"],
                needed=NEEDED_CALLER[kind] if kind is not None else "",
                reason=fields["reason"],
            )
        )
    return refusals
