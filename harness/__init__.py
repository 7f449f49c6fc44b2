"""The simrun harness: the code that runs inside the pods (no Django here, ever)."""

__version__ = "0.1.0"
