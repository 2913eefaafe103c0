"""Drop-in replacements for other ELMo libraries' APIs (AllenNLP)."""
