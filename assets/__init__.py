"""Software-defined assets: one module per asset, in data-flow order."""
