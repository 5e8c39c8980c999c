"""Bytes as llama.cpp reads them: UTF-8 decoded leniently (unicode_cpts_from_utf8), and the
bytes of a vocabulary's token texts.
"""
from __future__ import annotations

ESCAPED_SPACE = "\u2581".encode()  # SentencePiece's visible space


def decode_utf8(data: bytes) -> str:
    """Decode as llama.cpp does: each byte that does not start a complete sequence becomes U+FFFD.

    Unlike Python it accepts overlong forms and surrogates (kept as lone surrogates, which
    'surrogatepass' writes back as the same bytes).
    """
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return "".join(map(chr, _lenient_code_points(data)))


def _lenient_code_points(data: bytes) -> list[int]:
    out = []
    i, n = 0, len(data)
    while i < n:
        lead = data[i]
        size, cpt = (1, lead) if lead < 0x80 else (2, lead & 0x1F) if 0xC0 <= lead < 0xE0 else \
            (3, lead & 0x0F) if 0xE0 <= lead < 0xF0 else (4, lead & 0x07) if 0xF0 <= lead < 0xF8 else (0, 0)
        tail = data[i + 1:i + size]
        if size == 0 or len(tail) < size - 1 or any(b & 0xC0 != 0x80 for b in tail):
            out.append(0xFFFD)  # a stray continuation byte, a bad lead byte or a cut-off sequence
            i += 1
            continue
        for b in tail:
            cpt = cpt << 6 | b & 0x3F
        out.append(cpt if cpt <= 0x10FFFF else 0xFFFD)  # llama.cpp throws on the latter
        i += size
    return out


def is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def token_bytes(text: str) -> bytes:
    # Token strings carry undecodable GGUF bytes as surrogateescape code points.
    return text.encode("utf-8", "surrogateescape")


def unescape_spaces(text: str) -> bytes:
    return token_bytes(text).replace(ESCAPED_SPACE, b" ")


def utf8_complete_prefix(data: bytes) -> int:
    """Length of the longest prefix of `data` that does not end inside a UTF-8 character."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 == 0x80:  # continuation byte: keep looking for the lead byte
            continue
        if byte & 0x80 == 0:  # ASCII
            return len(data)
        need = 2 if byte & 0xE0 == 0xC0 else 3 if byte & 0xF0 == 0xE0 else 4 if byte & 0xF8 == 0xF0 else 1
        return len(data) if back >= need else len(data) - back
    return len(data)
