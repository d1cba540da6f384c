"""One router per resource, mounted under /api/v1 by ``phalanx.server.app.create_app``."""
