"""Which JWTs the API takes as access tokens: one test per row of the decision table in
docs/identity.md ("Which tokens the API accepts"), each token signed by the real provider's
realm key, so only the signals under test differ. Refusals are 401 with the reason and change
nothing."""
import pytest
from rest_framework.test import APIClient

from eventlog.models import ConfigEvent
from tenants import default_plans
from tenants.identity import introspection
from tenants.identity.tokens import TokenRejected
from tenants.models import AddressPlan, AddressSpacePlan
from tenants.services import create_tenant
from tests.conftest import CTX, make_user

from .conftest import Browser

# (JOSE header fields, claims, accepted, words of the reason): the table's rows, in its order.
ROWS = {
    "1_rfc9068_typ_at_jwt": ({"typ": "at+jwt"}, {"client_id": "maas", "scope": "openid"},
                             True, None),
    "1_rfc9068_media_type": ({"typ": "application/at+jwt"}, {"client_id": "maas"}, True, None),
    "2_other_jose_typ": ({"typ": "logout+jwt"}, {}, False, "logout+jwt token is not an access"),
    "3_keycloak_bearer_even_with_nonce": ({}, {"typ": "Bearer", "nonce": "n"}, True, None),
    "4_keycloak_id": ({}, {"typ": "ID"}, False, "ID token is not an access token (typ claim)"),
    "4_keycloak_refresh": ({}, {"typ": "Refresh"}, False, "Refresh token is not an access"),
    "4_keycloak_offline": ({}, {"typ": "Offline"}, False, "Offline token is not an access"),
    "5_nonce": ({}, {"typ": None, "nonce": "n", "scope": "openid"}, False, "it has nonce"),
    "5_at_hash": ({}, {"typ": None, "at_hash": "x", "scope": "openid"}, False, "it has at_hash"),
    "5_c_hash": ({}, {"typ": None, "c_hash": "x"}, False, "it has c_hash"),
    "6_id_token_shape": ({}, {"typ": None}, False, "its audience is this client"),
    "7_untyped_with_scope": ({}, {"typ": None, "scope": "openid"}, True, None),
    "7_untyped_with_client_id": ({}, {"typ": None, "aud": "https://api.example/",
                                      "azp": None, "client_id": "maas"}, True, None),
}


@pytest.fixture
def alice(oidc, app_port, db):
    default_plans.install(AddressPlan, AddressSpacePlan)
    create_tenant(ctx=CTX, slug="acme", owner=make_user("founder"))
    Browser(oidc, app_port).sign_in("alice", "alice-pw")


def call(token: str):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client.get("/api/v1/tenants/acme/")


@pytest.mark.parametrize("row", sorted(ROWS))
def test_each_row_of_the_decision_table(oidc, alice, row):
    headers, claims, accepted, words = ROWS[row]
    # sign() adds Keycloak's typ "Bearer" and azp; a None here leaves the signal out (null).
    token = oidc.sign({"sub": "alice", **claims}, headers=headers)
    events = ConfigEvent.objects.count()

    response = call(token)

    if accepted:
        assert response.status_code == 200, response.content
    else:
        assert response.status_code == 401
        assert response.json()["code"] == "not_an_access_token"
        assert words in response.json()["message"]
        assert words in response["WWW-Authenticate"]
    assert ConfigEvent.objects.count() == events


def test_the_providers_own_id_token_is_refused(oidc, alice):
    tokens = oidc.login("alice", "alice-pw")

    response = call(tokens["id_token"])

    assert response.status_code == 401
    assert response.json()["code"] == "not_an_access_token"
    assert call(tokens["access_token"]).status_code == 200


def test_a_token_for_the_apis_url_is_accepted_by_client_id_not_for_another_client(oidc, alice):
    mine = oidc.sign({"sub": "alice", "aud": "https://maas.example/api/", "azp": None,
                      "client_id": "maas", "typ": None}, headers={"typ": "at+jwt"})
    theirs = oidc.sign({"sub": "alice", "aud": "https://maas.example/api/", "azp": None,
                        "client_id": "reporting", "typ": None}, headers={"typ": "at+jwt"})

    assert call(mine).status_code == 200
    refused = call(theirs)
    assert refused.status_code == 401
    assert refused.json()["code"] == "wrong_audience"
    assert "aud, azp or client_id" in refused.json()["message"]


# The introspection rows (8-11) that no provider of the suite answers with (Keycloak says
# typ Refresh; others name the type RFC 7662 lets them leave out); the rest run against real
# providers in test_providers.py. introspection._check is a pure function of the answer.
ANSWERS = {
    "8_inactive": ({"active": False}, "token_inactive"),
    "9_token_type_refresh": ({"active": True, "token_type": "refresh_token", "sub": "a",
                              "client_id": "maas"}, "not_an_access_token"),
    "9_keycloak_typ_refresh": ({"active": True, "typ": "Refresh", "sub": "a", "azp": "maas"},
                               "not_an_access_token"),
    "other_issuer": ({"active": True, "iss": "http://elsewhere", "client_id": "maas"},
                     "wrong_issuer"),
    "expired": ({"active": True, "exp": 1, "client_id": "maas"}, "token_expired"),
    "other_client": ({"active": True, "client_id": "reporting"}, "wrong_audience"),
    "11_active_for_maas": ({"active": True, "token_type": "Bearer", "sub": "a",
                            "client_id": "maas"}, None),
}


@pytest.mark.parametrize("case", sorted(ANSWERS))
def test_each_introspection_answer_row(oidc, case):
    answer, code = ANSWERS[case]
    if code is None:
        assert introspection._check(answer)["sub"] == "a"
        return
    with pytest.raises(TokenRejected) as refused:
        introspection._check(answer)
    assert refused.value.code == code
