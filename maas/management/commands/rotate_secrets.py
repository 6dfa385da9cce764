"""manage.py rotate_secrets: new random credentials for the data plane's internal users.

Rotates the routers' logins on the spaces' broker vhosts (and, on Kubernetes, the spaces'
broker admin passwords and Erlang cookies), then wakes every affected space so its agents carry
the new values to RabbitMQ and the router. `--router-admin` also replaces the router management
password kept in `var/secrets/` (a `make run` installation); the platform must then restart.
"""
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from config_service.models import AddressSpace
from maas.env import env
from maas.local_secrets import replace_installation_secret
from workers import credentials
from workers.dispatch import notify_space


class Command(BaseCommand):
    help = "Rotate the internal credentials of routers and brokers (docs/security.md)."

    def add_arguments(self, parser):
        parser.add_argument("--space", help="only this space, as <tenant>.<space>")
        parser.add_argument("--router-admin", action="store_true",
                            help="also replace the router management password in var/secrets/")
        parser.add_argument("--kubernetes-brokers", action="store_true",
                            help="also the Kubernetes brokers' admin passwords and Erlang "
                                 "cookies; their pods must then be restarted, one at a time")

    def handle(self, space=None, router_admin=False, kubernetes_brokers=False, **options):
        spaces = AddressSpace.objects.all()
        if space is not None:
            tenant, _, name = space.partition(".")
            spaces = spaces.filter(tenant__slug=tenant, name=name)
            if not spaces.exists():
                raise CommandError(f"no address space {space} (give <tenant>.<space>)")
            rotated = credentials.rotate(credentials.router_broker_name(space), exact=True)
        else:
            # Routers pick up a new broker login at once; a running broker keeps the admin
            # password and Erlang cookie it booted with, so those rotate only when asked.
            rotated = credentials.rotate(credentials.router_broker_name(""))
            if kubernetes_brokers:
                rotated += credentials.rotate("broker-admin:") + credentials.rotate(
                    "erlang-cookie:")
        for uid in spaces.values_list("uid", flat=True):  # rare: wake them all
            notify_space(uid)
        self.stdout.write(f"rotated {len(rotated)} credentials; the agents apply them now")
        if router_admin:
            if env("MAAS_ROUTER_ADMIN_PASSWORD"):
                raise CommandError("MAAS_ROUTER_ADMIN_PASSWORD is set: rotate it where it is "
                                   "set (e.g. its Kubernetes secret), then restart")
            replace_installation_secret(settings.MAAS_SECRETS_DIR, "router-admin-password")
            self.stdout.write("router management password replaced: restart the platform "
                              "(make run) so the router and the agents use it")
