"""The MaaS REST API over HTTP (requests): bearer token, JSON bodies, the API's one error
shape turned into `ApiError`, and list pages followed to the end."""
import requests

from . import __version__
from .errors import ApiError, Unreachable

API = "/api/v1/"


class Client:
    def __init__(self, url: str, token: str, timeout: float = 30.0):
        self.base = url.rstrip("/") + API
        self.timeout = timeout
        self.session = requests.Session()
        self.session.headers.update({"Authorization": f"Bearer {token}",
                                     "Accept": "application/json",
                                     "User-Agent": f"maasctl/{__version__}"})

    def request(self, method: str, path: str, body: dict | None = None,
                params: dict | None = None) -> requests.Response:
        url = path if path.startswith("http") else self.base + path.lstrip("/")
        try:
            response = self.session.request(method, url, json=body, params=params,
                                            timeout=self.timeout)
        except requests.ConnectionError as exc:
            raise Unreachable(f"cannot reach the MaaS API at {self.base}: {exc}") from None
        except requests.Timeout:
            raise Unreachable(f"no answer from the MaaS API at {self.base} within "
                              f"{self.timeout:g}s") from None
        if response.status_code >= 400:
            raise error_of(response)
        return response

    def get(self, path: str, params: dict | None = None) -> dict:
        return self.request("GET", path, params=params).json()

    def items(self, path: str, params: dict | None = None) -> list[dict]:
        """Every item of a list, page after page (the envelope's `metadata.next`)."""
        page = self.get(path, params)
        items = list(page.get("items", []))
        while (page.get("metadata") or {}).get("next"):
            page = self.get(page["metadata"]["next"])
            items.extend(page.get("items", []))
        return items

    def post(self, path: str, body: dict) -> dict:
        return self.request("POST", path, body).json()

    def put(self, path: str, body: dict) -> dict:
        return self.request("PUT", path, body).json()

    def delete(self, path: str) -> None:
        self.request("DELETE", path)


def error_of(response: requests.Response) -> ApiError:
    """The server's own message where it sent the API's error shape, else the HTTP reason."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and (body.get("message") or body.get("detail")):
        return ApiError(response.status_code, str(body.get("message") or body.get("detail")),
                        body.get("field"), body.get("code"))
    text = response.reason or "error"
    if response.status_code == 405:
        text = f"the server does not support {response.request.method} on {response.url}"
    return ApiError(response.status_code, text)
