"""manage.py createtenant SLUG --owner USER: a tenant with its owner (the user is created if new)."""
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from core.context import Context
from core.errors import ServiceError
from tenants.services import create_tenant


class Command(BaseCommand):
    help = "Create a tenant owned by USER."

    def add_arguments(self, parser):
        parser.add_argument("slug")
        parser.add_argument("--owner", required=True)
        parser.add_argument("--name", default="")

    def handle(self, slug, owner, name, **options):
        user, created = get_user_model().objects.get_or_create(username=owner)
        if created:
            user.set_unusable_password()
            user.save()
        try:
            tenant = create_tenant(ctx=Context(actor="cli:createtenant"), slug=slug, owner=user,
                                   name=name)
        except ServiceError as exc:
            raise CommandError(exc.message) from exc
        self.stdout.write(f"tenant {tenant.slug} created, owner {user.username}")
