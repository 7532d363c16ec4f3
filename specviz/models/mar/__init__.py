"""MAR, the continuous-token models of the CSpD paper: network, KL-16 decoder and the pair adapter."""
