"""Every model the project builds or loads, and where it keeps them.

The ground floor under the adapters and the engine: `cache` (the cache root, atomic folder builds),
`tiny` (tiny random Llamas and their exact laws), `sliding` (tiny sliding-window
models, Mistral-style, and their exact laws), `gguf` (reading GGUF files, writing a tiny Llama as
one), `smollm2` (the bundled SmolLM2-135M-Instruct GGUF and its one conversion to a transformers
folder), `prompts` (the repo's prompt set). Nothing here imports `specverify.adapters` or
`specverify.engine`.
"""
