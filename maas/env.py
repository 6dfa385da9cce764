"""Typed readers for environment variables, with a NAME_FILE variant for Kubernetes secrets."""
import os
from urllib.parse import unquote, urlparse


def env(name: str, default: str | None = None) -> str | None:
    """The value of NAME, or the contents of the file named by NAME_FILE, or default."""
    path = os.environ.get(f"{name}_FILE")
    if path:
        with open(path, encoding="utf-8") as fh:
            return fh.read().strip()
    return os.environ.get(name, default)


def env_bool(name: str, default: bool = False) -> bool:
    value = env(name)
    if value is None:
        return default
    return value.strip().lower() in ("1", "true", "yes", "on")


def env_int(name: str, default: int) -> int:
    value = env(name)
    return default if value in (None, "") else int(value)


def env_float(name: str, default: float) -> float:
    value = env(name)
    return default if value in (None, "") else float(value)


def env_list(name: str, default: str = "") -> list[str]:
    return [item.strip() for item in (env(name, default) or "").split(",") if item.strip()]


def database_from_url(url: str) -> dict:
    """A Django DATABASES entry from postgres://user:password@host:port/name."""
    parsed = urlparse(url)
    if parsed.scheme not in ("postgres", "postgresql"):
        raise ValueError(f"DATABASE_URL must be a postgres:// URL, not {parsed.scheme}://")
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(parsed.path.lstrip("/")),
        "USER": unquote(parsed.username or ""),
        "PASSWORD": unquote(parsed.password or ""),
        "HOST": parsed.hostname or "",
        "PORT": str(parsed.port or ""),
        "CONN_MAX_AGE": 60,
        "CONN_HEALTH_CHECKS": True,
    }
