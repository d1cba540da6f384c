"""The API explorer at ``/docs``: Swagger UI (swagger-ui-dist 5, vendored under
``ui/vendor/swagger-ui``; 5 reads the OpenAPI 3.1 FastAPI writes) with every asset served by this
server, since these machines have no internet for the CDN FastAPI's own page loads them from. Its
start-up script is a file, not inline: the server's CSP allows scripts from itself only."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.responses import HTMLResponse, Response

from phalanx.server.policy import policy

ASSETS = "/static/vendor/swagger-ui"


def install_docs(app: FastAPI, openapi_url: str) -> None:
    @app.get("/docs", include_in_schema=False)
    @policy("signed-in")
    def docs() -> HTMLResponse:
        return HTMLResponse(PAGE, headers={"Cache-Control": "no-cache"})

    @app.get("/docs/init.js", include_in_schema=False)
    @policy("signed-in")
    def init() -> Response:
        return Response(INIT.replace("{openapi_url}", openapi_url), media_type="text/javascript")


PAGE = f"""<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>Phalanx API</title>
  <link rel="icon" href="/static/favicon.svg" type="image/svg+xml">
  <link rel="stylesheet" href="{ASSETS}/swagger-ui.css">
</head>
<body>
  <div id="swagger-ui"></div>
  <script src="{ASSETS}/swagger-ui-bundle.js"></script>
  <script src="/docs/init.js"></script>
</body>
</html>
"""

# validatorUrl null: no badge fetched from validator.swagger.io (nothing leaves this server)
INIT = """window.ui = SwaggerUIBundle({
  url: "{openapi_url}",
  dom_id: "#swagger-ui",
  deepLinking: true,
  validatorUrl: null,
  presets: [SwaggerUIBundle.presets.apis],
  layout: "BaseLayout",
});
"""
