"""The controller's client on a real cluster: server-side apply and friends over the REST API.

Uses `kubernetes.client.ApiClient` (in-cluster config, or ~/.kube/config outside) with static
paths for the few kinds the controller owns, so no discovery round-trips are needed.
Server-side apply is a PATCH with `application/apply-patch+yaml` (a JSON body is YAML),
`fieldManager` and `force=true`: the controller owns its fields and takes them back if someone
edited them.
"""
import json
from urllib.parse import quote

PLURALS = {
    "ConfigMap": "configmaps", "Secret": "secrets", "Service": "services",
    "StatefulSet": "statefulsets", "Deployment": "deployments",
    "PodDisruptionBudget": "poddisruptionbudgets", "NetworkPolicy": "networkpolicies",
}


class KubernetesError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(f"{status}: {message}")
        self.status = status

    @property
    def transient(self) -> bool:
        return self.status in (0, 409, 429) or self.status >= 500


def resource_path(api_version: str, kind: str, namespace: str, name: str = "") -> str:
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    path = f"{base}/namespaces/{quote(namespace)}/{PLURALS[kind]}"
    return f"{path}/{quote(name)}" if name else path


def label_selector(labels: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def load_api_client():
    """An ApiClient from the service account in a pod, or the local kubeconfig."""
    from kubernetes import client, config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    return client.ApiClient()


class KubernetesClient:
    def __init__(self, api_client=None, timeout: float = 30.0):
        self.api = api_client or load_api_client()
        self.timeout = timeout

    def _call(self, method: str, path: str, query: list | None = None, body=None,
              content_type: str = "application/json") -> dict | None:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        params = self.api.param_serialize(method, path, query_params=query or [],
                                          header_params=headers, body=body,
                                          auth_settings=["BearerToken"])
        try:
            response = self.api.call_api(*params, _request_timeout=self.timeout)
            response.read()
        except ApiException as exc:
            raise KubernetesError(exc.status or 0, str(exc.reason)) from exc
        except (OSError, HTTPError) as exc:  # connection refused, DNS, TLS, timeouts
            raise KubernetesError(0, str(exc)) from exc
        if response.status == 404:
            return None
        if not 200 <= response.status < 300:
            raise KubernetesError(response.status, response.data.decode(errors="replace")[:300])
        return json.loads(response.data) if response.data else {}

    def apply(self, manifest: dict, field_manager: str) -> dict:
        meta = manifest["metadata"]
        path = resource_path(manifest["apiVersion"], manifest["kind"], meta["namespace"],
                             meta["name"])
        return self._call("PATCH", path, [("fieldManager", field_manager), ("force", "true")],
                          json.dumps(manifest), "application/apply-patch+yaml")

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict | None:
        return self._call("GET", resource_path(api_version, kind, namespace, name))

    def list(self, api_version: str, kind: str, namespace: str, labels: dict) -> list[dict]:
        result = self._call("GET", resource_path(api_version, kind, namespace),
                            [("labelSelector", label_selector(labels))]) or {}
        items = result.get("items") or []
        for item in items:  # list items carry neither apiVersion nor kind
            item.setdefault("apiVersion", api_version)
            item.setdefault("kind", kind)
        return items

    def delete(self, api_version: str, kind: str, namespace: str, name: str) -> bool:
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}
        return self._call("DELETE", resource_path(api_version, kind, namespace, name),
                          body=body) is not None
