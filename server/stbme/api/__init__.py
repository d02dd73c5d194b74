"""The one HTTP layer: the app factory, middlewares (errors, CORS, auth, limits), request parsing and
validation, the routes (main, live channel, DNA) and the DNA hub server, all on the same error shape."""

from .app import DEFAULT_PORT, create_app, services_key

__all__ = ["DEFAULT_PORT", "create_app", "services_key"]
