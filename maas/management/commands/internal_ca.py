"""manage.py internal_ca: the platform's internal CA, made if missing, and the auth service's
certificate it signs.

On Kubernetes the Secrets `maas-internal-ca` and `maas-authservice-tls` (an operator's own
certificate there is left alone) in MAAS_INFRA_NAMESPACE, through the API: the migrations Job
runs this before the pods that mount them can start (deploy/base/migrate.yaml). On one machine
the CA files in MAAS_INTERNAL_TLS_DIR, as deploy/local/services.sh makes them. Idempotent.
"""
from django.conf import settings
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Make the internal CA and the auth service's certificate where they are missing."

    def handle(self, **options):
        from workers.infra.backend import backend

        if backend() != "kubernetes":
            from workers.agents.router.certificates import ensure_internal_certificates

            ensure_internal_certificates(settings.MAAS_INTERNAL_TLS_DIR, [])
            self.stdout.write(f"internal CA: {settings.MAAS_INTERNAL_TLS_DIR}/ca.pem")
            return
        from workers.infra import internal_ca
        from workers.infra.backend import infra_settings, internal_ca_lock
        from workers.infra.kube import KubernetesClient

        client, namespace = KubernetesClient(), infra_settings().namespace
        ca = internal_ca.ensure(client, namespace, internal_ca_lock)
        auth = internal_ca.ensure_auth_service_certificate(client, namespace, ca)
        self.stdout.write(f"internal CA: Secret {internal_ca.SECRET} in {namespace}"
                          f"{' (rotation under way)' if ca.previous_pem else ''}; "
                          f"auth service certificate ({internal_ca.AUTH_SERVICE_SECRET}): {auth}")
