# t/graph.mk — graphed callables: the mode matrix, the TransformerEngine regression, bad use.
TESTS += t/graph-mode-matrix.lua t/graph-mode-matrix-transformer-layers.lua t/graph-bad-use-errors.lua
EXTRA_DIST += t/graph-mode-matrix.lua t/graph-mode-matrix-transformer-layers.lua t/graph-bad-use-errors.lua t/lib/mode_matrix.lua
