"""manage.py rebuild_projections [--check]: replay the config log into the projections
(address spaces, addresses, users) and the tenants' members, roles and quotas."""
from django.core.management.base import BaseCommand, CommandError

from config_service.rebuild import rebuild


class Command(BaseCommand):
    help = ("Rebuild address spaces, addresses and users, and tenants' members, roles and "
            "quotas, from the config log.")

    def add_arguments(self, parser):
        parser.add_argument("--check", action="store_true",
                            help="only compare with the live projections; change nothing")

    def handle(self, check, **options):
        count, diffs = rebuild(check_only=check)
        for line in diffs[:50]:
            self.stdout.write(line)
        verb = "compared" if check else "rebuilt"
        self.stdout.write(f"{count} events replayed; projections {verb}: {len(diffs)} differences")
        if check and diffs:
            raise CommandError("live projections differ from the log")
