"""Types of the compiled column-wise Avro decoder (``_avrocols.c``)."""

def decode(
    program: bytes,
    header: bytes,
    offsets: object,
    data: object,
    validity: object | None,
    offset: int,
    length: int,
    take: bytearray,
    base: int,
    /,
) -> tuple[int, bytes | None, list[tuple[int, bytes, bytes, bytes]]] | None: ...
