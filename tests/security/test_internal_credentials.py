"""Finding 1: on a default install the router's login on a space's broker vhost and the router
management password were derived from a constant, so anyone could compute them and read
another tenant's queues. Now every internal credential is random and stored encrypted."""
import hashlib
import hmac
import os
import subprocess
import sys

import pytest
from django.conf import settings
from proton import ConnectionException

from config_service import services
from tests.conftest import CTX
from tests.workers import rabbit
from workers import credentials
from workers.agents import runner
from workers.models import InfraCredential

OLD_DEFAULT_KEY = "maas-insecure-development-key-change-me"  # the constant of earlier releases


def _old_router_password(vhost: str) -> str:
    return hmac.new(OLD_DEFAULT_KEY.encode(), f"router-broker:{vhost}".encode(),
                    hashlib.sha256).hexdigest()


@pytest.fixture
def standard_space(tenant):
    space = services.create_address_space(ctx=CTX, tenant=tenant, name="victim",
                                          type="standard", plan="standard-small")
    services.create_address(ctx=CTX, space=space, address="payroll", type="queue",
                            plan="standard-small-queue")
    runner.run(space.uid, "storage")  # the storage controller makes the vhost and the router user
    yield space
    services.delete_address_space(ctx=CTX, space=space)
    runner.run(space.uid, "storage")


@pytest.mark.slow  # several seconds of waiting: not for the inner loop
def test_the_router_login_of_the_old_default_install_is_refused_by_the_broker(standard_space):
    vhost = standard_space.vhost
    for login in (f"$router@{vhost}", f"$router-1@{vhost}"):
        with pytest.raises(ConnectionException):
            rabbit.connect(vhost, login, _old_router_password(vhost)).close()
    user, password = credentials.router_broker(vhost)  # the real one does log in
    rabbit.connect(vhost, f"{user}@{vhost}", password).close()


def test_router_credentials_are_random_per_space_and_encrypted_at_rest(db):
    first = credentials.router_broker("t1.space")
    assert credentials.router_broker("t1.space") == first  # stable until rotated
    second = credentials.router_broker("t2.space")
    assert first[1] != second[1] and len(first[1]) >= 40
    stored = InfraCredential.objects.get(name=credentials.router_broker_name("t1.space"))
    assert first[1] not in stored.ciphertext


def test_rotation_gives_a_new_value_and_a_new_login(db):
    user, password = credentials.router_broker("t3.space")
    credentials.rotate(credentials.router_broker_name("t3.space"))
    new_user, new_password = credentials.router_broker("t3.space")
    assert (new_user, new_password) != (user, password) and new_user == "$router-2"


def test_a_credential_that_no_longer_decrypts_is_replaced(db, settings):
    _, password = credentials.router_broker("t4.space")
    settings.SECRET_KEY = "another key, as after var/ was lost"
    user, new_password = credentials.router_broker("t4.space")
    assert new_password != password and user == "$router-2"


def test_the_router_admin_password_is_not_derived_from_a_constant():
    old = hashlib.sha256(f"router-admin:{OLD_DEFAULT_KEY}".encode()).hexdigest()
    assert settings.MAAS_ROUTER_ADMIN_PASSWORD != old
    assert settings.SECRET_KEY != OLD_DEFAULT_KEY


def _settings_value(name: str, secrets_dir) -> str:
    env = {k: v for k, v in os.environ.items()
           if k not in ("MAAS_SECRET_KEY", "MAAS_ROUTER_ADMIN_PASSWORD")}
    env.update(MAAS_SECRETS_DIR=str(secrets_dir), DJANGO_SETTINGS_MODULE="maas.settings")
    code = f"from django.conf import settings; print(settings.{name})"
    return subprocess.run([sys.executable, "-c", code], env=env, cwd=settings.BASE_DIR,
                          capture_output=True, text=True, check=True).stdout.strip()


def test_an_install_without_a_secret_key_makes_a_random_one_once_and_keeps_it(tmp_path):
    first = _settings_value("SECRET_KEY", tmp_path / "a")
    assert first == _settings_value("SECRET_KEY", tmp_path / "a")
    assert first != _settings_value("SECRET_KEY", tmp_path / "b")
    assert first != OLD_DEFAULT_KEY and len(first) >= 50
    assert oct((tmp_path / "a" / "secret-key").stat().st_mode & 0o777) == "0o600"


def test_processes_starting_together_agree_on_the_new_secret(tmp_path):
    code = ("import sys; from maas.local_secrets import installation_secret; "
            "print(installation_secret(sys.argv[1], 'router-admin-password'))")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path)],
                              cwd=settings.BASE_DIR, stdout=subprocess.PIPE, text=True)
             for _ in range(6)]
    values = {p.communicate(timeout=30)[0].strip() for p in procs}
    assert len(values) == 1 and len(values.pop()) >= 40


def test_rotating_one_space_leaves_a_space_whose_name_it_begins(db):
    shop, shopping = credentials.router_broker("t5.shop"), credentials.router_broker("t5.shopping")
    credentials.rotate(credentials.router_broker_name("t5.shop"), exact=True)
    assert credentials.router_broker("t5.shop") != shop
    assert credentials.router_broker("t5.shopping") == shopping
