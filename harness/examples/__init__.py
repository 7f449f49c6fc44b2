"""Task types that ship with simrun: used by the demo, the tests and the docs."""
