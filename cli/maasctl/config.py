"""The client's settings file (like kubectl's kubeconfig): API URL, token and current tenant.

`$MAASCTL_CONFIG`, else `$XDG_CONFIG_HOME/maasctl/config.json` (`~/.config/...`); written with
mode 0600 since it holds a bearer token. `MAASCTL_URL`, `MAASCTL_TOKEN` and `MAASCTL_TENANT`
override the file, and the `--url`, `--token`, `--tenant` flags override both.
"""
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .errors import UsageError


def path() -> Path:
    if os.environ.get("MAASCTL_CONFIG"):
        return Path(os.environ["MAASCTL_CONFIG"])
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base) / "maasctl" / "config.json"


@dataclass
class Config:
    url: str = ""
    token: str = ""
    tenant: str = ""
    # How a token from the OpenID provider is renewed (set by `login --issuer`).
    oidc: dict = field(default_factory=dict)

    def require(self) -> "Config":
        if not self.url or not self.token:
            raise UsageError("not logged in: run `maasctl login --url URL --token TOKEN` "
                             f"(settings file {path()})")
        return self

    def require_tenant(self) -> str:
        if not self.tenant:
            raise UsageError("no tenant: give --tenant or run `maasctl config set-tenant NAME`")
        return self.tenant


def load(env: bool = True) -> Config:
    """The file's settings; with `env`, overridden by the MAASCTL_* variables (not when the
    file is to be written back)."""
    p = path()
    data = {}
    if p.exists():
        try:
            data = json.loads(p.read_text())
        except (OSError, ValueError) as exc:
            raise UsageError(f"cannot read {p}: {exc}") from None
    cfg = Config(**{k: v for k, v in data.items() if k in Config.__dataclass_fields__})
    for key in ("url", "token", "tenant"):
        if env and os.environ.get(f"MAASCTL_{key.upper()}"):
            setattr(cfg, key, os.environ[f"MAASCTL_{key.upper()}"])
    return cfg


def save(cfg: Config) -> Path:
    p = path()
    p.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    # Created 0600 before the token is written, never readable by others even for a moment.
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(asdict(cfg), f, indent=2)
        f.write("\n")
    os.chmod(p, 0o600)
    return p
