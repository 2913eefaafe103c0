"""The bundled demo models (a toy biLM trained on WikiText-2 and its LM softmax) and their accessors."""
