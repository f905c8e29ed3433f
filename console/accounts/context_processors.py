from console.accounts.roles import user_role


def roles(request) -> dict:
    return {"role": user_role(getattr(request, "user", None))}
