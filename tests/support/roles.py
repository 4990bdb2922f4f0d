"""A roles file (fleetctl.authz.roles) from `subject: role` lines, each role for every fleet."""

from __future__ import annotations


def as_roles_file(lines: str) -> str:
    """`alice: viewer` lines as the roles file's `subjects:` section; other YAML (a list, a
    broken line) is carried under it as it is, so the file's own refusals are tested."""
    body = "".join(f"  {line}\n" for line in lines.splitlines() if line.strip())
    return f"subjects:\n{body}" if body else "subjects: {}\n"
