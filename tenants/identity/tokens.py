"""Local validation of the provider's JWTs: signature by a key of its key set, iss, audience,
exp, nbf and iat, and what kind of token it is (docs/identity.md, "Which tokens the API
accepts"). No call to the provider per token; each refusal names its reason."""
import jwt

from . import config
from .jwks import UnknownKey, keys

NOT_ACCESS_TOKENS = {"id", "refresh", "offline", "logout"}  # Keycloak's `typ` claim
ACCESS_TYPES = {"at+jwt", "application/at+jwt"}  # RFC 9068 section 2.1, the JOSE header
PLAIN_TYPES = {"", "jwt", "application/jwt"}  # a header that says nothing of the token's use
KEY_TYPES = {"RS": "RSA", "PS": "RSA", "ES": "EC", "Ed": "OKP", "HS": "oct"}  # RFC 7518 3.1


class TokenRejected(Exception):
    def __init__(self, code: str, reason: str):
        super().__init__(reason)
        self.code, self.reason = code, reason


class Unavailable(TokenRejected):
    """Not the token's fault: the provider cannot be asked now (down, hanging, or this web server
    has as many questions out to it as it allows). The API answers 503 with Retry-After."""

    def __init__(self, reason: str, *, code: str = "provider_unavailable", retry_after: int = 5):
        super().__init__(code, reason)
        self.retry_after = retry_after


def _key(kid: str | None, stale: jwt.PyJWK | None = None) -> jwt.PyJWK:
    try:
        return keys.key_for(kid, stale=stale)
    except UnknownKey:
        raise TokenRejected(
            "unknown_key", f"the token is signed with a key the provider does not publish "
            f"(kid {kid!r})") from None
    except config.ProviderUnavailable as exc:
        raise Unavailable(str(exc)) from None


def _decode(token: str) -> tuple[dict, dict]:
    try:
        header = jwt.get_unverified_header(token)
    except jwt.InvalidTokenError as exc:  # not a JWT, or a header field of the wrong type
        raise TokenRejected("malformed_token", f"the token is not a well-formed JWT: {exc}") \
            from None
    alg = header.get("alg")
    if alg not in config.get("MAAS_OIDC_ALGORITHMS"):
        raise TokenRejected("bad_algorithm", f"the signing algorithm {alg!r} is not accepted")
    key = _key(header.get("kid"))
    try:
        return header, _verify(token, alg, key)
    except TokenRejected as exc:
        if exc.code not in ("bad_signature", "key_mismatch"):
            raise
        # Perhaps the provider regenerated the key under the same kid: one refetch of the key
        # set (at most every MAAS_OIDC_JWKS_MIN_REFRESH seconds), then one more try.
        fresh = _key(header.get("kid"), stale=key)
        if fresh is key:
            raise
    return header, _verify(token, alg, fresh)


def _verify(token: str, alg: str, key: jwt.PyJWK) -> dict:
    """The claims of a token whose signature `key` verifies, or TokenRejected."""
    if KEY_TYPES.get(alg[:2]) != key.key_type:
        raise TokenRejected("key_mismatch", f"the token's algorithm {alg} does not fit its key "
                                            f"(kid {key.key_id!r}, kty {key.key_type})")
    expected_issuer = config.issuer()
    try:
        return jwt.decode(
            token, key=key.key, algorithms=[alg], issuer=expected_issuer,
            leeway=config.get("MAAS_OIDC_LEEWAY"),
            options={"require": ["exp", "iss", "sub"], "verify_aud": False},
        )
    except jwt.InvalidKeyError as exc:  # the right type, another curve (ES384 with a P-256 key)
        raise TokenRejected("key_mismatch", f"the token's algorithm {alg} does not fit its key: "
                                            f"{exc}") from None
    except jwt.InvalidSignatureError:
        raise TokenRejected("bad_signature", "the token's signature does not verify") from None
    except jwt.ExpiredSignatureError:
        raise TokenRejected("token_expired", "the token has expired (exp)") from None
    except jwt.ImmatureSignatureError:
        raise TokenRejected("token_not_yet_valid",
                            "the token is not valid yet (nbf or iat in the future)") from None
    except jwt.InvalidIssuerError:
        raise TokenRejected("wrong_issuer",
                            f"the token was not issued by {expected_issuer} (iss)") from None
    except jwt.MissingRequiredClaimError as exc:
        raise TokenRejected("missing_claim", f"the token has no {exc.claim!r} claim") from None
    except jwt.InvalidTokenError as exc:
        raise TokenRejected("invalid_token", f"the token is invalid: {exc}") from None


def audience_of(claims: dict) -> list[str]:
    aud = claims.get("aud")
    return [aud] if isinstance(aud, str) else [a for a in aud or [] if isinstance(a, str)]


def check_audience(claims: dict, accepted: list[str], *, by_client_id: bool = True) -> None:
    """The token is for one of `accepted`: by `aud`, by `azp` (the OpenID party it was issued
    to) or, for access tokens, by RFC 9068's `client_id` (a token whose `aud` is the API's URL,
    issued to MaaS)."""
    auds = audience_of(claims)
    if set(auds) & set(accepted) or claims.get("azp") in accepted \
            or (by_client_id and claims.get("client_id") in accepted):
        return
    shown = auds or [c for c in (claims.get("azp"), claims.get("client_id")) if c]
    raise TokenRejected(
        "wrong_audience",
        f"the token is for {shown!r}, not for {' or '.join(accepted)} (aud, azp or client_id)")


def token_kind(header: dict, claims: dict) -> tuple[bool, str]:
    """(is an access token, why): the first row of the decision table that matches.

    Providers mark their tokens differently, so the signals are read in order of how much
    they say: RFC 9068's JOSE `typ`, then Keycloak's `typ` claim, then what only an ID token
    carries (OpenID Connect Core 3.1.3.6: nonce, at_hash, c_hash), then the shape of an ID
    token (audience this client, and neither scope nor client_id, which access tokens carry).
    """
    jose_typ = str(header.get("typ") or "").lower()
    if jose_typ in ACCESS_TYPES:
        return True, "an RFC 9068 access token (typ at+jwt)"
    if jose_typ not in PLAIN_TYPES:
        return False, f"a {header['typ']} token is not an access token (typ header)"
    claim_typ = str(claims.get("typ") or "")
    if claim_typ.lower() == "bearer":
        return True, "a Keycloak access token (typ Bearer)"
    if claim_typ.lower() in NOT_ACCESS_TOKENS:
        return False, f"a {claim_typ} token is not an access token (typ claim)"
    for marker in ("nonce", "at_hash", "c_hash"):
        if marker in claims:
            return False, f"an ID token is not an access token (it has {marker})"
    if config.client_id() in audience_of(claims) and not any(
            claims.get(name) for name in ("scope", "scp", "client_id")):
        return False, ("an ID token is not an access token (its audience is this client and it "
                       "has no scope nor client_id)")
    return True, "an access token without a type (scope or client_id, no ID token claims)"


def validate_access_token(token: str) -> dict:
    """The claims of an API access token from the configured provider, or TokenRejected."""
    header, claims = _decode(token)
    check_audience(claims, config.audiences())
    accepted, why = token_kind(header, claims)
    if not accepted:
        raise TokenRejected("not_an_access_token", why)
    return claims


def is_jwt(token: str) -> bool:
    """Whether the token is a JWS in compact form (else it is opaque: introspection)."""
    if token.count(".") != 2:
        return False
    try:
        jwt.get_unverified_header(token)
    except jwt.DecodeError:
        return False
    except jwt.InvalidTokenError:  # a JWT with a bad header field (a `kid` that is no string)
        pass  # refused with the reason by _decode
    return True


def validate_id_token(token: str, nonce: str | None) -> dict:
    """The claims of an ID token issued to this client for this sign-in (nonce)."""
    _, claims = _decode(token)
    check_audience(claims, [config.client_id()], by_client_id=False)
    if claims.get("nonce") != nonce:
        raise TokenRejected("bad_nonce", "the ID token's nonce is not this sign-in's")
    return claims


def validate_refreshed_id_token(token: str, subject: str) -> dict:
    """The claims of an ID token from a refresh-token grant: same checks, for the same subject
    (it carries the first sign-in's nonce, if any, which this side does not keep)."""
    _, claims = _decode(token)
    check_audience(claims, [config.client_id()], by_client_id=False)
    if claims.get("sub") != subject:
        raise TokenRejected("wrong_subject", "the refreshed ID token is for another subject")
    return claims
