"""Who a request to the front door comes from: the subject of a client certificate nginx
verified (mTLS), or of an OIDC token verified here against the issuer's published keys
(JWKS, fetched and cached by PyJWT). Nothing the caller says about itself is taken."""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import unquote

import jwt
from cryptography import x509
from cryptography.x509.oid import NameOID

from fleetctl.authz.roles import SUBJECT_RE

# The algorithms an issuer's keys sign with; never "none", never an HMAC (a shared secret
# would let whoever verifies also sign).
ALGORITHMS = ["RS256", "RS384", "RS512", "ES256", "ES384", "PS256"]


class NotAuthenticated(ValueError):
    """The request proves no subject; the message is one line, safe to return."""


@dataclass(frozen=True)
class Identity:
    subject: str
    groups: tuple[str, ...] = ()
    via: str = ""  # "certificate" or "token"


def _checked(subject: str, where: str) -> str:
    if not SUBJECT_RE.match(subject):
        raise NotAuthenticated(f"{where} names {subject[:64]!r}, not a subject fleetctl records (name or name@where)")
    return subject


def from_certificate(escaped_pem: str) -> Identity:
    """The subject of the client certificate nginx verified (`$ssl_client_escaped_cert`): its
    common name."""
    try:
        cert = x509.load_pem_x509_certificate(unquote(escaped_pem).encode())
    except ValueError:
        raise NotAuthenticated("the client certificate cannot be read") from None
    names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    if len(names) != 1:
        raise NotAuthenticated("the client certificate must have exactly one common name")
    return Identity(_checked(str(names[0].value), "the client certificate"), via="certificate")


@dataclass
class OidcVerifier:
    """Tokens of one issuer, for one audience, signed by a key in the issuer's JWKS."""

    issuer: str
    jwks_url: str
    audience: str
    subject_claim: str = "sub"
    groups_claim: str = "groups"
    _keys: jwt.PyJWKClient = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._keys = jwt.PyJWKClient(self.jwks_url, cache_keys=True, lifespan=300, timeout=10)

    def verify(self, token: str) -> Identity:
        try:
            key = self._keys.get_signing_key_from_jwt(token)
            claims = jwt.decode(
                token,
                key.key,
                algorithms=ALGORITHMS,
                audience=self.audience,
                issuer=self.issuer,
                options={"require": ["exp", "iss", "aud", self.subject_claim]},
            )
        except jwt.PyJWKClientConnectionError:
            raise NotAuthenticated("the issuer's keys cannot be fetched") from None
        except jwt.PyJWTError as exc:
            raise NotAuthenticated(f"the token is refused: {exc}") from None
        groups = claims.get(self.groups_claim, [])
        if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
            raise NotAuthenticated(f"the token's {self.groups_claim!r} claim is not a list of names")
        subject = claims[self.subject_claim]
        if not isinstance(subject, str):
            raise NotAuthenticated(f"the token's {self.subject_claim!r} claim is not a name")
        return Identity(_checked(subject, "the token"), tuple(groups), via="token")
