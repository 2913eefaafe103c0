"""Helpers around the model: corpus embedding, export, and the step-by-step reference path (not shipped)."""
