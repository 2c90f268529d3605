"""What a trace file's bytes are, decided once for every reader: compressed (gzip or
zstd, told by the first bytes, never the name), and where the JSON text starts (after a
UTF-8 byte-order mark, which is not data; UTF-16 text is refused, trace JSON is UTF-8).

The chunked reader (:mod:`explorer.trace.chunked_read`), the careful one
(:mod:`explorer.trace.decode`) and the sniffing of files in a directory
(:mod:`explorer.readers`) all ask here, so a file one of them takes for a trace is one the
others read the same way. (The metadata both readers keep is checked by one function too:
:func:`explorer.trace.metadata_checks.check_metadata`.)
"""

from __future__ import annotations

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
#: The UTF-8 byte-order mark some editors and Windows tools put first.
BOM = b"\xef\xbb\xbf"
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")


def compression(magic: bytes | bytearray) -> str | None:
    """``"gzip"`` or ``"zstd"`` for a file whose first (four) bytes are ``magic``, else None."""
    if magic[:2] == GZIP_MAGIC:
        return "gzip"
    if magic[:4] == ZSTD_MAGIC:
        return "zstd"
    return None


def text_start(text: bytes | bytearray) -> int:
    """Where the JSON of ``text`` (the decompressed bytes, from their start) begins: past
    a UTF-8 byte-order mark."""
    return len(BOM) if text[:3] == BOM else 0


def is_utf16(text: bytes | bytearray) -> bool:
    """Does ``text`` start as UTF-16 text does (its byte-order mark)?"""
    return text[:2] in _UTF16_BOMS


def json_head(text: bytes | bytearray) -> bytes:
    """The start of the JSON text: byte-order mark and leading white space dropped."""
    return bytes(text[text_start(text) :]).lstrip(b" \t\r\n")
