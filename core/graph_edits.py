"""Small edits of ONNX graphs that the export and the engine's rewrites of a graph share (no torch here: the engine
process imports it)."""

from __future__ import annotations

import onnx
from onnx import helper


def attribute_value(node: onnx.NodeProto, name: str):
    """The value of the node's attribute of this name, None where it has none."""
    return next((helper.get_attribute_value(a) for a in node.attribute if a.name == name), None)


def node_producers(graph: onnx.GraphProto) -> dict[str, onnx.NodeProto]:
    """The node that writes each name (its subgraphs' not counted)."""
    return {name: node for node in graph.node for name in node.output}


def node_readers(graph: onnx.GraphProto) -> dict[str, list[onnx.NodeProto]]:
    """The nodes that read each name, in the graph's order (its subgraphs' not counted)."""
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    return readers


def names_read(graph: onnx.GraphProto) -> set[str]:
    """Every name the graph's nodes read, its subgraphs' (If, Loop, Scan) included, and its outputs."""
    read = {output.name for output in graph.output}
    for node in graph.node:
        read.update(node.input)
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                read |= names_read(attribute.g)
            elif attribute.type == onnx.AttributeProto.GRAPHS:
                for subgraph in attribute.graphs:
                    read |= names_read(subgraph)
    return read
