from __future__ import annotations

from typing import Any

from django.contrib.auth import authenticate
from django.http import HttpRequest, HttpResponse, JsonResponse
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.authtoken.models import Token
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import ScopedRateThrottle
from rest_framework.views import APIView

from opencompany.core.errors import ApplicationError


class AuthTokenInput(serializers.Serializer):
    username = serializers.CharField(max_length=150)
    password = serializers.CharField(max_length=4096, trim_whitespace=False)


class AuthTokenView(APIView):
    """`POST /api/v1/auth/token {username, password}` → `{token}` for the frontend."""

    authentication_classes: list[Any] = []
    permission_classes = [AllowAny]
    throttle_classes = [ScopedRateThrottle]
    throttle_scope = "auth_token"

    @extend_schema(
        request=AuthTokenInput,
        responses=inline_serializer("AuthTokenOutput", {"token": serializers.CharField()}),
    )
    def post(self, request: Request) -> Response:
        data = AuthTokenInput(data=request.data)
        data.is_valid(raise_exception=True)
        user = authenticate(
            request._request,
            username=data.validated_data["username"],
            password=data.validated_data["password"],
        )
        if user is None or not user.is_active:
            raise ApplicationError("invalid_credentials", "Wrong username or password.", status=401)
        token, _ = Token.objects.get_or_create(user=user)
        return Response({"token": token.key})


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if request.path.startswith("/api/"):
        return JsonResponse({"code": "not_found", "message": "Not found.", "extra": {}}, status=404)
    return HttpResponse("Not found.", status=404, content_type="text/plain")


def server_error(request: HttpRequest) -> HttpResponse:
    if request.path.startswith("/api/"):
        return JsonResponse(
            {"code": "internal_error", "message": "Something went wrong on our side.", "extra": {}},
            status=500,
        )
    return HttpResponse("Server error.", status=500, content_type="text/plain")
