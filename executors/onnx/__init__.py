"""ONNX graph tooling: artifacts and fact stamps, ONNX Runtime passes, HTP rewrites, hierarchy tags, subgraphs and module pieces."""
