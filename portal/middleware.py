"""Request checks that every view would otherwise repeat."""

from django.http import HttpResponse, JsonResponse

from portal.api import is_api


class RejectNulCharacters:
    """A NUL character in a query parameter is refused with 400, naming the parameter: PostgreSQL cannot
    store or compare text holding one, so it would otherwise fail deep inside a query (a 500) wherever the
    value reaches the database. (Form fields and JSON bodies are checked by their forms and serializers,
    which name the field in their own error.)"""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        fields = [k for k, v in request.GET.lists() if "\x00" in k or any("\x00" in x for x in v)]
        if not fields:
            return self.get_response(request)
        names = [k.replace("\x00", "\\0") for k in fields]
        message = "must not contain a NUL character"
        if is_api(request):
            return JsonResponse({"detail": f"invalid input: {', '.join(names)}",
                                 "errors": {name: [message] for name in names}}, status=400)
        return HttpResponse(f"Bad request: {', '.join(names)} {message}.", status=400,
                            content_type="text/plain; charset=utf-8")
