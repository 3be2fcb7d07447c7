"""Fused operators in domain ai.onnxopt: schema, decomposition, NumPy reference."""
