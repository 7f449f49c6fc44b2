"""What the whole service shares: the store, prepared statements, sessions and the signed-in user,
login throttling, API tokens and their admin, the log format, metrics, the hand-off to workers and
the rule of a run's labels.

The bottom room: it imports nothing of ``runs`` but the models, so every other room may use it.
"""
