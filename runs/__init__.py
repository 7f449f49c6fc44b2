"""The simrun service: runs, their control loop, backends, API, dashboard and CLI."""
