"""Training code: the biLM language-model command, the tagger command and their data (not shipped with saved models)."""
