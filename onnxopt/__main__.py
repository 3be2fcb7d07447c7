from onnxopt.cli import run

run()
