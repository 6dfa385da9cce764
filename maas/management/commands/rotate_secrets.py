"""manage.py rotate_secrets: new random credentials for the data plane's internal users.

Rotates the routers' logins on the spaces' broker vhosts (and, on Kubernetes, the spaces'
broker admin passwords and Erlang cookies), then wakes every affected space so its agents carry
the new values to RabbitMQ and the router. `--router-admin` also replaces the router management
password kept in `var/secrets/` (a `make run` installation); the platform must then restart.

`--internal-ca` rotates the internal CA instead, and nothing else: a new CA signs from then on,
the old one stays in every trust bundle. On Kubernetes every standard space is woken so the
infra controller re-signs its certificates once its pods trust the new CA (they roll twice); on
one machine (MAAS_INTERNAL_TLS_DIR) the platform's next start and deploy/local/services.sh sign
theirs again. `--internal-ca-finish` drops the old CA once nothing it signed is left (it says
what still is), on Kubernetes re-signing the auth service's certificate on the way; it may have
to be run again.
"""
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from config_service.models import AddressSpace
from maas.env import env
from maas.local_secrets import replace_installation_secret
from workers import credentials
from workers.dispatch import notify_space
from workers.infra.backend import backend


class Command(BaseCommand):
    help = "Rotate the internal credentials of routers and brokers (docs/security.md)."

    def add_arguments(self, parser):
        parser.add_argument("--space", help="only this space, as <tenant>.<space>")
        parser.add_argument("--router-admin", action="store_true",
                            help="also replace the router management password in var/secrets/")
        parser.add_argument("--kubernetes-brokers", action="store_true",
                            help="also the Kubernetes brokers' admin passwords and Erlang "
                                 "cookies; their pods must then be restarted, one at a time")
        ca = parser.add_mutually_exclusive_group()
        ca.add_argument("--internal-ca", action="store_true",
                        help="only: begin a rotation of the internal CA")
        ca.add_argument("--internal-ca-finish", action="store_true",
                        help="only: drop the old internal CA once nothing it signed is left")

    def handle(self, space=None, router_admin=False, kubernetes_brokers=False,
               internal_ca=False, internal_ca_finish=False, **options):
        if internal_ca or internal_ca_finish:
            return self._internal_ca(finish=internal_ca_finish)
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

    def _internal_ca(self, finish: bool) -> None:
        if backend() != "kubernetes":
            return self._local_internal_ca(finish)
        from workers.infra import internal_ca
        from workers.infra.backend import infra_settings, internal_ca_lock
        from workers.infra.kube import KubernetesClient

        client, namespace = KubernetesClient(), infra_settings().namespace
        try:
            if finish:
                internal_ca.finish_rotation(client, namespace, internal_ca_lock)
            else:
                internal_ca.begin_rotation(client, namespace, internal_ca_lock)
        except internal_ca.RotationError as exc:
            raise CommandError(str(exc)) from exc
        standard = AddressSpace.objects.filter(type="standard")
        for uid in standard.values_list("uid", flat=True):  # rare: wake them all
            notify_space(uid)
        if finish:
            self.stdout.write("the old internal CA left the trust bundles; the spaces' pods "
                              "roll onto the new bundle now")
        else:
            self.stdout.write(
                f"a new internal CA signs from now on, the old one stays trusted; "
                f"{standard.count()} standard spaces re-sign their certificates once their pods "
                f"trust it. Then run rotate_secrets --internal-ca-finish")

    def _local_internal_ca(self, finish: bool) -> None:
        """One machine: the CA in MAAS_INTERNAL_TLS_DIR; its parties re-sign at their next
        start (the platform's) or run (services.sh, RabbitMQ's)."""
        from workers.agents.router import certificates

        directory = settings.MAAS_INTERNAL_TLS_DIR
        try:
            if finish:
                certificates.finish_internal_ca_rotation(directory, _served_by_brokers())
            else:
                certificates.rotate_internal_ca(directory)
        except certificates.RotationError as exc:
            raise CommandError(str(exc)) from exc
        if finish:
            self.stdout.write("the previous internal CA left the trust bundle; restart the "
                              "platform (make run) so that no process trusts it any more")
        else:
            self.stdout.write(
                f"a new internal CA signs from now on ({directory}/ca.pem), the previous one "
                f"stays trusted. Restart the platform (make run: its routers and relays sign "
                f"their certificates again), run deploy/local/services.sh (RabbitMQ's), then "
                f"rotate_secrets --internal-ca-finish")


def _served_by_brokers() -> dict[str, str]:
    """{broker: the certificate its AMQPS listener presents} of this machine's pool."""
    import ssl

    from config_service.brokers import broker_pool

    served = {}
    for broker in broker_pool():
        if not broker.amqps_port:
            continue
        who = f"RabbitMQ {broker.name or 'broker'} (AMQPS {broker.amqps_port})"
        try:
            served[who] = ssl.get_server_certificate((broker.amqp_host, broker.amqps_port),
                                                     timeout=5)
        except OSError:
            continue  # not running: it presents nothing, and signs again when it starts
    return served
