"""Torch references, one module per operator: `class Model(nn.Module)` and `make_inputs(**input_kwargs, device,
generator)`. Import through `kernels_eval.registry.load_reference`; this package imports torch."""
