"""Static files go out under hashed names, cached for a year and compressed: the plotly
bundles (4.8 MB whole, 1.5 MB cartesian for the job pages) must not be sent as is."""
import gzip
from pathlib import Path

import pytest
from django.contrib.staticfiles.storage import staticfiles_storage

from tests.web.factories import JobFactory

ROOT = Path(__file__).resolve().parents[2]
YEAR = 365 * 24 * 3600


def fetch(client, url: str, **headers):
    response = client.get(url, headers=headers)
    body = b"".join(response.streaming_content) if response.streaming else response.content
    return response, body


def max_age(response) -> int:
    parts = dict(p.strip().partition("=")[::2] for p in response["Cache-Control"].split(","))
    return int(parts["max-age"])


BUNDLES = ("plotly-cartesian.min",)


@pytest.mark.parametrize("bundle", BUNDLES)
def test_plotly_is_served_gzipped_under_a_hashed_name_with_a_long_cache(client, bundle):
    original = (ROOT / "static" / "vendor" / f"{bundle}.js").read_bytes()
    url = staticfiles_storage.url(f"vendor/{bundle}.js")
    assert url.startswith(f"/static/vendor/{bundle}.") and url != f"/static/vendor/{bundle}.js"
    response, body = fetch(client, url, accept_encoding="gzip, deflate, br")
    assert response.status_code == 200
    assert response["Content-Encoding"] in ("gzip", "br")
    assert max_age(response) >= YEAR
    assert len(body) < len(original) / 2  # plotly compresses about 3x
    if response["Content-Encoding"] == "gzip":
        assert gzip.decompress(body) == original


@pytest.mark.parametrize("bundle", BUNDLES)
def test_a_client_without_compression_gets_the_plain_file(client, bundle):
    original = (ROOT / "static" / "vendor" / f"{bundle}.js").read_bytes()
    response, body = fetch(client, staticfiles_storage.url(f"vendor/{bundle}.js"))
    assert response.status_code == 200 and "Content-Encoding" not in response and body == original


@pytest.mark.django_db
def test_the_job_page_and_every_page_link_the_hashed_names(client, member):
    user, team = member
    client.force_login(user)
    job = JobFactory(team=team)
    html = client.get(f"/jobs/{job.pk}/").content.decode()
    assert staticfiles_storage.url("vendor/plotly-cartesian.min.js") in html
    assert staticfiles_storage.url("favicon.svg") in html and 'rel="icon"' in html
    response, body = fetch(client, staticfiles_storage.url("favicon.svg"))
    assert response.status_code == 200 and body.startswith(b"<svg")
