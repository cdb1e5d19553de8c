"""ONNX graph tooling: artifacts and fact stamps, legality, HTP rewrites, hierarchy tags, subgraphs and module pieces."""
