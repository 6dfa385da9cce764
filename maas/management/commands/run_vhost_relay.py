"""manage.py run_vhost_relay [relay options]: the vhost relay (dataplane/vhost_relay) with the
spaces' endpoint certificates looked up in the control plane's database for its TLS listener,
where the workers' files are not at hand (Kubernetes: deploy/bundled/rabbitmq). Takes the
relay's own options as they are (`python -m dataplane.vhost_relay --help`)."""
import sys

from django.core.management.base import BaseCommand

from dataplane.vhost_relay.__main__ import main
from maas.bindings import space_certificate


class Command(BaseCommand):
    help = "Run the vhost relay, spaces' certificates chosen by SNI from the database."

    def run_from_argv(self, argv):
        # The relay parses its own options (Django's parser would refuse them); manage.py has
        # set Django up already.
        sys.exit(main(argv[2:], lookup=space_certificate))
