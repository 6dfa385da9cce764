"""An in-process fake of the Kubernetes API for the infra controller's tests.

No Kubernetes API server can run on the machines these tests run on (no container runtime, no
etcd), so this stands in for one, with the behaviour the controller relies on:

- server-side apply: the applied manifest becomes the object (the fake's "last applier wins"
  is what `force=true` gives a single field manager); the server fills in uid,
  resourceVersion, generation (bumped on a spec change), creationTimestamp and managedFields
  with the field manager; a missing field manager is refused as the API server does;
- every applied manifest is validated against the Kubernetes OpenAPI schema of the newest
  release `kubernetes-validate` knows (strict: unknown fields are errors);
- owner references: an object whose owners (by uid) are all gone is garbage-collected, in
  cascade, as the garbage collector does with background propagation;
- readiness simulation: a workload's status (ready, updated replicas and, for a StatefulSet,
  its current and update revisions) follows its spec on `settle()`, unless it was held with
  `hold(kind, name)`; `auto_ready=True` settles after every apply;
- `calls` records every call, for idempotence checks.
"""
import copy
import datetime
import itertools
import json
import uuid

import kubernetes_validate

WORKLOADS = ("StatefulSet", "Deployment")


class ApplyRejected(Exception):
    pass


_VALID: set[str] = set()


def validate(manifest: dict) -> None:
    text = json.dumps(manifest, sort_keys=True)
    if text not in _VALID:  # the same manifest is applied on every reconcile: check it once
        kubernetes_validate.validate(manifest, kubernetes_validate.latest_version(), strict=True)
        _VALID.add(text)


class FakeKubernetes:
    def __init__(self, auto_ready: bool = False):
        self.objects: dict[tuple, dict] = {}  # (apiVersion, kind, namespace, name) -> object
        self.auto_ready = auto_ready
        self.held: dict[tuple, int] = {}  # (kind, name) -> ready replicas to report
        self.calls: list[tuple] = []
        self._versions = itertools.count(1)

    # The client interface ---------------------------------------------------------------------

    def apply(self, manifest: dict, field_manager: str) -> dict:
        self.calls.append(("apply", manifest["kind"], manifest["metadata"]["name"]))
        if not field_manager:
            raise ApplyRejected("fieldManager is required for apply patch")
        validate(manifest)
        meta = manifest["metadata"]
        k = (manifest["apiVersion"], manifest["kind"], meta["namespace"], meta["name"])
        old = self.objects.get(k)
        obj = copy.deepcopy(manifest)
        new_meta = obj["metadata"]
        if old is None:
            new_meta["uid"] = str(uuid.uuid4())
            new_meta["creationTimestamp"] = _now()
            new_meta["generation"] = 1
            obj["status"] = {}
        else:
            old_meta = old["metadata"]
            new_meta["uid"] = old_meta["uid"]
            new_meta["creationTimestamp"] = old_meta["creationTimestamp"]
            changed = old.get("spec") != obj.get("spec")
            new_meta["generation"] = old_meta["generation"] + (1 if changed else 0)
            obj["status"] = old.get("status", {})
            if _strip(old) == _strip(obj):
                return copy.deepcopy(old)  # no-op apply: resourceVersion unchanged
        new_meta["resourceVersion"] = str(next(self._versions))
        new_meta["managedFields"] = [{"manager": field_manager, "operation": "Apply",
                                      "apiVersion": manifest["apiVersion"]}]
        self.objects[k] = obj
        self._collect_garbage()
        if self.auto_ready:
            self.settle()
        return copy.deepcopy(self.objects.get(k, obj))

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict | None:
        self.calls.append(("get", kind, name))
        obj = self.objects.get((api_version, kind, namespace, name))
        return copy.deepcopy(obj) if obj else None

    def list(self, api_version: str, kind: str, namespace: str, labels: dict) -> list[dict]:
        self.calls.append(("list", kind, ",".join(f"{k}={v}" for k, v in labels.items())))
        out = []
        for (av, kd, ns, _), obj in sorted(self.objects.items()):
            obj_labels = obj["metadata"].get("labels") or {}
            if (av, kd, ns) == (api_version, kind, namespace) and all(
                    obj_labels.get(k) == v for k, v in labels.items()):
                out.append(copy.deepcopy(obj))
        return out

    def delete(self, api_version: str, kind: str, namespace: str, name: str) -> bool:
        self.calls.append(("delete", kind, name))
        found = self.objects.pop((api_version, kind, namespace, name), None) is not None
        self._collect_garbage()
        return found

    # Test helpers -----------------------------------------------------------------------------

    def settle(self) -> None:
        """Workload controllers catch up: status follows spec (except held workloads)."""
        for (_, kind, _, name), obj in self.objects.items():
            if kind not in WORKLOADS:
                continue
            replicas = obj["spec"].get("replicas", 1)
            ready = min(self.held.get((kind, name), replicas), replicas)
            # A held workload is also one whose pods have not all moved to its template yet.
            revision = f"{name}-{obj['metadata']['generation']}"
            status = {"observedGeneration": obj["metadata"]["generation"], "replicas": replicas,
                      "readyReplicas": ready, "updatedReplicas": ready}
            if kind == "Deployment":
                status["availableReplicas"] = ready
            else:
                status["updateRevision"] = revision
                status["currentRevision"] = revision if ready == replicas else \
                    obj["status"].get("currentRevision", "")
            obj["status"] = status

    def hold(self, kind: str, name: str, ready: int = 0) -> None:
        self.held[(kind, name)] = ready

    def release(self, kind: str, name: str) -> None:
        self.held.pop((kind, name), None)

    def names(self, kind: str | None = None) -> set[str]:
        return {k[3] for k in self.objects if kind is None or k[1] == kind}

    def find(self, kind: str, name: str) -> dict | None:
        for k, obj in self.objects.items():
            if k[1] == kind and k[3] == name:
                return obj
        return None

    def _collect_garbage(self) -> None:
        while True:
            uids = {o["metadata"]["uid"] for o in self.objects.values()}
            orphans = [k for k, o in self.objects.items()
                       if (refs := o["metadata"].get("ownerReferences"))
                       and not any(r["uid"] in uids for r in refs)]
            if not orphans:
                return
            for k in orphans:
                del self.objects[k]


def _strip(obj: dict) -> dict:
    out = copy.deepcopy(obj)
    for f in ("resourceVersion", "managedFields", "generation"):
        out["metadata"].pop(f, None)
    return out


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# An HTTP front, so the real client (workers.infra.kube) is tested over the wire ------------------

KINDS_BY_PLURAL = {
    "configmaps": ("v1", "ConfigMap"), "secrets": ("v1", "Secret"),
    "services": ("v1", "Service"), "statefulsets": ("apps/v1", "StatefulSet"),
    "deployments": ("apps/v1", "Deployment"),
    "poddisruptionbudgets": ("policy/v1", "PodDisruptionBudget"),
    "networkpolicies": ("networking.k8s.io/v1", "NetworkPolicy"),
}


def serve(fake: FakeKubernetes, token: str):
    """Starts a REST front of `fake` on 127.0.0.1; returns (server, base URL, requests seen)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from urllib.parse import parse_qs, urlparse

    import yaml

    seen: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # quiet
            pass

        def _reply(self, code: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _status(self, code: int, reason: str) -> None:
            self._reply(code, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                               "reason": reason, "code": code})

        def _route(self):
            url = urlparse(self.path)
            parts = url.path.strip("/").split("/")
            parts = parts[2:] if parts[0] == "api" else parts[3:]
            if len(parts) < 3 or parts[0] != "namespaces" or parts[2] not in KINDS_BY_PLURAL:
                return None
            api_version, kind = KINDS_BY_PLURAL[parts[2]]
            name = parts[3] if len(parts) > 3 else ""
            return api_version, kind, parts[1], name, parse_qs(url.query)

        def _handle(self):
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length).decode() if length else ""
            seen.append({"method": self.command, "path": self.path, "body": body,
                         "content_type": self.headers.get("Content-Type"),
                         "authorization": self.headers.get("Authorization")})
            if self.headers.get("Authorization") != f"Bearer {token}":
                return self._status(401, "Unauthorized")
            route = self._route()
            if route is None:
                return self._status(404, "NotFound")
            api_version, kind, ns, name, query = route
            if self.command == "PATCH":
                if self.headers.get("Content-Type") != "application/apply-patch+yaml":
                    return self._status(415, "UnsupportedMediaType")
                manager = (query.get("fieldManager") or [""])[0]
                if not manager:
                    return self._status(422, "Invalid")
                try:
                    return self._reply(200, fake.apply(yaml.safe_load(body), manager))
                except Exception as exc:  # schema errors and the like: 422 as the API does
                    return self._status(422, str(exc)[:200])
            if self.command == "GET" and name:
                obj = fake.get(api_version, kind, ns, name)
                return self._reply(200, obj) if obj else self._status(404, "NotFound")
            if self.command == "GET":
                selector = (query.get("labelSelector") or [""])[0]
                labels = dict(p.split("=", 1) for p in selector.split(",") if p)
                items = fake.list(api_version, kind, ns, labels)
                for item in items:
                    item.pop("apiVersion"), item.pop("kind")
                return self._reply(200, {"kind": f"{kind}List", "apiVersion": api_version,
                                         "items": items})
            if self.command == "DELETE":
                if fake.delete(api_version, kind, ns, name):
                    return self._reply(200, {"kind": "Status", "status": "Success"})
                return self._status(404, "NotFound")
            return self._status(405, "MethodNotAllowed")

        do_GET = do_PATCH = do_DELETE = _handle

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}", seen
