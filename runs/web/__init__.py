"""The dashboard: its views, and what only its pages compute (the DAG, the timeline, the charts,
the runs table), with the middleware that guards the service's edge.

The top room beside ``runs.cli``: it may import every other room (the pages reuse the API's
listing and its file answers), and nothing imports it but ``runs.urls`` and the settings.
"""
