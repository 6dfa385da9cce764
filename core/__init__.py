"""What every app may import, and which imports no app: who acts (`context`), the service
errors (`errors`), bounds on untrusted input (`limits`), model instances from hand-written SQL
(`rows`), the REST API's shared pieces (`api`). The bottom layer but one (docs/architecture.md,
"Layers")."""
