"""Local validation of the provider's JWTs: signature by a key of its key set, iss, aud or azp,
exp, nbf and iat. No call to the provider per token; each refusal names its reason."""
import jwt

from . import config
from .jwks import UnknownKey, keys

NOT_ACCESS_TOKENS = {"ID", "Refresh", "Offline", "Logout"}  # Keycloak's `typ` claim


class TokenRejected(Exception):
    def __init__(self, code: str, reason: str):
        super().__init__(reason)
        self.code, self.reason = code, reason


def _decode(token: str) -> tuple[dict, dict]:
    try:
        header = jwt.get_unverified_header(token)
    except jwt.DecodeError:
        raise TokenRejected("malformed_token", "the token is not a JWT") from None
    alg = header.get("alg")
    if alg not in config.get("MAAS_OIDC_ALGORITHMS"):
        raise TokenRejected("bad_algorithm", f"the signing algorithm {alg!r} is not accepted")
    try:
        key = keys.key_for(header.get("kid"))
    except UnknownKey:
        raise TokenRejected(
            "unknown_key", f"the token is signed with a key the provider does not publish "
            f"(kid {header.get('kid')!r})") from None
    except config.ProviderUnavailable as exc:
        raise TokenRejected("provider_unavailable", str(exc)) from None
    expected_issuer = config.issuer()
    try:
        claims = jwt.decode(
            token, key=key.key, algorithms=[alg], issuer=expected_issuer,
            leeway=config.get("MAAS_OIDC_LEEWAY"),
            options={"require": ["exp", "iss", "sub"], "verify_aud": False},
        )
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
    return header, claims


def _check_audience(claims: dict, accepted: list[str]) -> None:
    aud = claims.get("aud")
    auds = [aud] if isinstance(aud, str) else list(aud or [])
    if set(auds) & set(accepted) or claims.get("azp") in accepted:
        return
    raise TokenRejected(
        "wrong_audience",
        f"the token is for {auds or claims.get('azp')!r}, not for {' or '.join(accepted)} "
        "(aud/azp)")


def validate_access_token(token: str) -> dict:
    """The claims of an API access token from the configured provider, or TokenRejected."""
    _, claims = _decode(token)
    _check_audience(claims, config.audiences())
    if claims.get("typ") in NOT_ACCESS_TOKENS:
        raise TokenRejected("not_an_access_token", f"a {claims['typ']} token is not an access token")
    return claims


def validate_id_token(token: str, nonce: str | None) -> dict:
    """The claims of an ID token issued to this client for this sign-in (nonce)."""
    _, claims = _decode(token)
    _check_audience(claims, [config.client_id()])
    if claims.get("nonce") != nonce:
        raise TokenRejected("bad_nonce", "the ID token's nonce is not this sign-in's")
    return claims


def validate_refreshed_id_token(token: str, subject: str) -> dict:
    """The claims of an ID token from a refresh-token grant: same checks, for the same subject
    (it carries the first sign-in's nonce, if any, which this side does not keep)."""
    _, claims = _decode(token)
    _check_audience(claims, [config.client_id()])
    if claims.get("sub") != subject:
        raise TokenRejected("wrong_subject", "the refreshed ID token is for another subject")
    return claims
