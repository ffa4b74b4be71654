"""Zip packages (.docx, .pptx, .odt, .odp, .epub) opened safely, and written again with some members replaced.

Before any library reads a package, it is checked here: at most MAX_MEMBERS members and MAX_UNPACKED bytes unpacked,
as the zip's directory declares them (zipfile never unpacks a member past its declared size: one that lies fails
its CRC check), so a zip bomb is refused before it is unpacked; and every XML member parses without entity
declarations (billion laughs), the network or DTDs, and at most libxml2's 256 levels deep. Each failure is a 4xx
error (service.worker.errors), never a 500.
"""

from __future__ import annotations

import io
import zipfile
import zlib

from lxml import etree

from service.worker.errors import InvalidRequest, TooLarge

MAX_MEMBERS = 10_000
MAX_UNPACKED = 256 << 20  # bytes: a book's text with its images fits many times over
XML_MEMBERS = (".xml", ".rels", ".xhtml", ".html", ".htm", ".opf", ".ncx", ".svg")


SAFE_XML = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False)


def open_package(data: bytes, kind: str) -> zipfile.ZipFile:
    """The zip in `data`, its size and its XML checked (see the module's docstring); `kind` names it in errors."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        members = archive.infolist()
        if len(members) > MAX_MEMBERS:
            raise TooLarge(f"the {kind} file has {len(members)} parts, the limit is {MAX_MEMBERS}")
        if (unpacked := sum(member.file_size for member in members)) > MAX_UNPACKED:
            raise TooLarge(f"the {kind} file unpacks to {unpacked >> 20} MiB, the limit is {MAX_UNPACKED >> 20} MiB")
        for member in members:
            if member.filename.lower().endswith(XML_MEMBERS) and member.file_size:
                check_xml(archive.read(member), member.filename)
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, ValueError) as error:
        raise InvalidRequest(f"not a readable {kind} file (a broken zip: {error})") from None
    return archive


def check_xml(data: bytes, name: str) -> None:
    """Refuse XML that declares entities or is malformed or nested past libxml2's 256 levels."""
    try:
        root = etree.fromstring(data, SAFE_XML)
    except etree.XMLSyntaxError as error:
        raise InvalidRequest(f"{name} is not well-formed XML: {error}") from None
    dtd = root.getroottree().docinfo.internalDTD
    if dtd is not None and any(True for _ in dtd.iterentities()):
        raise InvalidRequest(f"{name} declares XML entities, which are not accepted")


def xml_bytes(root: etree._Element) -> bytes:
    """An XML member written out, with its declaration."""
    return etree.tostring(root, xml_declaration=True, encoding="UTF-8")


def rewrite(archive: zipfile.ZipFile, replaced: dict[str, bytes]) -> bytes:
    """The package again, members in their order and compression, those in `replaced` with their new content."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as written:
        for member in archive.infolist():
            content = replaced[member.filename] if member.filename in replaced else archive.read(member)
            written.writestr(member, content)
    return out.getvalue()
