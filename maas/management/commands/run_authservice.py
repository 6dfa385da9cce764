"""manage.py run_authservice [--host] [--port]: the auth service routers delegate SASL to.

Serves SASL PLAIN against messaging users and the router admin until stopped (docs/router.md,
"Auth service"); with --tls-cert/--tls-key, over TLS only, loading them again when they change
(a Kubernetes Secret re-signed by the internal CA). With --tls-optional a certificate that is
not there leaves it plain, and says so.
"""
import os
import ssl

from django.conf import settings
from django.core.management.base import BaseCommand

from dataplane import tls_files
from dataplane.authservice.server import AuthServer
from maas import bindings


class Command(BaseCommand):
    help = "Run the auth service (qdrouterd authServicePlugin) for messaging users."

    def add_arguments(self, parser):
        parser.add_argument("--host", default=settings.MAAS_AUTH_SERVICE_HOST)
        parser.add_argument("--port", type=int, default=settings.MAAS_AUTH_SERVICE_PORT)
        parser.add_argument("--tls-cert", help="PEM certificate: serve TLS only")
        parser.add_argument("--tls-key", help="PEM private key of --tls-cert")
        parser.add_argument("--tls-optional", action="store_true",
                            help="plain when --tls-cert or --tls-key is not there")

    def handle(self, host, port, tls_cert, tls_key, tls_optional=False, **options):
        context = None
        if tls_cert and tls_optional and not (os.path.exists(tls_cert)
                                              and os.path.exists(tls_key or "")):
            self.stderr.write(f"no certificate at {tls_cert}: serving plain AMQP, unencrypted")
            tls_cert = None
        certificate = None
        if tls_cert:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(tls_cert, tls_key)
            certificate = tls_files.ServerCertificate(context, tls_cert, tls_key)
        with AuthServer((host, port), bindings.verify, ssl_context=context,
                        certificate=certificate,
                        workers=settings.MAAS_AUTH_SERVICE_WORKERS,
                        handshake_timeout=settings.MAAS_HANDSHAKE_TIMEOUT) as server:
            self.stdout.write(f"auth service on {host}:{server.server_address[1]}"
                              f"{' (TLS)' if context else ''}")
            try:
                server.serve_forever()
            except KeyboardInterrupt:
                pass
