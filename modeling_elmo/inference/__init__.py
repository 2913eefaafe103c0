"""Inference over a trained biLM: corpus embedding and its HDF5 file, the token cache, TF-Hub's outputs, int8,
precision choice and export."""
