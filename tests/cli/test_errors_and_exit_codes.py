"""maasctl's exit codes and error text, which scripts rely on: 1 with the server's message for
an API error (an outsider gets NotFound), 2 for bad usage, 3 for a wait that timed out, 4 for
an unreachable server. No worker runs here: spaces stay Configuring."""
import datetime
import json
import stat

import pytest

from tests.conftest import free_tcp_port, make_user
from workers.usage.job import store

from .conftest import DATA, Maasctl, ok

pytestmark = pytest.mark.slow

BROKERED = str(DATA / "brokered.yaml")


def test_login_keeps_the_token_private_and_selects_the_only_tenant(cli, tenant):
    path = cli.env["MAASCTL_CONFIG"]
    assert stat.S_IMODE(__import__("os").stat(path).st_mode) == 0o600
    view = ok(cli("config", "view"))
    assert f"tenant: {tenant.slug}" in view
    assert "token: REDACTED" in view
    assert "maas_pat_" not in view
    assert ok(cli("config", "current-tenant")) == f"{tenant.slug}\n"


def test_a_missing_object_is_not_found_with_exit_1(cli):
    result = cli("get", "addressspace", "nothere")
    assert result.returncode == 1
    assert result.stderr.startswith(
        'Error from server (NotFound): addressspaces.enmasse.io "nothere" not found')
    assert result.stdout == ""


def test_an_outsider_gets_not_found_and_changes_nothing(cli, outsider_cli, outsider, tenant):
    ok(cli("apply", "-f", BROKERED))
    for args in (("get", "as", "mybrokered"), ("get", "addresses", "-s", "mybrokered"),
                 ("describe", "address", "mybrokered.myqueue"),
                 ("delete", "as", "mybrokered"), ("apply", "-f", BROKERED),
                 ("wait", "as", "mybrokered", "--for=phase=Active", "--timeout=1s"), ("usage",)):
        result = outsider_cli(*args)
        assert result.returncode == 1, (args, result.returncode, result.stderr)
        assert result.stderr.startswith("Error from server (NotFound)"), (args, result.stderr)
    refused = outsider_cli.login(outsider, "--tenant", tenant.slug)
    assert refused.returncode == 1
    assert f'tenant "{tenant.slug}" not found' in refused.stderr
    # The owner's objects are all still there, unchanged.
    names = ok(cli("get", "addresses", "-s", "mybrokered", "-o", "name")).split()
    assert names == ["address.enmasse.io/mybrokered.myqueue",
                     "address.enmasse.io/mybrokered.mytopic"]
    space = json.loads(ok(cli("get", "as", "mybrokered", "-o", "json")))
    assert space["metadata"]["resourceVersion"] == "1"


def test_global_flags_work_before_or_after_the_command(cli, outsider_cli, tenant):
    ok(cli("apply", "-f", BROKERED))
    after = ok(cli("get", "as", "-o", "name", "--tenant", tenant.slug))
    before = ok(cli("--tenant", tenant.slug, "get", "as", "-o", "name"))
    assert before == after == "addressspace.enmasse.io/mybrokered\n"
    # an outsider naming the tenant before the command is refused as after it
    refused = outsider_cli("-n", tenant.slug, "get", "as", "mybrokered")
    assert refused.returncode == 1 and "(NotFound)" in refused.stderr


def test_bad_input_is_the_servers_400_naming_the_field_and_nothing_is_created(cli):
    ok(cli("apply", "-f", BROKERED))
    bad = {"apiVersion": "enmasse.io/v1beta1", "kind": "Address",
           "metadata": {"name": "mybrokered.orders"},
           "spec": {"address": "orders", "type": "queue", "plan": "no-such-plan"}}
    result = cli("apply", "-f", "-", input=json.dumps(bad))
    assert result.returncode == 1
    assert result.stderr.startswith("Error from server (BadRequest): ")
    assert "(field: spec.plan)" in result.stderr
    assert "when applying address.enmasse.io/mybrokered.orders" in result.stderr
    assert "mybrokered.orders" not in ok(cli("get", "addresses", "-s", "mybrokered"))
    assert ok(cli("get", "address", "myqueue", "-s", "mybrokered", "-o", "name")) == \
        "address.enmasse.io/mybrokered.myqueue\n"


def test_one_bad_object_does_not_stop_the_others_but_the_exit_code_says_so(cli):
    docs = [{"apiVersion": "enmasse.io/v1beta1", "kind": "AddressSpace",
             "metadata": {"name": "Bad_Name"}, "spec": {"type": "brokered",
                                                        "plan": "brokered-single-broker"}},
            {"apiVersion": "enmasse.io/v1beta1", "kind": "AddressSpace",
             "metadata": {"name": "good"}, "spec": {"type": "brokered",
                                                    "plan": "brokered-single-broker"}}]
    result = cli("apply", "-f", "-", input=json.dumps({"kind": "List", "items": docs}))
    assert result.returncode == 1
    assert result.stdout == "addressspace.enmasse.io/good created\n"
    assert "Error from server (BadRequest)" in result.stderr


def test_bad_command_lines_and_manifests_exit_2_before_anything_is_sent(cli, tmp_path):
    unknown_kind = tmp_path / "x.yaml"
    unknown_kind.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    broken = tmp_path / "broken.yaml"
    broken.write_text("kind: Address\nmetadata: [unclosed\n")
    no_space = tmp_path / "nospace.yaml"
    no_space.write_text("kind: Address\nmetadata: {name: orders}\nspec: {address: orders}\n")
    cases = {
        ("get", "widgets"): 'resource type "widgets"',
        ("get",): "the following arguments are required: kind",
        ("apply", "-f", str(tmp_path / "missing.yaml")): "cannot read",
        ("apply", "-f", str(unknown_kind)): "unknown kind 'ConfigMap'",
        ("apply", "-f", str(broken)): "not valid YAML or JSON",
        ("apply", "-f", str(no_space)): "must be named <address space>.<name>",
        ("wait", "as", "x", "--for=ready"): "invalid --for",
        ("wait", "as", "x", "--for=phase=Active", "--timeout=soon"): "invalid duration",
        ("receive", "q", "-s", "x", "-u", "u", "-p", "p", "--count", "0"): "--count",
        ("frobnicate",): "invalid choice",
    }
    for args, text in cases.items():
        result = cli(*args)
        assert result.returncode == 2, (args, result.returncode, result.stderr)
        assert text in result.stderr, (args, result.stderr)
    assert "No addressspaces found" in cli("get", "as").stderr  # nothing was created


def test_not_logged_in_is_a_usage_error(live_server, tmp_path, transactional_db):
    fresh = Maasctl(tmp_path / "none.json", live_server.url)
    result = fresh("get", "as")
    assert result.returncode == 2
    assert "not logged in" in result.stderr


def test_a_refused_token_is_unauthorized_and_nothing_is_saved(live_server, tmp_path,
                                                             transactional_db):
    fresh = Maasctl(tmp_path / "config.json", live_server.url)
    result = fresh("login", "--url", live_server.url, "--token", "maas_pat_not-a-token")
    assert result.returncode == 1
    assert result.stderr.startswith("Error from server (Unauthorized): ")
    assert not (tmp_path / "config.json").exists()


def test_a_wait_that_times_out_exits_3_with_the_objects_state(cli):
    ok(cli("apply", "-f", BROKERED))  # no worker in this module: the space stays Configuring
    result = cli("wait", "addressspace", "mybrokered", "--for=phase=Active", "--timeout=1s")
    assert result.returncode == 3
    assert result.stderr.startswith("error: timed out waiting for the condition on "
                                    "addressspaces/mybrokered (phase Configuring")


def test_an_unreachable_server_exits_4(cli):
    result = cli("get", "as", "--url", f"http://127.0.0.1:{free_tcp_port()}")
    assert result.returncode == 4
    assert result.stderr.startswith("error: cannot reach the MaaS API at http://127.0.0.1:")


def test_plans_are_listed_and_filtered(cli):
    table = ok(cli("get", "addressspaceplans")).splitlines()
    assert table[0].split() == ["NAME", "TYPE", "DISPLAY", "NAME"]
    assert {row.split()[0] for row in table[1:]} >= {"standard-small", "standard-unlimited",
                                                     "brokered-single-broker"}
    assert ok(cli("get", "addressplans", "--type", "subscription", "-o", "name")).split() == [
        "addressplan.admin.enmasse.io/standard-small-subscription",
        "addressplan.admin.enmasse.io/standard-medium-subscription",
        "addressplan.admin.enmasse.io/standard-large-subscription"]


def test_usage_prints_the_tenants_metered_usage_and_quota_state(cli, tenant):
    day = datetime.date(2026, 11, 20)
    store(day, {
        "address_daily": [{"tenant": tenant.slug, "space": "shop", "address": "orders",
                           "day": day, "messages_in": 10, "messages_out": 9, "bytes_in": 1000,
                           "bytes_out": 900, "stored_messages": 1, "stored_bytes": 100}],
        "tenant_daily": [{"tenant": tenant.slug, "day": day, "messages": 19, "bytes": 1900,
                          "stored_bytes": 100, "connections": 2}],
        "quota": [{"tenant": tenant.slug, "day": day, "limit": "messages_per_day", "used": 19,
                   "limit_value": 15, "share": 19 / 15, "breached": True, "forecast_day": day}],
    })
    text = ok(cli("usage", "--from", "2026-11-19", "--to", "2026-11-21"))
    assert "2026-11-20   shop    orders    10" in text
    assert "messages_per_day   19     15" in text
    report = json.loads(ok(cli("usage", "--from", "2026-11-20", "--to", "2026-11-20",
                               "-o", "json")))
    assert report["kind"] == "UsageReport"
    assert report["items"][0]["messages_in"] == 10
    csv = ok(cli("usage", "--from", "2026-11-20", "--to", "2026-11-20", "-o", "csv"))
    assert csv.splitlines()[1] == "shop,orders,2026-11-20,10,9,1000,900,1,100"
    bad = cli("usage", "--from", "yesterday")
    assert bad.returncode == 1
    assert "(field: from)" in bad.stderr


def test_an_operator_applies_and_deletes_plans_and_a_tenant_owner_is_forbidden(
        cli, live_server, tmp_path):
    operator = Maasctl(tmp_path / "operator" / "config.json", live_server.url)
    ok(operator.login(make_user("sam", staff=True)))
    plan = {"apiVersion": "admin.enmasse.io/v1beta2", "kind": "AddressPlan",
            "metadata": {"name": "ops-queue"},
            "spec": {"addressType": "queue", "resources": {"router": 0.001, "broker": 0.4}}}
    assert ok(operator("apply", "-f", "-", input=json.dumps(plan))) == \
        "addressplan.admin.enmasse.io/ops-queue created\n"
    assert ok(operator("apply", "-f", "-", input=json.dumps(plan))) == \
        "addressplan.admin.enmasse.io/ops-queue unchanged\n"
    plan["spec"]["resources"]["broker"] = 0.5
    assert ok(operator("apply", "-f", "-", input=json.dumps(plan))) == \
        "addressplan.admin.enmasse.io/ops-queue configured\n"
    shown = json.loads(ok(cli("get", "addressplan", "ops-queue", "-o", "json")))
    assert shown["spec"]["resources"]["broker"] == 0.5  # every tenant reads plans

    plan["spec"]["resources"]["broker"] = 0.1
    refused = cli("apply", "-f", "-", input=json.dumps(plan))  # the tenant's owner
    assert refused.returncode == 1
    assert refused.stderr.startswith("Error from server (Forbidden)"), refused.stderr
    ok(operator("delete", "addressplan", "ops-queue"))
    assert cli("get", "addressplan", "ops-queue").returncode == 1
