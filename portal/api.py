"""API plumbing shared by every endpoint: errors that name the field."""

from rest_framework.views import exception_handler as drf_exception_handler


def exception_handler(exc, context):
    """DRF's handler, plus a top-level ``detail`` on validation errors so clients always find one."""
    response = drf_exception_handler(exc, context)
    if response is not None and isinstance(response.data, dict) and "detail" not in response.data:
        fields = ", ".join(sorted(str(k) for k in response.data))
        response.data = {"detail": f"invalid input: {fields}", "errors": response.data}
    return response
