"""The embedded default model: trained by this project on OpenMoji, weights in assets/tiny/."""
