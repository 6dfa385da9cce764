"""maasctl: the command-line client of MaaS (standalone: it imports nothing of the server)."""
__version__ = "0.1.0"
