"""The released models: their download and cache, the conversion of the original files (AllenNLP HDF5, the LM
softmax, ELMoForManyLangs), model cards and remote code."""
