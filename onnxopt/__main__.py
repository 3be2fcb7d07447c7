from onnxopt.cli import main

main()
