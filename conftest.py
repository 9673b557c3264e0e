"""Root conftest: loads qpconform's pytest plugin (device options and fixtures)."""

pytest_plugins = ["fixtures.plugin"]
