"""API plumbing shared by every endpoint: errors that name the field, and JSON for every error under /api/.

DRF answers the errors raised inside its views; Django's error handlers (``handler400`` … ``handler500`` in
``portal.urls``) answer the rest (a URL that resolves nowhere, an exception outside DRF, a 500 with DEBUG
off). Both give API clients ``{"detail": ...}``; browser pages keep Django's pages."""

import logging

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpResponse, JsonResponse
from django.utils.translation import gettext_lazy as _
from django.views import defaults
from rest_framework import authentication, parsers, status
from rest_framework.exceptions import AuthenticationFailed, ParseError
from rest_framework.fields import Field, SkipField
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.relations import PKOnlyObject
from rest_framework.response import Response

API_PREFIX = "/api/"
_security_log = logging.getLogger("django.security.RequestDataTooBig")


class TokenAuthentication(authentication.TokenAuthentication):
    """DRF's ``Authorization: Token <key>``, the token and its user remembered per process at the reference
    version (``scheduler.services.reference.Reference.api_token``): a deleted token, an inactive or deleted user
    fail from the first request after the commit, as before, without a query joining the user at each request.
    The version read is kept on the request for the view's own lookups (``reference.of_request``)."""

    reference = None

    def authenticate(self, request):
        found = super().authenticate(request)  # the header's checks, then authenticate_credentials
        request.reference = self.reference
        return found

    def authenticate_credentials(self, key):
        from scheduler.services import reference  # the scheduler's models: not while the settings load

        self.reference = reference.now()
        found = self.reference.api_token(key)
        if found is None:
            raise AuthenticationFailed(_("Invalid token."))
        if not found[0].is_active:
            raise AuthenticationFailed(_("User inactive or deleted."))
        return found


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


class PlannedRepresentation:
    """For output serializers whose fields need no context (no request, no per-call options): render through
    fields bound once per serializer class, in one prototype instance, instead of the fields DRF deep-copies
    (a ModelSerializer: builds from the model) for every serializer made. A job's serializer took 3.8 ms to
    build its ~45 fields and 0.3 ms to render a row, so one submit's answer paid 4 ms and a page of 50 jobs
    18 ms; the loop below is DRF's own (``Serializer.to_representation``), over the prototype's fields. Fields
    only read their prototype (``SerializerMethodField`` calls its method there), so threads share it safely;
    a serializer given a context renders the ordinary way."""

    @classmethod
    def _planned_fields(cls) -> list[tuple]:
        """``(name, column, field)`` per readable field; ``column``: the model column the field reads as it is
        (a plain ``getattr``, DRF's lookup without its checks for mappings, callables and missing relations),
        None where DRF's own ``get_attribute`` must look (dotted sources, methods, relations)."""
        planned = cls.__dict__.get("_planned")
        if planned is None:  # per class (a subclass has fields of its own); two threads may both build it: harmless
            meta = getattr(cls, "Meta", None)
            model = getattr(meta, "model", None)
            columns = {f.attname for f in model._meta.concrete_fields if not f.is_relation} if model else set()
            planned = []
            for field in cls()._readable_fields:
                plain = (len(field.source_attrs) == 1 and field.source_attrs[0] in columns
                         and type(field).get_attribute is Field.get_attribute)
                planned.append((field.field_name, field.source_attrs[0] if plain else None, field))
            cls._planned = planned
        return planned

    def to_representation(self, instance):
        if self._context:
            return super().to_representation(instance)
        planned = self._planned_fields()
        model = self.Meta.model if hasattr(self, "Meta") else None
        columns = model is not None and isinstance(instance, model)  # else (a mapping, say) DRF's lookup for all
        ret = {}
        for name, column, field in planned:
            if column is not None and columns:
                value = getattr(instance, column)
                ret[name] = None if value is None else field.to_representation(value)
                continue
            try:  # DRF's own steps (``Serializer.to_representation``)
                attribute = field.get_attribute(instance)
            except SkipField:
                continue
            check_for_none = attribute.pk if isinstance(attribute, PKOnlyObject) else attribute
            ret[name] = None if check_for_none is None else field.to_representation(attribute)
        return ret


class SharedFields:
    """For input serializers whose fields need no context (no request, no partial update): validate through
    fields bound once per serializer class, in one prototype instance, instead of the fields DRF deep-copies
    for every serializer made (the job request's ~25 fields: about 1.3 ms of each submit's ~13 ms). A field
    only reads its own settings while it validates (its errors, limits, child field), never its parent's
    state, so threads share the prototype's fields safely; what a validation produces (``validated_data``,
    ``errors``) stays on the serializer made for the request. A serializer given a context, or a partial one,
    builds its own fields the ordinary way."""

    @property
    def fields(self):
        own = self.__dict__.get("fields")  # DRF's cached property keeps a serializer's own fields here
        if own is not None:
            return own
        if self._context or self.partial:
            return super().fields
        cls = type(self)
        prototype = cls.__dict__.get("_prototype")
        if prototype is None:  # per class; two threads may both build one: harmless, the last one stays
            prototype = cls()
            super(SharedFields, prototype).fields  # noqa: B018 - builds and keeps DRF's bound fields
            cls._prototype = prototype
        return prototype.fields
