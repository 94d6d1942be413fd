"""A notebook opened in Chromium through the portal: alice's notebook job runs a real JupyterLab in a container
(node agent, container executor); its job page links to /notebooks/<id>/, served by the portal over ASGI (the
proxy adds the server's token); a new Python notebook runs print(6*7) in a kernel and shows 42. A member of
another team who is signed in gets the portal's 404 at the same address."""

import pytest
from rest_framework.test import APIClient

from tests.browser.test_pages import browser_instance, shot, sign_in  # noqa: F401 (fixtures)
from tests.notebooks import asgi_portal, notebook_image, notebook_node, wait_running_notebook  # noqa: F401

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def asgi_page(browser_instance, asgi_portal):  # noqa: F811
    context = browser_instance.new_context(viewport={"width": 1280, "height": 900}, base_url=asgi_portal)
    page = context.new_page()
    page.set_default_timeout(30_000)
    yield page
    context.close()


def test_a_kernel_runs_code_in_jupyterlab_through_the_portal_and_an_outsider_gets_404(
    asgi_page, alice, charlie, notebook_node  # noqa: F811
):
    page = asgi_page
    api = APIClient()
    api.force_authenticate(alice)
    answer = api.post("/api/v1/jobs/", {"name": "lab", "kind": "notebook", "gpu_model": "h100-80gb"}, format="json")
    assert answer.status_code == 201, answer.json()
    job_id = answer.json()["id"]
    wait_running_notebook(job_id)

    sign_in(page, "alice")
    page.goto(f"/jobs/{job_id}/")
    link = page.locator("#open-notebook")
    assert link.get_attribute("href") == f"/notebooks/{job_id}/"
    shot(page, "notebook-job")
    # The server may still be starting: the proxy answers 502 until it listens.
    for _ in range(60):
        response = page.goto(f"/notebooks/{job_id}/lab")
        if response.status == 200:
            break
        page.wait_for_timeout(1000)
    assert response.status == 200 and page.url.endswith(f"/notebooks/{job_id}/lab")
    page.locator('.jp-LauncherCard[data-category="Notebook"]').first.click(timeout=60_000)
    editor = page.locator(".jp-NotebookPanel .jp-Cell .cm-content").first
    editor.wait_for(timeout=60_000)
    page.get_by_text("Python 3 (ipykernel) | Idle").wait_for(timeout=120_000)  # the kernel is up (status bar)
    editor.focus()  # (a click can land on a toast of JupyterLab's while a busy machine lays the page out)
    page.keyboard.type("print(6*7)")
    page.keyboard.press("Shift+Enter")
    shot(page, "notebook-ran")
    output = page.locator(".jp-NotebookPanel .jp-OutputArea-output").first
    output.wait_for(timeout=60_000)
    assert output.inner_text().strip() == "42"
    shot(page, "notebook-lab")

    outsider = page.context.browser.new_context(base_url=page.url.split("/notebooks/")[0])
    other = outsider.new_page()
    sign_in(other, "charlie")
    assert other.goto(f"/notebooks/{job_id}/lab").status == 404
    outsider.close()
