"""The messaging user endpoints: create, password hashing, authorization rules, roles."""
import pytest

from config_service.models import MessagingUser
from config_service.passwords import verify_password
from eventlog.models import ConfigEvent
from tests.conftest import b64, space_manifest


@pytest.fixture
def users_url(tenant, clients):
    clients["owner"].post(f"/api/v1/tenants/{tenant.slug}/addressspaces/",
                          space_manifest("bs"), format="json")
    return f"/api/v1/tenants/{tenant.slug}/addressspaces/bs/users/"


def user_manifest(username="app", password="s3cret-pass", rules=None):
    return {
        "apiVersion": "user.enmasse.io/v1beta1", "kind": "MessagingUser",
        "metadata": {"name": f"bs.{username}"},
        "spec": {"username": username,
                 "authentication": {"type": "password", "password": b64(password)},
                 "authorization": rules if rules is not None else [
                     {"addresses": ["orders", "audit*"], "operations": ["send", "recv"]}]},
    }


def test_admin_creates_a_user_whose_password_is_only_stored_hashed(users_url, clients):
    response = clients["admin"].post(users_url, user_manifest(), format="json")
    assert response.status_code == 201, response.content
    assert response.json()["spec"]["authentication"] == {"type": "password"}
    user = MessagingUser.objects.get(username="app")
    assert "s3cret-pass" not in user.password_hash
    assert verify_password("s3cret-pass", user.password_hash)
    event = ConfigEvent.objects.get(type="messaging_user.created")
    assert "s3cret" not in str(event.payload)


def test_the_events_api_redacts_password_hashes(tenant, users_url, clients):
    clients["admin"].post(users_url, user_manifest(), format="json")
    events = clients["owner"].get(
        f"/api/v1/tenants/{tenant.slug}/events/?type=messaging_user.created").json()["items"]
    assert events[0]["payload"]["password_hash"] == "<redacted>"


@pytest.mark.parametrize("manifest, field", [
    (user_manifest(username="bad name"), "spec.username"),
    (user_manifest(password="short"), "spec.authentication.password"),
    (user_manifest(rules=[{"addresses": ["a"], "operations": ["fly"]}]),
     "spec.authorization[0].operations"),
    (user_manifest(rules=[{"addresses": ["a b"], "operations": ["send"]}]),
     "spec.authorization[0].addresses"),
])
def test_bad_input_is_a_400_naming_the_field(users_url, clients, manifest, field):
    response = clients["owner"].post(users_url, manifest, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["field"] == field
    assert not MessagingUser.objects.exists()


def test_a_password_that_is_not_base64_is_refused(users_url, clients):
    manifest = user_manifest()
    manifest["spec"]["authentication"]["password"] = "not base64!"
    response = clients["owner"].post(users_url, manifest, format="json")
    assert response.json()["field"] == "spec.authentication.password"


def test_viewer_and_outsider(users_url, clients):
    clients["owner"].post(users_url, user_manifest(), format="json")
    assert clients["viewer"].get(users_url + "bs.app/").status_code == 200
    assert clients["viewer"].delete(users_url + "bs.app/").status_code == 403
    assert clients["outsider"].get(users_url + "bs.app/").status_code == 404
    assert clients["outsider"].get(users_url).status_code == 404


def test_rotating_the_password_and_deleting(users_url, clients):
    clients["owner"].post(users_url, user_manifest(), format="json")
    old = MessagingUser.objects.get(username="app").password_hash
    manifest = user_manifest(password="another-pass")
    response = clients["owner"].put(users_url + "bs.app/", manifest, format="json")
    assert response.status_code == 200, response.content
    assert MessagingUser.objects.get(username="app").password_hash != old
    assert clients["owner"].delete(users_url + "bs.app/").status_code == 204
    assert not MessagingUser.objects.exists()


def test_a_users_status_lists_a_url_per_protocol_endpoint_without_the_password(
        tenant, users_url, clients, settings):
    created = clients["admin"].post(users_url, user_manifest(), format="json").json()
    vhost = f"{tenant.slug}.bs"
    host = settings.MAAS_PUBLIC_HOST

    urls = created["status"]["connectionUrls"]

    assert urls == [
        f"amqp://app%40{vhost}@{host}:{settings.RABBITMQ_AMQP_PORT}"
        f"?amqp.vhost=vhost%3A{vhost}",
        f"mqtt://{vhost}%3Aapp%40{vhost}@{host}:{settings.MAAS_MQTT_RELAY_PORT}",
    ]
    assert all("s3cret" not in url and "<password>" not in url for url in urls)
    listed = clients["viewer"].get(users_url).json()["items"][0]
    assert listed["status"]["connectionUrls"] == urls
