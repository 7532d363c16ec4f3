"""The embedded continuous-token pair: a target and a draft text-to-emoji model whose tokens are
projected 3x3 RGB patches sampled by a MAR-style diffusion head, for continuous speculative decoding."""
