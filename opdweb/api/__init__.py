"""A small JSON API layer on plain Django views: session authentication (and a bearer
token, through the hook the project passes to :class:`Api`), pydantic
validation of bodies and query strings, errors as ``{"detail", "errors"}`` with a 4xx,
and an OpenAPI 3.1 document built from the same declarations (``/api/openapi.json``).

Each app declares its endpoints once on its own :class:`Routes` (``routes.get(...)``);
``opdweb/urls.py`` gathers the apps' routes into one :class:`Api`.  The declaration drives
the validation, the response shape and the schema, so they cannot drift apart.  Nothing
here knows any app.

Ours, rather than django-ninja or DRF, weighed for issue 20: the layer is small and does
exactly what the API promises: unknown query parameters refused, NUL/NaN/deep JSON refused
before PostgreSQL sees it, one ``Problem`` shape for every refusal (Django's own 400/403/
404/500 and CSRF failures included), and a document that lists each of them, which the
schemathesis run holds us to.  django-ninja (pydantic, the nearest fit) would need custom
handlers for the error shape and the unknown-parameter rule and would change the document;
DRF brings serializers beside our pydantic configs and a second schema package.  Either
adds a dependency and adapters about the size of what they would replace.

Modules: :mod:`.declarations` (what an app declares), :mod:`.routing` (dispatch),
:mod:`.openapi`, :mod:`.json_input`, :mod:`.errors`, :mod:`.compression`.
"""
from opdweb.api.declarations import Routes
from opdweb.api.json_input import check_storable, load_json
from opdweb.api.routing import Api

__all__ = ["Api", "Routes", "check_storable", "load_json"]
