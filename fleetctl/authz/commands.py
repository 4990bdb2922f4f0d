"""Which role each command of the CLI needs, as data: every command of the Typer app is
classified here (tests/authz walks the app and fails on one that is not).

    read      run where it is typed, with the reader's own (read-only) credentials
    write     sent to the front door, which runs it for a subject holding the role
    process   a long-running process or a host tool (a worker, the agent, the intake, the
              front door itself; the schema, retention, the intake's credential file): run
              where it is deployed, with that host's credentials, which only admins hold;
              the front door never runs one (what they write is that host's, an archive or
              a hash file, not something to send back)

A command that writes only with a flag (`reconcile --fix`) is a read without it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from fleetctl.authz.roles import Role


class Kind(str, Enum):
    READ = "read"
    WRITE = "write"
    PROCESS = "process"


@dataclass(frozen=True)
class Rule:
    kind: Kind
    role: Role
    writes_with: tuple[str, ...] = ()  # a read unless one of these options is given

    def needs(self, args: Sequence[str]) -> tuple[Kind, Role]:
        """(kind, role) of the command run with `args`."""
        if self.writes_with and not any(arg.split("=", 1)[0] in self.writes_with for arg in args):
            return Kind.READ, Role.VIEWER
        return self.kind, self.role


READ = Rule(Kind.READ, Role.VIEWER)
OPERATE = Rule(Kind.WRITE, Role.OPERATOR)
ADMINISTER = Rule(Kind.WRITE, Role.ADMIN)
PROCESS = Rule(Kind.PROCESS, Role.ADMIN)

# The command path (`node drain`) -> what it needs. The roles of the authorization design:
# operator drains, undrains, admits, rechecks, sends events, restarts jobs, decides RMAs;
# admin rolls firmware out, sets automation and schedules, retires, imports nodes; the
# admin's host tools (credentials, retention, the schema) are processes.
COMMANDS: dict[str, Rule] = {
    "demo": PROCESS,
    "worker": PROCESS,
    "config": READ,
    "reconcile": Rule(Kind.WRITE, Role.OPERATOR, writes_with=("--fix", "--include-owner")),
    "report": READ,
    "node import": ADMINISTER,
    "node list": READ,
    "node show": READ,
    "node history": READ,
    "node drain": OPERATE,
    "node undrain": OPERATE,
    "node rma": OPERATE,
    "node retire": ADMINISTER,
    "node admit": OPERATE,
    "node recheck": OPERATE,
    "node event": OPERATE,
    "node prolog": PROCESS,  # Slurm runs it on the node, before a job
    "node epilog": PROCESS,  # and this one after it
    "node release-gpu": OPERATE,
    "check suites": READ,
    "check profiles": READ,
    "check xid-policy": READ,
    "check list": READ,
    "check parse": READ,
    "fleet status": READ,
    "fleet resume-automation": ADMINISTER,
    "schedule create": ADMINISTER,
    "schedule list": READ,
    "schedule pause": ADMINISTER,
    "schedule unpause": ADMINISTER,
    "schedule delete": ADMINISTER,
    "topology slurm-conf": READ,
    "spares list": READ,
    "spares fill": OPERATE,
    "sim fleet": READ,  # writes an inventory file where it runs, nothing of the fleet
    "sim inject": OPERATE,
    "sim clear": OPERATE,
    "sim faults": READ,
    "dev server": PROCESS,
    "temporal setup": PROCESS,
    "temporal roll-forward": ADMINISTER,  # an upgrade step: every node and guard onto the new code
    "db upgrade": PROCESS,
    "db prune": PROCESS,
    "job list": READ,
    "job show": READ,
    "job restart": OPERATE,
    "job submit": OPERATE,
    "job checkpoint": OPERATE,
    "job sync": OPERATE,
    "job gate-serve": PROCESS,  # the Kubernetes pre-job gate: a long-running process
    "runbook list": READ,
    "runbook show": READ,
    "runbook validate": READ,
    "runbook run": OPERATE,
    "runbook runs": READ,
    "rma list": READ,
    "rma show": READ,
    "rma close": OPERATE,
    "rma confirm": OPERATE,
    "rma reject": OPERATE,
    "firmware status": READ,
    "firmware report": ADMINISTER,
    "firmware baseline set": ADMINISTER,
    "firmware rollout": ADMINISTER,
    "firmware rollout resume": ADMINISTER,
    "firmware rollout abort": ADMINISTER,
    "firmware rollout list": READ,
    "metrics serve": PROCESS,
    "agent": PROCESS,
    "events serve": PROCESS,
    "events credential issue": PROCESS,  # edits the intake host's hash file
    "events credential revoke": PROCESS,
    "api serve": PROCESS,
    "auth whoami": READ,
    "audit": READ,
    # The engines' own controls: run by an admin on a host that holds the engines' owner
    # credentials (PostgreSQL's role creation; a file nginx includes).
    "engines grant-roles": PROCESS,
    "engines gateway-config": READ,
    # Cluster validation holds nodes as a sweep does: an operator's act, like a recheck.
    "validate": OPERATE,
    "topology fabric": READ,
    # On the Temporal gateway's host: its refusal log into the audit trail.
    "engines import-refusals": PROCESS,
}


def rule_of(path: str) -> Rule | None:
    return COMMANDS.get(path)
