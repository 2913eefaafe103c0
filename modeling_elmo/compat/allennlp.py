"""Drop-in replacements for AllenNLP's ELMo APIs: ``batch_to_ids``, ``Elmo`` and ``ElmoEmbedder``.

An AllenNLP-based model migrates by changing its imports::

    # from allennlp.modules.elmo import Elmo, batch_to_ids
    # from allennlp.commands.elmo import ElmoEmbedder
    from modeling_elmo.compat.allennlp import Elmo, ElmoEmbedder, batch_to_ids

    elmo = Elmo(options_file, weight_file, num_output_representations=2, dropout=0.5)
    out = elmo(batch_to_ids([["I", "ate", "an", "apple"], ["Hi"]]))
    out["elmo_representations"]  # 2 tensors (2, 4, 1024)
    out["mask"]  # (2, 4) bool

The same argument names, shapes and defaults as AllenNLP 2.10. ``options_file`` and ``weight_file`` are the
released ``options.json`` and HDF5 files (converted in memory by the converter on every construction), or
``options_file`` is a folder made by ``elmo convert`` (or a Hub id) and ``weight_file`` is ``None``.

Stateful by default, as AllenNLP: its ``Elmo`` and ``ElmoEmbedder`` carry the LSTM states from one call to the
next, row by row, so the same sentence embedded twice gets different vectors, and a sentence's vectors depend on
what its batch row held before. These classes do the same (``stateful=True``, the default), which reproduces
AllenNLP's (and bilm-tf's) outputs; ``stateful=False`` gives this package's default behaviour, where every
sentence starts from zero state (what [`ElmoModel`] does by default). ``reset_states()`` starts again from zero.

Other differences from AllenNLP, plainly:

- URLs are not downloaded here: give local files, a converted folder or a Hub id.
- A batch row without words keeps its carried state (AllenNLP ran ``<S> </S>`` through it, changing its state).
- ``keep_sentence_boundaries=True`` is not supported (the model drops ``<S>``/``</S>`` itself): a ``ValueError``.
- ``do_layer_norm=True`` normalises each layer over the batch's words; AllenNLP's statistics also included the
  ``<S>``/``</S>`` positions, so the values differ slightly.
- ``vocab_to_cache`` builds [`build_token_cache`] (the same vectors, faster); ``word_inputs`` is
  accepted and ignored: the character ids give the same words.
- The state dict's names are this package's, so an AllenNLP checkpoint of a whole model does not load as such.
- ``ElmoEmbedder.embed_file`` writes this package's ``elmo embed`` layout (AllenNLP's datasets and
  ``sentence_to_index``, plus a ``words`` attribute per sentence), accepts empty lines (zero words; AllenNLP
  refused the file) and does not support ``use_sentence_keys``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from typing import IO

import numpy as np
import torch
from torch import nn

from ..characters import MAX_CHARACTERS_PER_TOKEN, word_to_char_ids
from ..configuration_elmo import ElmoConfig
from ..inference.token_cache import build_token_cache
from ..modeling_elmo import ElmoLstmState, ElmoModel, ElmoScalarMix

DEFAULT_BATCH_SIZE = 64  # AllenNLP's ElmoEmbedder default
EMBED_FILE_FORMATS = ("all", "top", "average")


def _check_batch(batch: object, what: str) -> None:
    """``TypeError`` naming what is wrong unless ``batch`` is a list (or tuple) of sentences, each a list (or tuple)
    of str: the internal errors that None or a bare string would cause otherwise say nothing about the input."""
    example = "(e.g. [['Hello', 'world']])"
    if not isinstance(batch, (list, tuple)):
        raise TypeError(f"{what} takes a list of sentences, each a list of words {example}, got {type(batch).__name__}")
    for i, sentence in enumerate(batch):
        if not isinstance(sentence, (list, tuple)):
            raise TypeError(
                f"{what} takes a list of sentences, each a list of words {example}: sentence {i} is "
                f"{type(sentence).__name__}"
            )
        for j, word in enumerate(sentence):
            if not isinstance(word, str):
                raise TypeError(f"{what}: sentence {i}, word {j} is {type(word).__name__}, not str")


def batch_to_ids(batch: Sequence[Sequence[str]]) -> torch.Tensor:
    """Character ids of a batch of tokenized sentences, as AllenNLP's ``batch_to_ids``.

    Args:
        batch: sentences as lists of words (kept as given: no splitting).

    Returns:
        ``(len(batch), longest sentence, 50)`` int64: per word its UTF-8 bytes (cut to 48) between the
        begin-of-word and end-of-word marks, padded with the padding mark, every id + 1 (so that ``0`` is a padded
        word position, all zeros); the words ``<S>`` and ``</S>`` get the sentence-boundary ids. The same ids as
        AllenNLP's ``ELMoCharacterMapper`` and as [`ElmoTokenizer`]'s ``input_ids``.
    """
    _check_batch(batch, "batch_to_ids")
    longest = max((len(sentence) for sentence in batch), default=0)
    ids = torch.zeros(len(batch), longest, MAX_CHARACTERS_PER_TOKEN, dtype=torch.long)
    for row, sentence in enumerate(batch):
        if sentence:
            ids[row, : len(sentence)] = torch.tensor([word_to_char_ids(word) for word in sentence])
    return ids


def load_elmo_model(
    options_file: str | os.PathLike | None,
    weight_file: str | os.PathLike | None = None,
    module: ElmoModel | None = None,
) -> ElmoModel:
    """The biLM (without scalar mixes) from the original files, a converted folder or Hub id, or ``module``.

    Args:
        options_file: the original ``options.json`` (with ``weight_file``), or a folder made by ``elmo convert`` or
            ``elmo train-lm``, or a Hub id (without ``weight_file``).
        weight_file: the original HDF5 weights: converted in memory with the converter's checks (a
            ``ConversionError`` names what is wrong).
        module: an [`ElmoModel`] to use as it is (then give neither file, as AllenNLP's ``module``).
    """
    if module is not None:
        if options_file is not None or weight_file is not None:
            raise ValueError("give either module or options_file/weight_file, not both (as AllenNLP)")
        if not isinstance(module, ElmoModel):
            raise TypeError(f"module must be an ElmoModel, got {type(module).__name__}")
        return module
    if options_file is None:
        raise ValueError(
            "give options_file and weight_file (the released options.json and HDF5 weights), or a folder made by "
            "`elmo convert` as options_file; URLs are not downloaded here"
        )
    options_file = os.fspath(options_file)
    if weight_file is None:
        if os.path.isfile(options_file):
            raise ValueError(f"{options_file} is a file: give the HDF5 weight_file with it, or a converted folder")
        # The compat classes carry the state themselves (stateful=...), whatever the folder's config says. The
        # folder's own scalar mixes are left out quietly: ElmoModel declares them (_keys_to_ignore_on_load_unexpected).
        return ElmoModel.from_pretrained(options_file, num_output_representations=0, stateful=False).eval()
    from ..hub.convert import read_original_weights

    config = ElmoConfig.from_options(options_file, num_output_representations=0)
    model = ElmoModel(config)
    model.load_state_dict(read_original_weights(weight_file, config, progress=False), strict=True)
    return model.eval()


def _finite_numbers(values: object, name: str) -> list[float]:
    """``values`` as a list of floats; ``TypeError`` for anything but a sequence of numbers, ``ValueError`` for NaN or
    infinity (a softmax over them gives NaN weights, and every output NaN)."""
    if isinstance(values, torch.Tensor):
        values = values.tolist()
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise TypeError(f"{name} must be a list of numbers (one per layer), got {type(values).__name__}")
    numbers = []
    for value in values:
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise TypeError(f"{name} must hold numbers, got {type(value).__name__} {value!r}")
        if not np.isfinite(value):
            raise ValueError(f"{name} must hold finite numbers, got {list(values)}")
        numbers.append(float(value))
    return numbers


class Elmo(nn.Module):
    """AllenNLP's ``allennlp.modules.elmo.Elmo``: a frozen (by default) biLM and ``num_output_representations``
    learned scalar mixes of its layers, each followed by dropout.

    Args:
        options_file: the original ``options.json`` (with ``weight_file``), or a converted folder or Hub id
            (``weight_file=None``); see [`load_elmo_model`].
        weight_file: the original HDF5 weights (converted in memory), or ``None`` with a folder.
        num_output_representations: how many mixes (e.g. 2: one for a task model's input, one for its output).
        requires_grad: train the biLM too (default: frozen, as the paper).
        do_layer_norm: normalise each layer before mixing, over the batch's words (see the module docstring).
        dropout: dropout on each mixed representation (training mode only).
        vocab_to_cache: words whose character-encoder vectors to precompute (a speed-up only).
        keep_sentence_boundaries: must be ``False`` (not supported).
        scalar_mix_parameters: fixed pre-softmax mix weights, one per layer; the mixes (weights and ``gamma``)
            then do not train, as AllenNLP's.
        module: an [`ElmoModel`] to share instead of files.
        stateful: carry the LSTM states from call to call, row by row (default ``True``, AllenNLP's behaviour);
            ``False``: every sentence starts from zero state, as [`ElmoModel`] by default.
    """

    def __init__(
        self,
        options_file: str | os.PathLike | None,
        weight_file: str | os.PathLike | None = None,
        num_output_representations: int = 1,
        requires_grad: bool = False,
        do_layer_norm: bool = False,
        dropout: float = 0.5,
        vocab_to_cache: Iterable[str] | None = None,
        keep_sentence_boundaries: bool = False,
        scalar_mix_parameters: Sequence[float] | None = None,
        module: ElmoModel | None = None,
        stateful: bool = True,
    ) -> None:
        super().__init__()
        # Checked before the (slow) load of the biLM.
        if isinstance(num_output_representations, bool) or not isinstance(num_output_representations, int):
            raise TypeError(
                f"num_output_representations must be an int, got {type(num_output_representations).__name__}"
            )
        if num_output_representations < 1:
            raise ValueError(
                f"num_output_representations must be at least 1 (the number of mixes), got {num_output_representations}"
            )
        if scalar_mix_parameters is not None:
            scalar_mix_parameters = _finite_numbers(scalar_mix_parameters, "scalar_mix_parameters")
        if keep_sentence_boundaries:
            raise ValueError(
                "keep_sentence_boundaries=True is not supported: the model adds and drops <S> and </S> itself"
            )
        self._elmo_lstm = load_elmo_model(options_file, weight_file, module)
        if module is None:  # a shared module keeps its own settings, as in AllenNLP
            for part in (self._elmo_lstm.char_cnn, self._elmo_lstm.bilm):
                part.requires_grad_(requires_grad)
        num_layers = self._elmo_lstm.config.n_layers + 1
        if scalar_mix_parameters is not None and len(scalar_mix_parameters) != num_layers:
            raise ValueError(
                f"scalar_mix_parameters has {len(scalar_mix_parameters)} values; this biLM has {num_layers} layers"
            )
        self.scalar_mixes = nn.ModuleList()
        for _ in range(num_output_representations):
            mix = ElmoScalarMix(num_layers, layer_norm="batch" if do_layer_norm else None)
            if scalar_mix_parameters is not None:
                with torch.no_grad():
                    mix.scalar_parameters.copy_(torch.tensor(scalar_mix_parameters, dtype=torch.float32))
                mix.requires_grad_(False)
            self.scalar_mixes.append(mix)
        self._dropout = nn.Dropout(p=dropout)
        self.stateful = stateful
        self._state = ElmoLstmState()
        if vocab_to_cache is not None:
            build_token_cache(self._elmo_lstm, list(vocab_to_cache), progress=False)

    def get_output_dim(self) -> int:
        """Width of each representation: ``2 * projection_dim`` (1024 for the original model)."""
        return 2 * self._elmo_lstm.config.projection_dim

    def reset_states(self) -> None:
        """Forget the LSTM states carried between calls (stateful mode)."""
        self._state.reset()

    def forward(self, inputs: torch.Tensor, word_inputs: torch.Tensor | None = None) -> dict:
        """Mix the biLM layers of a batch.

        Args:
            inputs: ``(batch, timesteps, 50)`` character ids from [`batch_to_ids`] (or ``(..., timesteps, 50)``:
                the leading dimensions are flattened and restored, as AllenNLP does).
            word_inputs: accepted for AllenNLP's signature and ignored (the character ids give the same words).

        Returns:
            ``{"elmo_representations": [num_output_representations tensors (batch, timesteps, 2P)], "mask": (batch,
            timesteps) bool}``, zero at padded positions.
        """
        if not isinstance(inputs, torch.Tensor):
            raise TypeError(
                f"inputs must be a tensor of character ids from batch_to_ids (batch, timesteps, 50), got "
                f"{type(inputs).__name__}"
            )
        shape = inputs.shape
        if inputs.dim() < 3:
            raise ValueError(f"inputs must be (batch, timesteps, 50) character ids, got shape {tuple(shape)}")
        flat = inputs.reshape(-1, *shape[-2:]) if inputs.dim() > 3 else inputs
        out = self._elmo_lstm(
            flat,
            output_hidden_states=True,
            lstm_state=self._state if self.stateful else None,
            return_lstm_state=False,
        )
        mask = out.mask.bool()
        representations = [self._dropout(mix(out.hidden_states, mask)) for mix in self.scalar_mixes]
        if inputs.dim() > 3:
            mask = mask.view(shape[:-1])
            representations = [r.view(*shape[:-1], -1) for r in representations]
        return {"elmo_representations": representations, "mask": mask}


class ElmoEmbedder:
    """AllenNLP's ``allennlp.commands.elmo.ElmoEmbedder``: the biLM's layers of tokenized sentences, as numpy.

    Args:
        options_file: the original ``options.json`` (with ``weight_file``), or a converted folder or Hub id
            (``weight_file=None``). Required: AllenNLP's default (downloading the original model) is not done here.
        weight_file: the original HDF5 weights (converted in memory), or ``None`` with a folder.
        cuda_device: the GPU to run on, ``-1`` (default) for the CPU.
        stateful: carry the LSTM states from batch to batch, row by row (default ``True``, AllenNLP's
            behaviour); ``False``: every sentence starts from zero state.
    """

    def __init__(
        self,
        options_file: str | os.PathLike | None = None,
        weight_file: str | os.PathLike | None = None,
        cuda_device: int = -1,
        stateful: bool = True,
    ) -> None:
        self.elmo_bilm = load_elmo_model(options_file, weight_file).requires_grad_(False)
        self.cuda_device = cuda_device
        if cuda_device >= 0:
            self.elmo_bilm = self.elmo_bilm.to(torch.device("cuda", cuda_device))
        self.stateful = stateful
        self._state = ElmoLstmState()

    def reset_states(self) -> None:
        """Forget the LSTM states carried between batches (stateful mode)."""
        self._state.reset()

    @torch.no_grad()
    def batch_to_embeddings(self, batch: list[list[str]]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(activations (batch, L + 1, timesteps, 2P), mask (batch, timesteps) bool)`` of tokenized sentences."""
        ids = batch_to_ids(batch).to(self.elmo_bilm.device)
        out = self.elmo_bilm(
            ids, output_hidden_states=True, lstm_state=self._state if self.stateful else None, return_lstm_state=False
        )
        return torch.stack(out.hidden_states, dim=1), out.mask.bool()

    def embed_sentence(self, sentence: list[str]) -> np.ndarray:
        """``(L + 1, words, 2P)`` float32 (``(3, words, 1024)`` for the original model) for one tokenized sentence."""
        if not isinstance(sentence, (list, tuple)):
            raise TypeError(
                f"embed_sentence takes one sentence as a list of words (e.g. ['Hello', 'world']), got "
                f"{type(sentence).__name__}"
            )
        return self.embed_batch([sentence])[0]

    def embed_batch(self, batch: list[list[str]]) -> list[np.ndarray]:
        """One ``(L + 1, words_i, 2P)`` array per sentence of one batch."""
        _check_batch(batch, "embed_batch")
        if all(len(sentence) == 0 for sentence in batch):  # AllenNLP answers these without running the model
            width = 2 * self.elmo_bilm.config.projection_dim
            return [np.zeros((self.elmo_bilm.config.n_layers + 1, 0, width), dtype=np.float32) for _ in batch]
        embeddings, mask = self.batch_to_embeddings(batch)
        lengths = mask.sum(dim=1).tolist()
        return [embeddings[i, :, :n].float().cpu().numpy() for i, n in enumerate(lengths)]

    def embed_sentences(
        self, sentences: Iterable[list[str]], batch_size: int = DEFAULT_BATCH_SIZE
    ) -> Iterator[np.ndarray]:
        """Yield ``(L + 1, words, 2P)`` per sentence, in order, batching ``batch_size`` consecutive sentences (as
        AllenNLP: in stateful mode, row ``r`` of each batch continues row ``r`` of the previous one)."""
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        batch: list[list[str]] = []
        for sentence in sentences:
            batch.append(sentence)
            if len(batch) == batch_size:
                yield from self.embed_batch(batch)
                batch = []
        if batch:
            yield from self.embed_batch(batch)

    def embed_file(
        self,
        input_file: IO[str] | str | os.PathLike,
        output_file_path: str | os.PathLike,
        output_format: str = "all",
        batch_size: int = DEFAULT_BATCH_SIZE,
        forget_sentences: bool = False,
        use_sentence_keys: bool = False,
    ) -> None:
        """Embed a file of tokenized sentences (one per line, split on whitespace) into ``output_file_path``.

        The HDF5 file is the one ``elmo embed --tokenized`` writes (and AllenNLP's layout): a float32 dataset
        ``str(i)`` per line ``i`` (``"all"``: ``(L + 1, words, 2P)``; ``"top"``: ``(words, 2P)``, the last layer;
        ``"average"``: ``(words, 2P)``, the mean over the layers) and, unless ``forget_sentences``,
        ``sentence_to_index`` (``json.loads(f["sentence_to_index"][0])`` is ``{line: "i"}``). Written under a
        temporary name and renamed when complete; an existing file is replaced, as AllenNLP did.

        Args:
            input_file: an open text file (AllenNLP's argument) or a path.
            output_file_path: the HDF5 file to write.
            output_format: ``"all"``, ``"top"`` or ``"average"``.
            batch_size: sentences per batch, in file order.
            forget_sentences: write no ``sentence_to_index``.
            use_sentence_keys: not supported (keys by sentence break on ``/``): ``sentence_to_index`` maps them.
        """
        from ..inference.hdf5_file import remove_file, temp_name, write_sentences  # shared with `elmo embed`

        if output_format not in EMBED_FILE_FORMATS:
            raise ValueError(f"output_format must be one of {EMBED_FILE_FORMATS}, got {output_format!r}")
        if use_sentence_keys:
            raise ValueError(
                "use_sentence_keys is not supported (HDF5 names cannot hold '/'): the datasets are keyed by line "
                "number, and sentence_to_index maps each sentence to its key"
            )
        # AllenNLP's numpy.average(axis=0) is the mean, which also takes the (L + 1, 0, 2P) of an empty line.
        reduce = {"all": lambda a: a, "top": lambda a: a[-1], "average": lambda a: a.mean(axis=0)}[output_format]

        def embed(word_lists: Iterable[list[str]]) -> Iterator[tuple[int, np.ndarray]]:
            for index, layers in enumerate(self.embed_sentences(word_lists, batch_size)):
                yield index, reduce(layers)

        output = os.fspath(output_file_path)
        temp = temp_name(output, f"embed-partial-{os.getpid()}")
        config = self.elmo_bilm.config
        attrs = {
            "output_type": output_format,
            "model": str(config.name_or_path or "converted in memory"),
            "num_layers": config.n_layers + 1,
            "dim": 2 * config.projection_dim,
            "input_format": "tokenized",
        }
        is_path = isinstance(input_file, (str, os.PathLike))
        stream = open(input_file, encoding="utf-8") if is_path else input_file  # noqa: SIM115
        try:
            write_sentences(
                temp,
                None,
                None,
                (line for line in stream),
                output_format,
                batch_size,
                max_batch_words=1,  # unused: embed batches itself
                progress=False,
                total=None,
                attrs=attrs,
                label=output,
                tokenized=True,
                sentence_index="none" if forget_sentences else "json",
                embed=embed,
            )
            os.replace(temp, output)
        except BaseException:
            remove_file(temp)
            raise
        finally:
            if stream is not input_file:
                stream.close()


__all__ = ["Elmo", "ElmoEmbedder", "batch_to_ids", "load_elmo_model"]
