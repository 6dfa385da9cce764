"""DRF authentication by personal access token: `Authorization: Bearer maas_pat_...`."""
from functools import cache

from django.contrib.auth import get_user_model
from django.db import connection
from django.utils import timezone
from rest_framework import authentication, exceptions

from core.rows import Columns, fetch

from .identity.authentication import bearer_challenge
from .models import PersonalAccessToken


@cache
def _token_statement() -> tuple[str, Columns, Columns]:
    token, user = Columns(PersonalAccessToken, "k"), Columns(get_user_model(), "u")
    quote = connection.ops.quote_name
    sql = (f"SELECT {token.sql}, {user.sql} FROM {quote(PersonalAccessToken._meta.db_table)} k "
           f"JOIN {quote(get_user_model()._meta.db_table)} u "
           f"ON u.{quote(get_user_model()._meta.pk.column)} = k.user_id "
           "WHERE k.digest = %s AND NOT k.revoked")
    return sql, token, user


def _live_token(digest: str) -> PersonalAccessToken | None:
    """The unrevoked token of this digest, with its user: by hand, as every API call asks it
    (core.rows says why)."""
    sql, token, user = _token_statement()
    rows = fetch(sql, [digest])
    if not rows:
        return None
    pat, at = token.take(rows[0])
    PersonalAccessToken.user.field.set_cached_value(pat, user.take(rows[0], at)[0])
    return pat


class PersonalAccessTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode("latin-1")
        scheme, _, token = header.partition(" ")
        if scheme != self.keyword or not token.startswith(PersonalAccessToken.PREFIX):
            return None  # not ours: OIDC bearer tokens are handled by another class
        pat = _live_token(PersonalAccessToken.digest_of(token.strip()))
        if pat is None or not pat.user.is_active:
            raise exceptions.AuthenticationFailed("Invalid or revoked personal access token.")
        # Touch last_used_at at most once a minute: no write on every request.
        now = timezone.now()
        if pat.last_used_at is None or (now - pat.last_used_at).total_seconds() > 60:
            PersonalAccessToken.objects.filter(pk=pat.pk).update(last_used_at=now)
        request.auth_actor = f"token:{pat.name}:{pat.user.get_username()}"
        return pat.user, pat

    def authenticate_header(self, request):
        return bearer_challenge(request)
