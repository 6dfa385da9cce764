"""`python -m maasctl`, the same as the `maasctl` console script."""
from .main import main

raise SystemExit(main())
