"""django-oauth-toolkit set up as an operator would run it as an OpenID provider: the identity
suite's second real provider, run as its own process with its own SQLite database
(tests/identity/dot.py starts it). Not part of MaaS."""
