"""HTML read as browsers read it, and written so that browsers read it back the same: the HTML5 parser of lexbor
(through selectolax, with scripting on, as in a browser), its tree copied into a BeautifulSoup tree for
service.worker.html_units, and that tree written out by HTML_FORMATTER.

Reading is bounded before memory grows with the markup: the tags in the text are counted before lexbor parses it
(each tag makes at most a few nodes: past twice `max_nodes` tags the markup is refused), and the nodes as they are
copied; past `max_nodes` the markup is refused (413), and nesting past MAX_DEPTH elements too (400).

What is written out is checked: active_content() lists the scripts, event-handler attributes, `javascript:`
URLs and srcdoc documents of a markup as a browser parses it, and a rendering that holds one the input did not hold
is refused (400, UnsafeMarkup), whatever the way it got there (a mutation of the markup as it went through the parser
and the serializer, or a translation).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator

from bs4 import BeautifulSoup, Comment, Doctype, NavigableString, Tag
from bs4.dammit import EntitySubstitution
from bs4.formatter import HTMLFormatter
from selectolax.lexbor import LexborHTMLParser, LexborNode

from service.worker.errors import InvalidRequest, TooLarge
from service.worker.html_units import MAX_DEPTH

SVG, MATHML = "http://www.w3.org/2000/svg", "http://www.w3.org/1998/Math/MathML"
# Elements whose text browsers write out as it is (the HTML standard's serialization), in the HTML namespace only.
RAW_TEXT = frozenset({"style", "script", "xmp", "iframe", "noembed", "noframes", "plaintext", "noscript"})
# Foreign elements whose children are HTML (the standard's HTML integration points and MathML text integration
# points, where mglyph and malignmark stay MathML).
HTML_INSIDE = frozenset({"foreignObject", "desc", "title", "mi", "mo", "mn", "ms", "mtext"})
STAY_MATHML = frozenset({"mglyph", "malignmark"})
HTML_ENCODINGS = ("text/html", "application/xhtml+xml")  # an annotation-xml with HTML inside
TAG_NAME = re.compile(r"<(/?)([A-Za-z][^\s/>]*)[^>]*?(/?)>")
# Elements that never hold others (void), or that the next of their kind or their parent's end closes: they do not
# nest as their tags follow one another.
NOT_NESTING = frozenset({
    "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr", "param",
    "keygen", "frame", "basefont", "bgsound", "p", "li", "dt", "dd", "tr", "td", "th", "option", "optgroup", "rb",
    "rt", "rp", "rtc", "thead", "tbody", "tfoot", "colgroup", "caption", "head", "body", "html",
})
URL_SCHEMES = ("javascript:", "vbscript:", "data:text/html")
INVISIBLE = re.compile(r"[\x00-\x20\x7f]+")  # what browsers skip in a URL's scheme


class UnsafeMarkup(InvalidRequest):
    """A rendering would hold script that its input did not."""


class HtmlInOrder(HTMLFormatter):
    """Writes attributes in their order (BeautifulSoup's own sorts them), escaping <, > and & in every attribute and
    text but the text of an HTML raw-text element (script, style, ...), which browsers read as it is."""

    def attributes(self, tag: Tag) -> Iterator[tuple[str, str | None]]:
        return iter(tag.attrs.items())

    def substitute(self, ns: str) -> str:
        parent = ns.parent if isinstance(ns, NavigableString) else None
        if parent is not None and parent.name in RAW_TEXT and parent.namespace is None:
            return ns
        return EntitySubstitution.substitute_xml(ns)


HTML_FORMATTER = HtmlInOrder(entity_substitution=EntitySubstitution.substitute_xml, void_element_close_prefix=None)


def parse(markup: str, fragment: bool, max_nodes: int) -> BeautifulSoup:
    """The tree of `markup` as a browser builds it: a fragment (as a div's innerHTML), else a whole document (its
    html, head and body made where missing)."""
    if (tags := markup.count("<")) > 2 * max_nodes:  # at most one tag at each "<": an element's start and end tags
        raise TooLarge(f"markup of up to {tags} tags: more than {max_nodes} elements, texts and comments")
    check_nesting(markup)
    tree = LexborHTMLParser(markup, is_fragment=fragment, scripting=True)
    soup = BeautifulSoup("", "html.parser", multi_valued_attributes=None)
    if (top := tree.root if fragment else tree.root.parent) is not None:  # an empty fragment has no root
        Copy(soup, max_nodes).children(top, soup, None, 0)
    return soup


def check_nesting(markup: str) -> None:
    """Refuse markup whose tags nest deeper than MAX_DEPTH, before lexbor parses it (its time grows with the square
    of the depth): start tags of elements that nest, less their end tags, the text of raw-text elements skipped."""
    depth, foreign, at, lowered = 0, 0, 0, markup.lower()
    while match := TAG_NAME.search(markup, at):
        end, name, closed = match[1], match[2].lower(), match[3]
        at = match.end()
        if end:
            depth -= name not in NOT_NESTING and depth > 0
            foreign -= name in ("svg", "math") and foreign > 0
            continue
        if name in RAW_TEXT and (close := lowered.find(f"</{name}", at)) >= 0:
            at = close
        foreign += name in ("svg", "math") and not closed
        if name not in NOT_NESTING and not (closed and foreign):
            depth += 1
            if depth > MAX_DEPTH:
                raise InvalidRequest(f"markup nested deeper than {MAX_DEPTH} elements")


class Copy:
    """Copies lexbor's nodes into a BeautifulSoup tree, counting them."""

    def __init__(self, soup: BeautifulSoup, max_nodes: int) -> None:
        self.soup, self.max_nodes, self.nodes = soup, max_nodes, 0

    def children(self, node: LexborNode, parent: Tag, namespace: str | None, depth: int) -> None:
        if depth > MAX_DEPTH:
            raise InvalidRequest(f"markup nested deeper than {MAX_DEPTH} elements")
        for child in node.iter(include_text=True):
            self.nodes += 1
            if self.nodes > self.max_nodes:
                raise TooLarge(f"markup of more than {self.max_nodes} elements, texts and comments")
            if child.is_text_node:
                parent.append(NavigableString(child.text_content or ""))
            elif child.is_comment_node:
                parent.append(Comment(child.html.removeprefix("<!--").removesuffix("-->")))
            elif child.tag == "-doctype":
                parent.append(Doctype(child.html.strip()[len("<!DOCTYPE") : -1].strip()))
            elif child.is_element_node:
                self.element(child, parent, namespace, depth)

    def element(self, node: LexborNode, parent: Tag, namespace: str | None, depth: int) -> None:
        name, attributes = node.tag, {key: value or "" for key, value in node.attributes.items()}
        mathml = name == "math" or name in STAY_MATHML and parent.namespace == MATHML
        own = SVG if name == "svg" else MATHML if mathml else namespace
        element = Tag(builder=self.soup.builder, name=name, attrs=attributes, namespace=own)
        parent.append(element)
        encoding = attributes.get("encoding", "").lower()
        html_inside = name in HTML_INSIDE or name == "annotation-xml" and encoding in HTML_ENCODINGS
        inside = None if own is not None and html_inside else own
        if name == "template" and own is None and (content := node.template_fragments()):
            node = content[0]
        self.children(node, element, inside, depth + 1)


def active_content(markup: str, fragment: bool) -> Counter[tuple[str, str]]:
    """What can run script in `markup` as a browser parses it: each script element's text, each event-handler
    attribute, each attribute whose value is a javascript:, vbscript: or data:text/html URL (or a refresh to one),
    each srcdoc."""
    found: Counter[tuple[str, str]] = Counter()
    tree = LexborHTMLParser(markup, is_fragment=fragment, scripting=True)
    roots = [tree.root, *tree.template_fragments()] if tree.root is not None else []
    for root in roots:
        for node in root.traverse():
            if not node.is_element_node:
                continue
            if node.tag == "script":
                found["script", node.text(deep=True)] += 1
            for name, value in node.attributes.items():
                value = value or ""
                lowered = INVISIBLE.sub("", value).lower()
                url = lowered.startswith(URL_SCHEMES) or any(f"url={scheme}" in lowered for scheme in URL_SCHEMES)
                if name.lower().startswith("on") or name.lower() == "srcdoc" or url:
                    found[f"{node.tag} {name.lower()}", value] += 1
    return found


def check_safe(source: str, rendered: str, fragment: bool) -> None:
    """Refuse a rendering that holds active content (see active_content) that the source did not."""
    if added := active_content(rendered, fragment) - active_content(source, fragment):
        where = ", ".join(sorted({kind for kind, _ in added}))
        raise UnsafeMarkup(f"the translated markup would run script its source did not ({where}): the markup is "
                           "refused; write it in the form browsers give back")
