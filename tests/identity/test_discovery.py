"""The provider's metadata is read again when a use of it fails, never more often than the
floor, and kept while the provider cannot be read: a provider that moves its keys is followed
without a restart, and an outage does not turn every request into a discovery failure."""
import os
import signal

from rest_framework.test import APIClient

from tenants import default_plans
from tenants.identity import config as identity_config
from tenants.identity.jwks import keys as jwks_cache
from tenants.models import AddressPlan, AddressSpacePlan
from tenants.services import create_tenant
from tests.conftest import CTX, make_user

from .conftest import Browser

DISCOVERY = ".well-known/openid-configuration"


def discovery_reads(provider) -> int:
    return provider.requests_to(DISCOVERY)


def test_a_failed_use_reads_the_metadata_again_at_most_every_floor(oidc, settings):
    settings.MAAS_OIDC_DISCOVERY_MIN_REFRESH = 0
    identity_config.discovery()
    before = discovery_reads(oidc)

    identity_config.discovery()
    cached = discovery_reads(oidc) - before
    identity_config.discovery_failed("test: the token endpoint answered 404")
    identity_config.discovery()
    after_failure = discovery_reads(oidc) - before
    settings.MAAS_OIDC_DISCOVERY_MIN_REFRESH = 3600
    identity_config.discovery_failed("test: again")
    identity_config.discovery()
    within_floor = discovery_reads(oidc) - before

    assert (cached, after_failure, within_floor) == (0, 1, 1)


def test_keys_that_moved_are_found_after_one_failed_request(oidc, app_port, settings, db):
    default_plans.install(AddressPlan, AddressSpacePlan)
    create_tenant(ctx=CTX, slug="acme", owner=make_user("founder"))
    Browser(oidc, app_port).sign_in("alice", "alice-pw")
    settings.MAAS_OIDC_DISCOVERY_MIN_REFRESH = 0
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {oidc.sign({'sub': 'alice'})}")
    document = identity_config.discovery()
    document["jwks_uri"] = f"{oidc.origin}/realms/maas/moved-away"  # as if read before a move
    jwks_cache.forget()

    failed = client.get("/api/v1/tenants/acme/")
    recovered = client.get("/api/v1/tenants/acme/")

    assert failed.status_code == 503 and failed.json()["code"] == "provider_unavailable"
    assert recovered.status_code == 200
    assert identity_config.discovery()["jwks_uri"] != document["jwks_uri"]


def test_the_last_document_is_kept_while_the_provider_cannot_be_read(oidc, settings):
    identity_config.discovery()
    settings.MAAS_OIDC_DISCOVERY_MAX_AGE = 0  # every use would read it again
    settings.MAAS_OIDC_TIMEOUT = 0.5
    os.kill(oidc.proc.pid, signal.SIGSTOP)  # the provider hangs: connections, no answers
    try:
        kept = identity_config.discovery()
    finally:
        os.kill(oidc.proc.pid, signal.SIGCONT)

    assert kept["issuer"] == oidc.issuer
    assert kept["token_endpoint"].startswith(oidc.issuer)
