"""Errors in OpenAI's shape, {"error": {"message", "type", "param", "code"}}, with a 4xx status
for the client's mistakes."""
from __future__ import annotations

from typing import Optional

from fastapi.responses import JSONResponse


class APIError(Exception):
    def __init__(self, status: int, message: str, kind: str = "invalid_request_error", code: Optional[str] = None,
                 param: Optional[str] = None, retry_after: Optional[int] = None):
        super().__init__(message)
        self.status, self.message, self.kind, self.code, self.param = status, message, kind, code, param
        self.retry_after = retry_after


def error_response(status: int, message: str, kind: str, code: Optional[str] = None, param: Optional[str] = None,
                   retry_after: Optional[int] = None) -> JSONResponse:
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
    return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": code}}, status_code=status,
                        headers=headers)


def model_error(exc: Exception) -> APIError:
    """What the model's exceptions mean to a client."""
    text = str(exc)
    if isinstance(exc, NotImplementedError):
        return APIError(400, text, code="not_implemented")
    if "exceed context window" in text or "exceed batch size" in text:
        return APIError(400, text, code="context_length_exceeded")
    return APIError(400, text)
