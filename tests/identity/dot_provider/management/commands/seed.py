"""Users, groups and the `maas` client from the config: run at each start and on set_users.
A user left out is made inactive and loses their tokens (no sign-in, refresh or userinfo)."""
from django.conf import settings
from django.contrib.auth.models import Group, User
from django.core.management.base import BaseCommand
from oauth2_provider.models import (
    get_access_token_model,
    get_application_model,
    get_refresh_token_model,
)

from tests.identity.dot_provider.validator import ROLE


class Command(BaseCommand):
    def handle(self, **options):
        config = settings.CONFIG
        Application = get_application_model()
        app = Application.objects.filter(client_id=config["client_id"]).first()
        if app is None:
            Application.objects.create(
                client_id=config["client_id"], client_secret=config["client_secret"],
                name="MaaS", client_type=Application.CLIENT_CONFIDENTIAL,
                authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE,
                redirect_uris=config["redirect_uri"],
                post_logout_redirect_uris=config["post_logout_redirect_uri"],
                algorithm=Application.RS256_ALGORITHM, skip_authorization=True)
        listed = set()
        for entry in config["users"]:
            user, _ = User.objects.get_or_create(username=entry["username"])
            user.email = entry.get("email") or f"{entry['username']}@example.test"
            user.is_active = True
            user.set_password(entry["password"])
            user.save()
            # Plain group names, as most providers have them: no leading slash.
            names = [g.lstrip("/") for g in entry.get("groups", [])]
            names += [f"{ROLE}{r}" for r in entry.get("roles", [])]
            user.groups.set([Group.objects.get_or_create(name=n)[0] for n in names])
            listed.add(user.pk)
        # Disabling a user in DOT leaves their tokens valid; an operator revokes them too.
        gone = User.objects.exclude(pk__in=listed)
        AccessToken, RefreshToken = get_access_token_model(), get_refresh_token_model()
        RefreshToken.objects.filter(user__in=gone).delete()
        AccessToken.objects.filter(user__in=gone).delete()
        gone.update(is_active=False)
