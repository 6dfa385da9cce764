"""manage.py apitoken USER: issue a personal access token for the API (printed once)."""
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from tenants.models import PersonalAccessToken


class Command(BaseCommand):
    help = "Issue a personal access token for USER; use it as 'Authorization: Bearer <token>'."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--name", default="default")

    def handle(self, username, name, **options):
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"no user {username}")
        _, token = PersonalAccessToken.issue(user, name)
        self.stdout.write(token)
