"""Pipelines that a saved model's folder does not carry (``import modeling_elmo`` registers them): the
``"elmo-question-answering"`` task (``question_answering.py``). The pipelines that travel with a remote-code folder
(``pipelines_elmo.py``, ``pipelines_fill_mask_elmo.py``) sit beside the model code at the package's top."""
