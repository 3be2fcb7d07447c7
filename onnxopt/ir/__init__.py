"""The semantic IR: Values with use lists, Nodes, Graphs, a verifier and a printer."""

from onnxopt.ir.graph import Graph, NameScope
from onnxopt.ir.model import Model
from onnxopt.ir.node import Attr, Node
from onnxopt.ir.tensor import ExternalLocation, LazyTensor
from onnxopt.ir.value import Dim, Shape, Value

__all__ = ["Attr", "Dim", "ExternalLocation", "Graph", "LazyTensor", "Model", "NameScope", "Node",
           "Shape", "Value"]
