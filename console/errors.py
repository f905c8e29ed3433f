"""The one place that turns errors into HTTP and htmx responses.

A broker that fails is the broker's failure, not the console's: pages show its
message, the API answers 424 (Failed Dependency) with a JSON body. Unknown ids are
404s, malformed input 400s. Nothing here lets a known failure become a 500.
"""

from __future__ import annotations

import logging

from django.core.exceptions import ObjectDoesNotExist, ValidationError
from django.http import Http404
from django.shortcuts import render
from rest_framework import status
from rest_framework.exceptions import NotFound
from rest_framework.exceptions import ValidationError as DRFValidationError
from rest_framework.response import Response
from rest_framework.views import exception_handler

from brokers.base import BrokerError

logger = logging.getLogger(__name__)

BROKER_ERROR_STATUS = status.HTTP_424_FAILED_DEPENDENCY


class BrokerErrorMiddleware:
    """Pages: a BrokerError or missing object that escaped a view becomes a page
    saying what went wrong."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        if request.path.startswith("/api/"):
            return None
        if isinstance(exception, BrokerError):
            logger.warning("broker error on %s: %s", request.path, exception.message)
            return render(request, "error.html", {"title": "The broker did not answer as expected",
                                                  "message": exception.message},
                          status=BROKER_ERROR_STATUS)
        if isinstance(exception, ObjectDoesNotExist):
            raise Http404(str(exception)) from exception
        return None


def api_exception_handler(exc, context):
    if isinstance(exc, BrokerError):
        return Response({"error": exc.message, "permanent": exc.permanent},
                        status=BROKER_ERROR_STATUS)
    if isinstance(exc, ObjectDoesNotExist):
        exc = NotFound(str(exc) or "Not found.")
    elif isinstance(exc, ValidationError):
        exc = DRFValidationError(exc.message_dict if hasattr(exc, "error_dict") else exc.messages)
    response = exception_handler(exc, context)
    if response is not None and isinstance(response.data, dict) and "detail" in response.data:
        response.data = {"error": str(response.data["detail"])}
    return response
