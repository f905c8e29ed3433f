"""Tokens for automation, and users with their roles (admin)."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins, serializers, status
from rest_framework.authtoken.serializers import AuthTokenSerializer
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import AnonRateThrottle
from rest_framework.views import APIView

from console.accounts.roles import ROLES, user_role
from console.accounts.services import user_create, user_token_issue
from console.api.base import API_PARSERS, BAD_INPUT, ApiViewSet


class TokenRequestSerializer(serializers.Serializer):
    username = serializers.CharField()
    password = serializers.CharField(style={"input_type": "password"}, trim_whitespace=False)


class TokenSerializer(serializers.Serializer):
    token = serializers.CharField(help_text="Send as `Authorization: Token <token>`.")


class TokenThrottle(AnonRateThrottle):
    """Slows password guessing against the one endpoint that takes a password."""

    scope = "api-token"
    rate = "20/minute"


class TokenView(APIView):
    """Username and password in, API token out; no session or token needed to call it."""

    authentication_classes: list = []
    permission_classes = [AllowAny]
    parser_classes = API_PARSERS
    throttle_classes = [TokenThrottle]

    @extend_schema(
        summary="Get an API token", operation_id="auth_token", tags=["auth"],
        description="Issues a fresh token for the user; the user's earlier token (from here or "
        "from the account page) stops working. Wrong credentials: 400, nothing issued.",
        request=TokenRequestSerializer, responses={200: TokenSerializer, 400: BAD_INPUT}, auth=[],
    )
    def post(self, request: Request) -> Response:
        # AuthTokenSerializer checks the password through Django's authenticate()
        # (inactive users are refused) and says only "unable to log in" when it fails.
        credentials = AuthTokenSerializer(data=request.data, context={"request": request})
        credentials.is_valid(raise_exception=True)
        token = user_token_issue(user=credentials.validated_data["user"])
        return Response({"token": token})


class UserSerializer(serializers.ModelSerializer):
    role = serializers.SerializerMethodField(help_text="viewer, operator, admin, or null for none.")

    class Meta:
        model = get_user_model()
        fields = ["id", "username", "email", "role", "is_active", "date_joined", "last_login"]
        read_only_fields = fields

    def get_role(self, user) -> str | None:
        return user_role(user)


class UserCreateSerializer(serializers.Serializer):
    username = serializers.CharField(max_length=150)
    email = serializers.EmailField(required=False, allow_blank=True, default="")
    password = serializers.CharField(write_only=True, trim_whitespace=False, max_length=1000,
                                     style={"input_type": "password"})
    role = serializers.ChoiceField(choices=ROLES)

    def validate_username(self, value: str) -> str:
        model = get_user_model()
        username_field = model._meta.get_field(model.USERNAME_FIELD)
        try:
            username_field.run_validators(value)
        except DjangoValidationError as exc:
            raise serializers.ValidationError(exc.messages) from exc
        return value

    def validate(self, data: dict) -> dict:
        candidate = get_user_model()(username=data["username"], email=data.get("email", ""))
        try:
            validate_password(data["password"], user=candidate)
        except DjangoValidationError as exc:
            raise serializers.ValidationError({"password": exc.messages}) from exc
        return data


@extend_schema(tags=["users"])
@extend_schema_view(
    list=extend_schema(operation_id="users_list", summary="Users and their roles (admin)"),
    create=extend_schema(operation_id="users_create", summary="Create a user with a role (admin)",
                         request=UserCreateSerializer, responses={201: UserSerializer, 400: BAD_INPUT}),
)
class UserViewSet(mixins.ListModelMixin, ApiViewSet):
    queryset = get_user_model().objects.order_by("username")
    serializer_class = UserSerializer
    read_permission = "auth.change_user"
    write_permission = "auth.add_user"

    def create(self, request: Request) -> Response:
        body = UserCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        user = user_create(actor=request.user, **body.validated_data)
        return Response(UserSerializer(user).data, status=status.HTTP_201_CREATED)
