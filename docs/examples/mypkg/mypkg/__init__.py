"""The package of docs/run-spec.md's complete example (``python -m mypkg.plot``)."""
