"""Generation: the host side of the graphs a generating model delivers.

One key/value cache protocol (`cache.py`: the static buffers a graph reads, the new entries it
gives back and where the host writes them), one greedy loop (`loop.py`) and the steppers it
drives: a causal LM's prefill and decode graphs (`decoder_only.py`), an encoder-decoder's
encoder, cross and cached or uncached decoder (`encoder_decoder.py`), each as deliverable
graphs or as PyTorch's reference; the torch modules each role's graph traces (`modules.py`) and
a published bundle opened as a runner (`bundle.py`), and the onnxruntime-genai config a causal
LM's bundle carries, written by its bundle step and read by `modelplan generate` (`genai.py`),
with genai's graphs over a bundle's own: the windowed graph (`windowed.py`) and the pipeline's
stages (`stages.py`), which modelplan's loop runs as genai feeds them (`pipeline.py`). The
graphs' roles and the cache's names are declared in planner/models/roles.py; nothing here
compares a role's name.

`modelplan generate`, verify_generation, eval and the calibration samples of the cached graphs
all generate through this part.
"""
