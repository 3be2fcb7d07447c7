"""The one rewrite driver that normalization and fusion share (:mod:`onnxopt.rewrite.driver`):
it learns what to look at again from the graph's own edit events
(:class:`onnxopt.ir.graph.EditListener`)."""
