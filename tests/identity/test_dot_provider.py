"""The second provider of the identity suite is what it claims to be (no MaaS involved): a
django-oauth-toolkit whose OpenID discovery lacks introspection (RFC 8414 metadata has it), whose
ID tokens name plain groups and flat roles, and whose JWT access tokens are RFC 9068's minimum
for the API's URL."""
import jwt
import pytest
import requests

from .dot import DotProvider


@pytest.fixture(scope="module")
def dot(tmp_path_factory, app_port):
    provider = DotProvider(tmp_path_factory.mktemp("dot-shape"), f"http://127.0.0.1:{app_port}")
    provider.start()
    yield provider
    provider.stop()


def test_introspection_is_listed_in_rfc8414_metadata_only(dot):
    discovery = dot.discovery()
    metadata = requests.get(f"{dot.origin}/.well-known/oauth-authorization-server/o").json()

    assert discovery["issuer"] == metadata["issuer"] == dot.issuer
    assert "introspection_endpoint" not in discovery
    assert metadata["introspection_endpoint"] == f"{dot.issuer}/introspect/"
    assert discovery["end_session_endpoint"]


def test_id_tokens_name_plain_groups_and_flat_roles_access_tokens_are_rfc9068(dot):
    tokens = dot.login("olga", "olga-pw")
    id_claims = jwt.decode(tokens["id_token"], options={"verify_signature": False})
    access = jwt.decode(tokens["access_token"], options={"verify_signature": False})
    header = jwt.get_unverified_header(tokens["access_token"])
    vic = jwt.decode(dot.login("vic", "vic-pw")["id_token"], options={"verify_signature": False})

    assert id_claims["roles"] == ["tenant:acme:owner"] and id_claims["groups"] == []
    assert vic["groups"] == ["other/x", "tenants/acme/viewer"]
    assert "at_hash" in id_claims and id_claims["aud"] == "maas"
    assert header["typ"] == "at+jwt"
    assert access["aud"] == f"{dot.app_url}/api/" and access["client_id"] == "maas"
    assert access["sub"] == id_claims["sub"]
    assert not {"groups", "roles", "preferred_username", "email"} & set(access)
    kids = {key["kid"] for key in requests.get(dot.discovery()["jwks_uri"]).json()["keys"]}
    assert header["kid"] in kids
