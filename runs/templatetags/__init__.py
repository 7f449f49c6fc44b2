"""Template tags and filters of the dashboard."""
