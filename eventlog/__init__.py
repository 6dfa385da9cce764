"""The config log: every change as an immutable, versioned event in a gap-free stream per
address space, tenant or the operators' plans, with its outbox row and the after-commit fan-out.
It knows no address space or tenant model: the apps above register how their events project."""
