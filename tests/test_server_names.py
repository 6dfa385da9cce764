"""How a TLS listener finds a space's certificate for an SNI name (dataplane/server_names.py):
from the workers' files, or from a lookup (the MQTT gateway's, in the database) that a client
sending made-up names cannot turn into a flood of reads. Real certificates, real files; the
lookup here is a plain function standing in for the database read (tests/workers/
test_space_certificates.py runs the real one)."""
import pytest

from dataplane import server_names
from dataplane.server_names import ServerNames
from tests.certs import bundle


def write(directory, host: str, made) -> None:
    (directory / host).mkdir(parents=True, exist_ok=True)
    (directory / host / "tls.crt").write_text(made.chain)
    (directory / host / "tls.key").write_text(made.key)


def test_files_are_read_for_their_host_and_nothing_else(tmp_path, monkeypatch):
    monkeypatch.setattr(server_names, "RECHECK", 0.0)
    names = ServerNames(str(tmp_path))
    write(tmp_path, "mq.acme.example", bundle("mq.acme.example"))
    assert names.context("MQ.acme.example.") is not None  # as clients may write it
    for other in ("other.example", "../mq.acme.example", "mq.acme.example/..", "", "a" * 300):
        assert names.context(other) is None
    # a pair that does not match is refused, and the listener's own certificate stays in use
    (tmp_path / "mq.acme.example" / "tls.key").write_text(bundle("mq.acme.example").key)
    assert names.context("mq.acme.example") is None


def test_a_lookup_is_bounded_whatever_names_a_client_sends():
    asked = []
    known = bundle("mq.acme.example")

    def lookup(host):
        asked.append(host)
        return (known.chain, known.key) if host == "mq.acme.example" else None

    names = ServerNames(lookup=lookup)
    assert names.context("mq.acme.example") is not None
    for i in range(200):
        assert names.context(f"made-up-{i}.example") is None
    assert len(asked) <= server_names.LOOKUPS_PER_SECOND + 2  # the rest got no lookup
    before = len(asked)
    assert names.context("mq.acme.example") is not None  # kept: no new lookup
    assert len(asked) == before


def test_a_failing_lookup_serves_the_listener_s_own_certificate_and_rests():
    asked = []

    def lookup(host):
        asked.append(host)
        raise RuntimeError("database down")

    names = ServerNames(lookup=lookup)
    assert names.context("mq.acme.example") is None
    # A database down (or hung for LOOKUP_TIMEOUT) is not asked again at every new name.
    assert [names.context(f"other-{i}.example") for i in range(5)] == [None] * 5
    assert asked == ["mq.acme.example"]
    names.resting_until = 0.0  # LOOKUP_BACKOFF later
    names.context("again.example")
    assert asked[-1] == "again.example"


@pytest.mark.parametrize("host", ["mq.acme.example", "x.example"])
def test_contexts_come_from_pem_text(host):
    made = bundle(host)
    assert server_names.context_for_pems(made.chain, made.key) is not None
