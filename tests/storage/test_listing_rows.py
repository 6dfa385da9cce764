"""A listing read while other clients delete what it lists, against the real RabbitMQ: the
broker answers an object that went during the listing as an empty row (`[]`), and every reader
of the client takes the rows that name something (CI failed once on `read_broker`'s
`r["name"]` of such a row while the suite's other tests deleted their vhosts)."""
import threading
import time
import uuid

from tests.storage.clients import API_PASSWORD, API_URL, API_USER
from workers.clients.rabbitmq_api import BrokerError, RabbitMQApi

DEADLINE = 60.0  # seconds of churn to catch one empty row; seen within 2 s here


class Recording(RabbitMQApi):
    """The real client, keeping each raw answer of a /vhosts listing."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.answers: list = []

    def request(self, method, path, *args, **kwargs):
        answer = super().request(method, path, *args, **kwargs)
        if method == "GET" and path == "/vhosts":
            self.answers.append(answer)
        return answer


def test_vhost_names_skip_the_empty_rows_of_vhosts_deleted_while_listed():
    api = Recording(API_URL, API_USER, API_PASSWORD, timeout=10)
    prefix = f"maas-test-churn-{uuid.uuid4().hex[:6]}-"
    stop = threading.Event()

    def churn(k):
        writer = RabbitMQApi(API_URL, API_USER, API_PASSWORD, timeout=10)
        i = 0
        while not stop.is_set():
            name = f"{prefix}{k}-{i % 3}"
            try:
                writer.put_vhost(name)
                writer.delete_vhost(name)
            except BrokerError:  # the broker answers 500 now and then under this churn
                pass
            i += 1
        writer.close()

    threads = [threading.Thread(target=churn, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    try:
        empty_rows, deadline = 0, time.monotonic() + DEADLINE
        while not empty_rows and time.monotonic() < deadline:
            names = api.vhost_names()
            assert names and all(isinstance(n, str) and n for n in names)
            empty_rows = sum(1 for row in api.answers[-1] if row == [])
    finally:
        stop.set()
        for t in threads:
            t.join()
        for k in range(2):
            for i in range(3):
                api.delete_vhost(f"{prefix}{k}-{i}")
        api.close()
    # the race this guards against happened: a raw answer held an empty row
    assert empty_rows, f"no vhost listing in {DEADLINE:.0f} s caught a vhost going"
