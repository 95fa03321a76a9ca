"""The API docs (Swagger UI at /docs, ReDoc at /redoc) render in headless Chromium under their
content-security policy: the pages' own scripts run, nothing is refused, nothing is loaded from
elsewhere; and an inline script the policy does not name would not run."""

from __future__ import annotations

from tests.browser.conftest import Probe


def test_swagger_ui_renders_the_endpoints_under_its_policy(probe: Probe) -> None:
    response = probe.goto("/docs")
    assert "script-src 'self' 'sha256-" in response.headers["content-security-policy"]
    probe.page.wait_for_selector(".opblock-summary-path", timeout=15_000)
    paths = probe.page.locator(".opblock-summary-path").all_text_contents()
    assert any("/v1/studies" in p for p in paths), paths
    probe.assert_clean()


def test_redoc_renders_under_its_policy(probe: Probe) -> None:
    response = probe.goto("/redoc")
    assert "object-src 'none'" in response.headers["content-security-policy"]
    probe.page.get_by_text("/v1/studies/{name}").first.wait_for(timeout=15_000)
    # ReDoc's sidebar always asks its maker's CDN for a logo: the policy refuses it (a GPU box
    # in a closed network could not fetch it anyway). Its workers run from blobs of this page.
    logo = "https://cdn.redoc.ly/redoc/logo-mini.svg"
    assert [e for e in probe.errors if logo not in e] == []
    assert {u for u in probe.foreign if not u.startswith(f"blob:{probe.base_url}/")} <= {logo}


def test_an_inline_script_the_policy_does_not_name_is_refused(probe: Probe) -> None:
    probe.goto("/docs")
    probe.page.wait_for_selector(".opblock-summary-path", timeout=15_000)
    probe.page.evaluate(
        """() => { const s = document.createElement('script');
                   s.textContent = 'window.__injected = 1'; document.body.appendChild(s); }"""
    )
    assert probe.page.evaluate("() => window.__injected === undefined")
    assert any("Content Security Policy" in e for e in probe.errors), probe.errors
