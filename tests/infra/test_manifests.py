"""The generated manifests: schema-valid for a current Kubernetes release, and golden.

Golden files are in tests/infra/golden/; after an intended change regenerate them with
`MAAS_UPDATE_GOLDEN=1 .venv/bin/pytest tests/infra/test_manifests.py` and review the diff.
"""
import dataclasses
import os
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from workers.infra import manifests as m

from . import spaces

GOLDEN = Path(__file__).parent / "golden"
CASES = {"small": spaces.small, "medium": spaces.medium, "plan-changed": spaces.plan_changed}


def dump(docs: list[dict]) -> str:
    return yaml.safe_dump_all(docs, sort_keys=True, default_flow_style=False, width=100)


@pytest.mark.parametrize("case", sorted(CASES))
def test_generated_manifests_match_golden_files(case):
    text = dump(spaces.all_manifests(CASES[case]()))
    path = GOLDEN / f"{case}.yaml"
    if os.environ.get("MAAS_UPDATE_GOLDEN"):
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"missing {path}: run with MAAS_UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"{case} differs from {path}"


@pytest.mark.parametrize("case", sorted(CASES))
def test_generated_manifests_validate_against_the_kubernetes_schemas(case):
    version = kubernetes_validate.latest_version()
    assert tuple(int(x) for x in version.split(".")[:2]) >= (1, 33)  # a current release
    docs = spaces.all_manifests(CASES[case]())
    for doc in docs:
        kubernetes_validate.validate(doc, version, strict=True)
    # And with Broker states of a scale-down in progress.
    space = CASES[case]()
    leaving = m.Broker("broker-9", 1, "Draining")
    for doc in m.broker_manifests(space, spaces.CFG, spaces.OWNER_UID, leaving,
                                  spaces.certificates(space, "broker-9")):
        kubernetes_validate.validate(doc, version, strict=True)


def test_small_space_has_one_router_one_broker_and_its_agent():
    docs = spaces.all_manifests(spaces.small())
    kinds = sorted((d["kind"], d["metadata"]["name"]) for d in docs)
    infra = m.infra_id(spaces.SMALL_UID)
    assert ("StatefulSet", f"router-{infra}") in kinds
    assert ("StatefulSet", f"broker-0-{infra}") in kinds
    assert ("Deployment", f"agent-{infra}") in kinds
    assert ("Secret", f"router-{infra}-tls") in kinds
    router = next(d for d in docs if d["metadata"]["name"] == f"router-{infra}"
                  and d["kind"] == "StatefulSet")
    assert router["spec"]["replicas"] == 1
    agent = next(d for d in docs if d["kind"] == "Deployment")
    container = agent["spec"]["template"]["spec"]["containers"][0]
    assert container["command"][:5] == ["python", "manage.py", "run_agent", "--space",
                                        spaces.SMALL_UID]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["MAAS_AGENT_MODE"] == "process"
    assert env["RABBITMQ_API_URL"] == f"https://broker-0-{infra}.maas.svc:15671/api"


def test_every_object_but_the_owner_is_owned_by_it_and_labelled_with_its_space():
    docs = spaces.all_manifests(spaces.medium())
    owner, rest = docs[0], docs[1:]
    assert owner["kind"] == "ConfigMap" and "ownerReferences" not in owner["metadata"]
    for doc in rest:
        (ref,) = doc["metadata"]["ownerReferences"]
        assert ref == {"apiVersion": "v1", "kind": "ConfigMap",
                       "name": owner["metadata"]["name"], "uid": spaces.OWNER_UID,
                       "controller": True, "blockOwnerDeletion": True}
        assert doc["metadata"]["labels"][m.LABEL_SPACE] == spaces.MEDIUM_UID


def test_router_replicas_follow_router_credits_with_a_minimum():
    assert spaces.small().router_replicas == 1
    assert spaces.medium().router_replicas == 2  # ceil(1.52)
    rows = spaces.schedule([("a", "standard-small-anycast")])
    assert m.space_infra(spaces.SMALL_UID, "t", "s", "p", rows,
                         min_router_replicas=2).router_replicas == 2
    assert m.space_infra(spaces.SMALL_UID, "t", "s", "p", []).router_replicas == 1


def test_brokers_are_the_distinct_clusters_of_the_placements():
    medium = spaces.medium()
    assert [(b.cluster_id, b.replicas) for b in medium.brokers] == [
        ("broker-0", 1), ("broker-1", 1), ("broker-sharded-e4cb6d59", 2)]
    assert [b.cluster_id for b in spaces.plan_changed().brokers] == [
        "broker-0", "broker-1", "broker-2", "broker-3"]


def test_config_and_certificate_changes_roll_the_router_pods():
    space = spaces.small()
    certs = spaces.certificates(space)
    other = m.Certificate("other", spaces.CERT.key_pem)

    def digest(changed, annotation=m.ANNOTATION_CONFIG_HASH):
        docs = m.router_manifests(space, spaces.CFG, "u", dataclasses.replace(certs, **changed))
        sts = next(d for d in docs if d["kind"] == "StatefulSet")
        return sts["spec"]["template"]["metadata"]["annotations"][annotation]

    for field in ("tls", "mesh", "internal"):
        assert digest({field: other}) != digest({})
    assert digest({"auth_ca": "another CA"}) != digest({})
    # a new internal CA bundle changes what the pods trust: they roll through that annotation
    assert digest({"trust": "new bundle"}, m.ANNOTATION_TRUST) != digest({}, m.ANNOTATION_TRUST)


def test_names_fit_kubernetes_limits():
    for case in CASES.values():
        for doc in spaces.all_manifests(case()):
            name = doc["metadata"]["name"]
            limit = 52 if doc["kind"] == "StatefulSet" else 63  # pod names + revision hash
            assert len(name) <= limit, name
