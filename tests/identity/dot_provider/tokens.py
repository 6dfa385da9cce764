"""RFC 9068 JWT access tokens, as DOT's ACCESS_TOKEN_GENERATOR: the minimum the RFC asks
(iss, sub, aud, client_id, exp, iat, jti, scope), typ at+jwt, signed with the active OIDC key
under the kid DOT's JWKS shows. No groups, no names: a resource server must not need them."""
import time
import uuid

import jwt
from django.conf import settings
from oauth2_provider.utils import jwk_from_pem


def rfc9068_token(request, refresh_token=False):
    pem = settings.OAUTH2_PROVIDER["OIDC_RSA_PRIVATE_KEY"]
    now = int(time.time())
    claims = {
        "iss": settings.CONFIG["issuer"], "sub": str(request.user.pk),
        "aud": settings.CONFIG["api_audience"], "client_id": request.client.client_id,
        "iat": now, "exp": now + settings.OAUTH2_PROVIDER["ACCESS_TOKEN_EXPIRE_SECONDS"],
        "jti": str(uuid.uuid4()), "scope": " ".join(request.scopes),
    }
    return jwt.encode(claims, pem, algorithm="RS256",
                      headers={"typ": "at+jwt", "kid": jwk_from_pem(pem).thumbprint()})
