"""Settings of the test provider, from the JSON file named by DOT_CONFIG (written by the
harness): port and issuer, keys, token format, whether RP-initiated logout is on."""
import json
import os
from pathlib import Path

CONFIG = json.loads(Path(os.environ["DOT_CONFIG"]).read_text())

SECRET_KEY = "dot-test-provider-not-secret"
DEBUG = False
ALLOWED_HOSTS = ["*"]
USE_TZ = True
ROOT_URLCONF = "tests.identity.dot_provider.urls"
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
INSTALLED_APPS = [
    "django.contrib.auth", "django.contrib.contenttypes", "django.contrib.sessions",
    "oauth2_provider", "tests.identity.dot_provider",
]
MIDDLEWARE = [
    "tests.identity.dot_provider.requestlog.RequestLog",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
]
TEMPLATES = [{"BACKEND": "django.template.backends.django.DjangoTemplates", "APP_DIRS": True,
              "OPTIONS": {"context_processors": ["django.template.context_processors.request"]}}]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": CONFIG["database"]}}
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast start, test only
LOGIN_URL = "/accounts/login/"
# Two browsers of one test (MaaS's and the provider's cookie jars) share 127.0.0.1: a cookie
# name of its own keeps the provider's session apart from MaaS's.
SESSION_COOKIE_NAME = "dot_sessionid"
CSRF_COOKIE_NAME = "dot_csrftoken"

OAUTH2_PROVIDER = {
    "OIDC_ENABLED": True,
    "OIDC_ISS_ENDPOINT": CONFIG["issuer"],
    "OIDC_RSA_PRIVATE_KEY": CONFIG["keys"][0],
    "OIDC_RSA_PRIVATE_KEYS_INACTIVE": CONFIG["keys"][1:],
    "OIDC_RP_INITIATED_LOGOUT_ENABLED": CONFIG["end_session"],
    "OIDC_RP_INITIATED_LOGOUT_ALWAYS_PROMPT": False,
    "PKCE_REQUIRED": True,
    "OAUTH2_VALIDATOR_CLASS": "tests.identity.dot_provider.validator.ClaimsValidator",
    "SCOPES": {"openid": "OpenID Connect", "email": "email", "profile": "profile",
               "introspection": "introspect tokens"},
    "ACCESS_TOKEN_EXPIRE_SECONDS": 300,
    "ROTATE_REFRESH_TOKEN": True,
}
if CONFIG["token_format"] == "jwt":
    OAUTH2_PROVIDER["ACCESS_TOKEN_GENERATOR"] = "tests.identity.dot_provider.tokens.rfc9068_token"
    # oauthlib makes refresh tokens with the access token generator unless told otherwise.
    OAUTH2_PROVIDER["REFRESH_TOKEN_GENERATOR"] = (
        "oauthlib.oauth2.rfc6749.tokens.random_token_generator")
