"""DRF authentication by personal access token: `Authorization: Bearer maas_pat_...`."""
from django.utils import timezone
from rest_framework import authentication, exceptions

from .identity.authentication import bearer_challenge
from .models import PersonalAccessToken


class PersonalAccessTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode("latin-1")
        scheme, _, token = header.partition(" ")
        if scheme != self.keyword or not token.startswith(PersonalAccessToken.PREFIX):
            return None  # not ours: OIDC bearer tokens are handled by another class
        pat = (
            PersonalAccessToken.objects.select_related("user")
            .filter(digest=PersonalAccessToken.digest_of(token.strip()), revoked=False)
            .first()
        )
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
