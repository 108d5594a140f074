"""How a pydantic validation failure is told to people: one ``{field, message}`` per problem."""
from pydantic import ValidationError


def field_errors(exc: ValidationError, root: str) -> list[dict]:
    """``[{"field": "rollout.noise_sigma", "message": ...}]``; ``root`` names a top-level problem."""
    return [
        {"field": ".".join(str(p) for p in err["loc"]) or root, "message": err["msg"]}
        for err in exc.errors(include_url=False)
    ]


def summary(errors: list[dict]) -> str:
    return "; ".join(f"{e['field']}: {e['message']}" for e in errors)
