import re

from fastapi.testclient import TestClient

from phalanx.server.routes.pages import UI_DIR


def test_every_page_path_serves_the_ui_shell(client: TestClient) -> None:
    for path in ("/", "/experiments/0123456789ab", "/compare?ids=a,b"):
        r = client.get(path)
        assert r.status_code == 200 and '<main id="app"' in r.text


def test_the_ui_loads_nothing_from_outside_the_server(client: TestClient) -> None:
    external = re.compile(r"""(src|href)\s*=\s*["']?(https?:)?//""", re.I)
    imports = re.compile(r"""(import\s.*from\s+|fetch\()\s*["'`]https?://""")
    for path in UI_DIR.rglob("*"):
        if path.suffix in (".html", ".js", ".css") and "vendor" not in path.parts:
            text = path.read_text()
            assert not external.search(text) and not imports.search(text), path
            assert "url(http" not in text, path
    shell = client.get("/").text
    for asset in re.findall(r"""(?:src|href)="(/static/[^"]+)\"""", shell):
        assert client.get(asset).status_code == 200, asset


def test_the_api_explorer_serves_its_own_assets_not_a_cdn(client: TestClient) -> None:
    assert client.get("/api/v1/docs").status_code == 404
    assert client.get("/api/v1/openapi.json").json()["info"]["title"] == "Phalanx"
    page = client.get("/docs")
    assert page.status_code == 200 and "/api/v1/openapi.json" in client.get("/docs/init.js").text
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page.text, re.I), page.text
    assets = re.findall(r"""(?:src|href)\s*=\s*["'](/[^"']+)["']""", page.text)
    assert any(a.endswith("swagger-ui-bundle.js") for a in assets), assets
    for asset in assets:
        assert client.get(asset).status_code == 200, asset
