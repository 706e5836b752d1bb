"""The services REST API (``/api/v1/services/``): docs/service-tools.md."""
