"""Zip packages (.docx, .pptx, .odt, .odp, .epub) opened safely, and written again with some members replaced.

Before any library reads a package, it is checked here: at most MAX_MEMBERS members and MAX_UNPACKED bytes unpacked,
as the zip's directory declares them (zipfile never unpacks a member past its declared size: one that lies fails
its CRC check), so a zip bomb is refused before it is unpacked; and every XML member is streamed through the parser
(never held whole, its elements let go as they end): without entity declarations (billion laughs), the network or
DTDs, at most libxml2's 256 levels deep, and at most `max_nodes` elements in all the members together, so that a
small file of many empty elements is refused before any tree of it is built. Each failure is a 4xx error
(service.worker.errors), never a 500.
"""

from __future__ import annotations

import io
import zipfile
import zlib
from typing import IO

from lxml import etree

from service.worker.errors import InvalidRequest, TooLarge

MAX_MEMBERS = 10_000
MAX_UNPACKED = 256 << 20  # bytes: a book's text with its images fits many times over
XML_MEMBERS = (".xml", ".rels", ".xhtml", ".html", ".htm", ".opf", ".ncx", ".svg")


SAFE_XML = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False)


def open_package(data: bytes, kind: str, max_nodes: int) -> zipfile.ZipFile:
    """The zip in `data`, its size and its XML checked (see the module's docstring); `kind` names it in errors."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        members = archive.infolist()
        if len(members) > MAX_MEMBERS:
            raise TooLarge(f"the {kind} file has {len(members)} parts, the limit is {MAX_MEMBERS}")
        if (unpacked := sum(member.file_size for member in members)) > MAX_UNPACKED:
            raise TooLarge(f"the {kind} file unpacks to {unpacked >> 20} MiB, the limit is {MAX_UNPACKED >> 20} MiB")
        elements = 0
        for member in members:
            if member.filename.lower().endswith(XML_MEMBERS) and member.file_size:
                with archive.open(member) as stream:
                    elements += count_elements(stream, member.filename, max_nodes - elements)
        if elements > max_nodes:
            raise TooLarge(f"the {kind} file holds more than {max_nodes} XML elements, the limit")
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, ValueError) as error:
        raise InvalidRequest(f"not a readable {kind} file (a broken zip: {error})") from None
    return archive


def count_elements(stream: IO[bytes], name: str, most: int) -> int:
    """The elements of an XML member, streamed; refuse XML that declares entities or is malformed or nested past
    libxml2's 256 levels. Counting stops past `most` (the caller refuses the file then)."""
    events = etree.iterparse(stream, events=("start", "end"), resolve_entities=False, no_network=True,
                             load_dtd=False, huge_tree=False)
    count = 0
    try:
        for event, element in events:
            if event == "end":  # let go of what is read: the tree never grows past one branch
                element.clear()
                while element.getprevious() is not None:
                    del element.getparent()[0]
                continue
            if count == 0 and (dtd := element.getroottree().docinfo.internalDTD) is not None:
                if any(True for _ in dtd.iterentities()):
                    raise InvalidRequest(f"{name} declares XML entities, which are not accepted")
            count += 1
            if count > most:
                break
    except etree.XMLSyntaxError as error:
        raise InvalidRequest(f"{name} is not well-formed XML: {error}") from None
    return count


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
