"""manage.py msg send|receive: a small AMQP 1.0 client for tenants and operators.

Connects to the endpoint of the address space (the router of a standard space, RabbitMQ for a
brokered one) as a messaging user, and sends or receives messages on one address.

    manage.py msg send --tenant acme --space orders --address invoices \\
        --user app --password secret --body hello --count 3
    manage.py msg receive --tenant acme --space orders --address invoices \\
        --user app --password secret --count 3
"""
import os

from django.core.management.base import BaseCommand, CommandError
from proton import ConnectionException, LinkException, Message, Timeout
from proton.utils import BlockingConnection

from config_service.api.resources import endpoints
from config_service.models import AddressSpace
from config_service.wire import receive_address, send_address
from core.amqp import open_receiver, open_sender


def open_connection(space: AddressSpace, user: str, password: str) -> BlockingConnection:
    endpoint = endpoints(space)[0]
    port = endpoint["servicePorts"][0]["port"]
    url = f"amqp://{endpoint['serviceHost']}:{port}"
    return BlockingConnection(url, user=f"{user}@{space.vhost}", password=password,
                              virtual_host=endpoint.get("virtualHost"), allowed_mechs="PLAIN",
                              allow_insecure_mechs=True, timeout=10)


def wire_address(space: AddressSpace, address: str, receiving: bool) -> str:
    kind = space.addresses.filter(address=address).values_list("type", flat=True).first()
    return (receive_address if receiving else send_address)(space.type, kind or "", address)


class Command(BaseCommand):
    help = "Send or receive messages on an address, as a messaging user."

    def add_arguments(self, parser):
        parser.add_argument("action", choices=["send", "receive"])
        parser.add_argument("--tenant", required=True)
        parser.add_argument("--space", required=True)
        parser.add_argument("--address", required=True)
        parser.add_argument("--user", required=True)
        parser.add_argument("--password", default=os.environ.get("MAAS_MSG_PASSWORD"),
                            help="or set MAAS_MSG_PASSWORD")
        parser.add_argument("--body", default="hello")
        parser.add_argument("--subject", default=None)
        parser.add_argument("--count", type=int, default=1)
        parser.add_argument("--timeout", type=float, default=10.0)

    def handle(self, action, tenant, space, address, user, password, body, subject, count,
               timeout, **options):
        s = AddressSpace.objects.select_related("tenant").filter(
            tenant__slug=tenant, name=space).first()
        if s is None:
            raise CommandError(f"no address space {tenant}/{space}")
        if not password:
            raise CommandError("give --password or set MAAS_MSG_PASSWORD")
        try:
            conn = open_connection(s, user, password)
        except ConnectionException as exc:
            raise CommandError(f"connection refused: {exc}") from exc
        try:
            if action == "send":
                sender = open_sender(conn, wire_address(s, address, receiving=False))
                for i in range(count):
                    text = body if count == 1 else f"{body} {i + 1}"
                    sender.send(Message(body=text, subject=subject), timeout=timeout)
                self.stdout.write(f"sent {count} message(s) to {address}")
            else:
                receiver = open_receiver(conn, wire_address(s, address, receiving=True),
                                         credit=min(count, 100))
                for _ in range(count):
                    message = receiver.receive(timeout)
                    if receiver.fetcher.unsettled:  # multicast copies may come pre-settled
                        receiver.accept()
                    self.stdout.write(str(message.body))
        except (LinkException, ConnectionException) as exc:  # LinkDetached is one
            raise CommandError(str(exc)) from exc
        except Timeout as exc:
            raise CommandError(f"timed out after {timeout}s") from exc
        finally:
            try:
                conn.close()
            except (ConnectionException, Timeout):
                pass
