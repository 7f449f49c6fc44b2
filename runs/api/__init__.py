"""The REST API of simrun (Django REST framework)."""
