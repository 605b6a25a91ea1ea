"""Secrets stay secret: the one redaction of settings, URLs, errors and log lines, re-exported
from the bottom layer (``state.redaction``, where the state clients use it too).

>>> redact_url("redis://app:s3cret@db:6379/0?password=s3cret&socket_timeout=5")
'redis://app:***@db:6379/0?password=***&socket_timeout=5'
"""

from state.redaction import (
    LOG_FILTER,
    MASK,
    RedactingFilter,
    is_secret_key,
    redact,
    redact_text,
    redact_url,
    remember,
    secrets_in,
)

__all__ = ["MASK", "is_secret_key", "redact", "redact_text", "redact_url", "remember", "secrets_in",
           "LOG_FILTER", "RedactingFilter"]
