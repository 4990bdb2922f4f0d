"""Every comparison of a secret in the product code goes through `hmac.compare_digest`: `==`
stops at the first byte that differs, so how long a refusal takes tells a caller how much of
a guessed token was right. The scan reads the source (as test_architecture does the tree):
an `==` or `!=` whose operands name a secret (a token, a password, a credential, an
Authorization header, a hash or digest of one) is an offender, wherever it is added."""

from __future__ import annotations

import ast
import itertools
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PRODUCT = ("fleetctl", "workflows", "checks")
# The words of an identifier that say it holds a secret (or what a secret is checked by).
SECRET_WORDS = frozenset(
    {"secret", "token", "password", "passwd", "credential", "credentials", "authorization", "bearer", "digest", "hash"}
)
_WORD = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")  # token_hash -> token, hash; webhookToken -> webhook, Token


def _is_literal(node: ast.expr) -> bool:
    """A literal in the source ("Bearer", "", None) is no secret: comparing with it tests a
    shape, and leaks nothing a reader of the code does not know."""
    try:
        ast.literal_eval(node)
    except ValueError:
        return False
    return True


def _names(node: ast.AST) -> list[str]:
    """The identifiers an operand reads, but not inside len(): a length is no secret."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "len":
        return []
    own = [node.id] if isinstance(node, ast.Name) else [node.attr] if isinstance(node, ast.Attribute) else []
    return own + [name for child in ast.iter_child_nodes(node) for name in _names(child)]


def _names_a_secret(name: str) -> bool:
    return any(word.lower() in SECRET_WORDS for word in _WORD.findall(name))


def secret_comparisons(tree: ast.AST) -> list[str]:
    """`line N: a == b` for each `==`/`!=` between two non-literal operands one of which names a secret."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        for op, (left, right) in zip(node.ops, itertools.pairwise(operands), strict=True):
            if not isinstance(op, ast.Eq | ast.NotEq) or _is_literal(left) or _is_literal(right):
                continue
            if any(_names_a_secret(name) for name in _names(left) + _names(right)):
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


@pytest.mark.parametrize(
    "source",
    [
        # The operator token, as Credentials.caller would compare it without compare_digest.
        'authorization.encode(errors="replace") == self._operator',
        "authorization != expected",
        "token_hash(token) == stored",
        "self._by_hash[digest] == node_hash",
        "request.headers['X-Webhook-Secret'] == settings.webhook_secret",
        "bmc_password == given",
        "x == y == api_token",
        "webhookToken != sent",
    ],
)
def test_the_scan_finds_a_secret_compared_with_eq(source: str) -> None:
    assert secret_comparisons(ast.parse(source))


@pytest.mark.parametrize(
    "source",
    [
        'hmac.compare_digest(authorization.encode(errors="replace"), self._operator)',
        'scheme != "Bearer"',
        'token == ""',
        "stored_hash is None",
        "len(token) == len(other)",
        "len(tokens) != len(columns)",  # a parser's words (checks/nccl.py), not a credential
        "node == other_node",
    ],
)
def test_the_scan_leaves_constant_time_literal_and_length_comparisons(source: str) -> None:
    assert secret_comparisons(ast.parse(source)) == []


def test_no_secret_in_the_product_code_is_compared_with_eq() -> None:
    sources = sorted(p for package in PRODUCT for p in (REPO / package).rglob("*.py"))
    assert any(p.name == "credentials.py" for p in sources)  # the intake's credentials are scanned
    offenders = {
        p.relative_to(REPO).as_posix(): found
        for p in sources
        if (found := secret_comparisons(ast.parse(p.read_text(), str(p))))
    }
    assert offenders == {}, "compare secrets with hmac.compare_digest"
