"""Parsers that hand a run specification to ``runs.planning.spec`` untouched, JSON or YAML alike.

The spec module reports every problem by its field path; parsing the body here would lose
that (DRF's JSON parser answers a bare "JSON parse error").
"""

from __future__ import annotations

import io
from typing import Any

from rest_framework.parsers import BaseParser


class RawSpecParser(BaseParser):
    """The body as bytes, for ``runs.planning.spec_document.parse_spec``."""

    media_type = "application/json"

    def parse(  # type: ignore[override]  # DRF keeps any parsed value; the stub wants a mapping
        self, stream: Any, media_type: str | None = None, parser_context: Any = None
    ) -> bytes:
        return stream.read() if stream is not None else b""


class JsonSpecParser(RawSpecParser):
    media_type = "application/json"


class YamlSpecParser(RawSpecParser):
    media_type = "application/yaml"


class XYamlSpecParser(RawSpecParser):
    media_type = "application/x-yaml"


class TextYamlSpecParser(RawSpecParser):
    media_type = "text/yaml"


class PlainSpecParser(RawSpecParser):
    media_type = "text/plain"


class Undeclared(bytes):
    """A body sent as none of a spec's types: taken if it reads as YAML or JSON, else a 415."""


class AnySpecParser(RawSpecParser):
    """Any other type, or none: curl's ``--data-binary`` says
    ``application/x-www-form-urlencoded`` of a YAML file."""

    media_type = "*/*"

    def parse(  # type: ignore[override]  # as RawSpecParser's
        self, stream: Any, media_type: str | None = None, parser_context: Any = None
    ) -> Undeclared:
        return Undeclared(super().parse(stream, media_type, parser_context))


SPEC_PARSERS = [
    JsonSpecParser,
    YamlSpecParser,
    XYamlSpecParser,
    TextYamlSpecParser,
    PlainSpecParser,
    AnySpecParser,  # last: the declared types first
]
SPEC_MEDIA_TYPES = [p.media_type for p in SPEC_PARSERS if "*" not in p.media_type]


class ArchiveParser(BaseParser):
    """An uploaded archive as the request's stream, read in chunks by
    ``runs.planning.snapshots``."""

    media_type = "application/gzip"

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        return stream if stream is not None else io.BytesIO()


class XGzipArchiveParser(ArchiveParser):
    media_type = "application/x-gzip"


class OctetStreamArchiveParser(ArchiveParser):
    media_type = "application/octet-stream"


ARCHIVE_PARSERS = [ArchiveParser, XGzipArchiveParser, OctetStreamArchiveParser]
