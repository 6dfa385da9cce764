"""What every app may import, and which imports no app: who acts (`context`), the service
errors (`errors`) and the API's shared helpers (`pagination`, `api_errors`).

It is the bottom layer of docs/architecture.md ("Layers"); tests/test_layers.py enforces that."""
