"""The catalogue: what an operator is (registry, work models), what the accelerators can do (hardware table),
the speed-of-light time of a problem (roofline), and the words every package shares (vocabulary).

The ground floor of hotshape: it imports only the standard library and pyyaml, and every other package may
import it (tests/catalogue/test_layering.py)."""
