"""A space's router pod run on this machine from what the (fake) API holds: its ConfigMap and
Secrets written where the pod's volumes would mount them (under a temporary directory), its
listeners moved to free loopback ports, the id the image would expand. What qdrouterd then
reads is byte for byte what the controller applied, so the TLS of every internal listener is
tested as a cluster would run it."""
import base64
import json
from dataclasses import dataclass
from pathlib import Path

from tests.router.conftest import free_port
from workers.infra import manifests as m


@dataclass
class RouterPod:
    config: Path
    ports: dict[str, int]  # listener name -> the free port it was moved to
    mounts: dict[str, Path]  # the pod's mount path -> where its files are here


def _volume_files(kube, volume: dict) -> dict[str, str]:
    if "configMap" in volume:
        source = kube.find("ConfigMap", volume["configMap"]["name"])["data"]
        items = volume["configMap"].get("items")
    else:
        data = kube.find("Secret", volume["secret"]["secretName"])["data"]
        source = {k: base64.b64decode(v).decode() for k, v in data.items()}
        items = volume["secret"].get("items")
    if items:
        return {i["path"]: source[i["key"]] for i in items}
    return dict(source)


def router_pod(kube, space: m.SpaceInfra, where: Path, index: int = 0,
               auth: tuple[str, int] | None = None) -> RouterPod:
    """Replica `index` of the space's router StatefulSet, ready to start; `auth`: where the
    auth service listens here."""
    sts = kube.find("StatefulSet", m.router_name(space.infra))
    pod = sts["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {}
    for mount in container["volumeMounts"]:
        volume = volumes[mount["name"]]
        if "emptyDir" in volume:
            continue
        here = where / mount["mountPath"].strip("/").replace("/", "_")
        here.mkdir(parents=True, exist_ok=True)
        for name, text in _volume_files(kube, volume).items():
            (here / name).write_text(text)
        mounts[mount["mountPath"]] = here
    env = {e["name"]: e["value"] for e in container["env"]}
    conf_dir, _, conf_file = env["QDROUTERD_CONF"].rpartition("/")
    text = (mounts[conf_dir] / conf_file).read_text()
    for path, here in sorted(mounts.items(), key=lambda kv: -len(kv[0])):
        text = text.replace(f"{path}/", f"{here}/")
    config = json.loads(text.replace("${HOSTNAME}", f"{m.router_name(space.infra)}-{index}"))
    ports = {}
    for etype, attrs in config:
        if etype == "listener":
            attrs["host"] = "127.0.0.1"
            ports[attrs["name"]] = free_port()
            attrs["port"] = str(ports[attrs["name"]])
        if etype == "authServicePlugin" and auth:
            attrs["host"], attrs["port"] = auth[0], str(auth[1])
    path = where / "qdrouterd.json"
    path.write_text(json.dumps(config, indent=2))
    return RouterPod(path, ports, mounts)


def secret_files(kube, name: str, where: Path) -> dict[str, str]:
    """A Secret's keys as files in `where`: {key: path}."""
    where.mkdir(parents=True, exist_ok=True)
    out = {}
    for key, value in kube.find("Secret", name)["data"].items():
        (where / key).write_text(base64.b64decode(value).decode())
        out[key] = str(where / key)
    return out


class RunningRouter:
    """Replica 0 of a space's router pod, running: qdrouterd on the controller's objects in
    `kube`, relaying logins to the real auth service over TLS with the certificate the
    internal CA gave it (internal_ca.ensure_auth_service_certificate). `bundle`: the pod's
    internal CA bundle, what the agent's clients check."""

    def __init__(self, kube, space: m.SpaceInfra, where: Path, namespace: str):
        import ssl
        import subprocess

        from dataplane import qdrouterd
        from tests.router.conftest import FixedAuthService, terminate, wait_port
        from workers.infra import internal_ca

        ca = internal_ca.read(kube, namespace)
        internal_ca.ensure_auth_service_certificate(kube, namespace, ca)
        files = secret_files(kube, internal_ca.AUTH_SERVICE_SECRET, where / "auth")
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(files["tls.crt"], files["tls.key"])
        self.auth = FixedAuthService(ssl_context=context)  # TLS only, as on the cluster
        self.pod = router_pod(kube, space, where / "pod", auth=("127.0.0.1", self.auth.port))
        self.ports, self.space = self.pod.ports, space
        self.bundle = str(self.pod.mounts[m.ROUTER_INTERNAL_DIR] / m.CA_FILE)
        self.log = where / "qdrouterd.log"
        self._terminate = terminate
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(qdrouterd.command(self.pod.config), stdout=out,
                                         stderr=out)
        try:
            for name in ("amqp", "amqps", "internal", "management", "inter-router"):
                wait_port(self.ports[name], timeout=10, process=self.proc)
        except RuntimeError as exc:
            self.stop()
            raise RuntimeError(f"qdrouterd did not start: {self.log.read_text()[-3000:]}") \
                from exc

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        self._terminate(self.proc)
        self.auth.stop()
