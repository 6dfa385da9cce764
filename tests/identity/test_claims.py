"""Claims to tenants and roles: groups and realm/client roles map to memberships at each
sign-in, the first one provisions the user, the operator flag comes from a configured claim."""
import pytest
from django.contrib.auth import get_user_model

from eventlog.models import ConfigEvent
from tenants.identity import claims
from tenants.identity.provisioning import user_for_claims
from tenants.models import Membership, Role
from tenants.services import add_member, create_tenant
from tests.conftest import CTX, make_user


@pytest.fixture
def issuer(settings):
    settings.MAAS_OIDC_ISSUER = "http://127.0.0.1:1/realms/maas"
    settings.MAAS_OIDC_CLIENT_ID = "maas"


@pytest.fixture
def acme(db):
    return create_tenant(ctx=CTX, slug="acme", owner=make_user("founder"))


def test_groups_and_realm_and_client_roles_map_to_the_highest_role_per_tenant(issuer):
    token = {"groups": ["/tenants/acme/viewer", "/tenants/beta/admin", "/staff", "/tenants/x"],
             "realm_access": {"roles": ["tenant:acme:admin", "offline_access"]},
             "resource_access": {"maas": {"roles": ["tenant:gamma:owner"]}}}

    assert claims.tenant_roles(token) == {"acme": "admin", "beta": "admin", "gamma": "owner"}


def test_plain_group_names_flat_roles_and_a_flat_staff_role_map_by_default(issuer):
    """A plain OpenID provider's shape (django-oauth-toolkit, Okta): group names without the
    leading slash Keycloak writes, roles in a flat `roles` claim."""
    token = {"groups": ["tenants/acme/viewer", "tenants/beta/admin", "staff"],
             "roles": ["tenant:acme:owner", "maas-operator"]}

    assert claims.tenant_roles(token) == {"acme": "owner", "beta": "admin"}
    assert claims.is_staff(token) is True
    assert claims.is_staff({"roles": ["tenant:acme:owner"]}) is False


def test_a_slashless_pattern_matches_slashed_groups_too(issuer, settings):
    settings.MAAS_OIDC_GROUP_PATTERN = "tenants/{tenant}/{role}"

    assert claims.tenant_roles({"groups": ["/tenants/acme/admin", "tenants/beta/viewer"],
                                "roles": []}) == {"acme": "admin", "beta": "viewer"}


def test_the_username_claims_are_configurable(issuer, settings):
    token = {"sub": "u-1", "email": "ann@example.test", "upn": "ann@corp"}

    assert claims.username(token) == "ann@example.test"
    settings.MAAS_OIDC_USERNAME_CLAIMS = ["upn", "email"]
    assert claims.username(token) == "ann@corp"


def test_the_mapping_is_configurable(issuer, settings):
    settings.MAAS_OIDC_GROUPS_CLAIM = "memberOf"
    settings.MAAS_OIDC_GROUP_PATTERN = "maas-{tenant}-{role}"
    settings.MAAS_OIDC_ROLES_CLAIMS = []

    assert claims.tenant_roles({"memberOf": ["maas-acme-owner"],
                                "groups": ["/tenants/beta/admin"]}) == {"acme": "owner"}


def test_claims_named_by_url_map_beside_dotted_paths(issuer, settings):
    """Auth0 names custom claims by URL (dots and slashes in one top-level name): a name is
    read whole first, then as a dotted path, so both kinds work in one setting."""
    settings.MAAS_OIDC_GROUPS_CLAIM = ["https://example.com/groups"]
    settings.MAAS_OIDC_ROLES_CLAIMS = ["https://example.com/roles", "realm_access.roles"]
    settings.MAAS_OIDC_STAFF_CLAIM = ["https://example.com/roles"]
    settings.MAAS_OIDC_USERNAME_CLAIMS = ["https://example.com/username", "email"]
    token = {"https://example.com/groups": ["/tenants/acme/admin"],
             "https://example.com/roles": ["tenant:beta:owner", "maas-operator"],
             "realm_access": {"roles": ["tenant:gamma:viewer"]},
             "https://example.com/username": "ann", "email": "ann@example.test"}

    assert claims.tenant_roles(token) == {"acme": "admin", "beta": "owner", "gamma": "viewer"}
    assert claims.is_staff(token) is True
    assert claims.username(token) == "ann"


def test_staff_comes_from_the_configured_claim(issuer, settings):
    assert claims.is_staff({"realm_access": {"roles": ["maas-operator"]}}) is True
    assert claims.is_staff({"realm_access": {"roles": ["user"]}}) is False
    settings.MAAS_OIDC_STAFF_CLAIM = ""
    assert claims.is_staff({"realm_access": {"roles": ["maas-operator"]}}) is None


def test_the_first_sign_in_provisions_the_user_with_memberships_and_events(issuer, acme):
    user = user_for_claims({"sub": "s-1", "preferred_username": "alice", "email": "a@x.test",
                            "groups": ["/tenants/acme/admin", "/tenants/nowhere/owner"]})

    assert (user.username, user.email, user.is_staff) == ("alice", "a@x.test", False)
    assert Membership.objects.get(tenant=acme, user=user).role == Role.ADMIN
    event = ConfigEvent.objects.get(type="tenant.member_added", payload__username="alice")
    assert event.actor == "oidc-claims:alice"


def test_a_group_removed_at_the_provider_removes_the_membership_at_next_sign_in(issuer, acme):
    user_for_claims({"sub": "s-1", "preferred_username": "alice",
                     "groups": ["/tenants/acme/admin"]})

    user = user_for_claims({"sub": "s-1", "preferred_username": "alice", "groups": []})

    assert not Membership.objects.filter(tenant=acme, user=user).exists()


def test_a_membership_made_in_the_product_is_never_lowered_or_removed_by_claims(issuer, acme):
    invited = get_user_model().objects.create_user("alice")  # invited: no password yet
    add_member(ctx=CTX, tenant=acme, user=invited, role=Role.OWNER)

    user = user_for_claims({"sub": "s-1", "preferred_username": "alice",
                            "groups": ["/tenants/acme/viewer"]})
    user_for_claims({"sub": "s-1", "preferred_username": "alice", "groups": []})

    assert user == invited
    assert Membership.objects.get(tenant=acme, user=invited).role == Role.OWNER


def test_a_local_account_of_the_same_name_is_not_taken_over(issuer, acme):
    local = make_user("alice")

    user = user_for_claims({"sub": "s-1", "preferred_username": "alice"})

    assert user != local
    assert user.username.startswith("alice-")


def test_the_operator_flag_follows_the_claim_at_each_sign_in(issuer, acme):
    operator = {"sub": "s-9", "preferred_username": "root",
                "realm_access": {"roles": ["maas-operator"]}}
    assert user_for_claims(operator).is_staff

    assert not user_for_claims({**operator, "realm_access": {"roles": []}}).is_staff


@pytest.mark.parametrize(("token", "client"), [
    ({"sub": "maas", "client_id": "maas"}, "maas"),
    ({"sub": "reporting", "azp": "reporting"}, "reporting"),
    ({"sub": "reporting", "azp": "reporting", "preferred_username": "reporting"}, None),
    ({"sub": "alice", "azp": "maas", "client_id": "maas"}, None),
    ({"sub": "alice"}, None),
])
def test_a_token_whose_subject_is_its_client_is_a_service(token, client):
    assert claims.service_client(token) == client
