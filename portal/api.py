"""API plumbing shared by every endpoint: errors that name the field, and JSON for every error under /api/.

DRF answers the errors raised inside its views; Django's error handlers (``handler400`` … ``handler500`` in
``portal.urls``) answer the rest (a URL that resolves nowhere, an exception outside DRF, a 500 with DEBUG
off). Both give API clients ``{"detail": ...}``; browser pages keep Django's pages."""

import logging

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpResponse, JsonResponse
from django.views import defaults
from rest_framework import parsers, status
from rest_framework.exceptions import ParseError
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.response import Response

API_PREFIX = "/api/"
_security_log = logging.getLogger("django.security.RequestDataTooBig")


class Pagination(LimitOffsetPagination):
    """``?limit=&offset=`` pages of 50 by default; a larger ``limit`` is cut to ``max_limit`` (one answer must stay
    a few MB and a few seconds, whatever a client asks)."""

    max_limit = 1000


def is_api(request) -> bool:
    return request.path_info.startswith(API_PREFIX)


def too_big_detail() -> str:
    return f"request body too large: at most {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes are accepted"


def exception_handler(exc, context):
    """DRF's handler, plus a top-level ``detail`` on validation errors so clients always find one, and a JSON
    413 for a body over DATA_UPLOAD_MAX_MEMORY_SIZE (Django raises it when the view first reads the body)."""
    if isinstance(exc, RequestDataTooBig):
        _security_log.warning("%s: %s", exc, context["request"].path)
        return Response({"detail": too_big_detail()}, status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE)
    # Imported here: rest_framework.views reads DEFAULT_PARSER_CLASSES (this module's JSONParser) on import.
    from rest_framework.views import exception_handler as drf_exception_handler

    response = drf_exception_handler(exc, context)
    if response is not None and isinstance(response.data, dict) and "detail" not in response.data:
        fields = ", ".join(sorted(str(k) for k in response.data))
        response.data = {"detail": f"invalid input: {fields}", "errors": response.data}
    return response


class JSONParser(parsers.JSONParser):
    """DRF's JSON parser, except that a document nested deeper than the decoder can follow is a 400 parse
    error (the decoder raises RecursionError, which would otherwise be a 500)."""

    def parse(self, stream, media_type=None, parser_context=None):
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON parse error - the document is nested too deeply") from None


def bad_request(request, exception):
    """``handler400``: a 413 for a too-large body (a readable page for browsers), JSON under /api/."""
    if isinstance(exception, RequestDataTooBig):
        if is_api(request):
            return JsonResponse({"detail": too_big_detail()}, status=413)
        page = defaults.ERROR_PAGE_TEMPLATE % {"title": "Request too large (413)", "details": too_big_detail()}
        return HttpResponse(page, status=413)
    if is_api(request):
        return JsonResponse({"detail": "Bad request."}, status=400)
    return defaults.bad_request(request, exception)


def permission_denied(request, exception):
    """``handler403``: JSON under /api/, Django's page elsewhere."""
    if is_api(request):
        return JsonResponse({"detail": "You do not have permission to perform this action."}, status=403)
    return defaults.permission_denied(request, exception)


def page_not_found(request, exception):
    """``handler404``: JSON under /api/ (a URL no route matches, such as ``jobs/abc/``), Django's page elsewhere."""
    if is_api(request):
        return JsonResponse({"detail": "Not found."}, status=404)
    return defaults.page_not_found(request, exception)


def server_error(request):
    """``handler500`` (DEBUG off; DEBUG on shows Django's debug page): JSON under /api/."""
    if is_api(request):
        return JsonResponse({"detail": "A server error occurred."}, status=500)
    return defaults.server_error(request)
