"""The eager decoder (service.engine.decoder.ExportedDecoder) where ONNX Runtime copies the host's inputs when they are
bound, as a GPU session does: its translations are those of the CPU's, where a bound input shares the array's
memory. Without a GPU, a session wrapper copies them as onnxruntime's IOBinding::BindInput does for a GPU node."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from core.folder import GraphIO
from core.search import SearchOptions, pad_batch, search
from service.engine.config import ModelOptions
from service.engine.decoder import ENCODE_TOKENS, ExportedDecoder, encode, encode_runs
from service.engine.graphed import tokens
from service.engine.sessions import ModelSessions

HOST_INPUTS = {GraphIO.TOKENS, GraphIO.POSITIONS, GraphIO.SRC_MASK, GraphIO.WIDTH}


class CopiedWhenBound:
    """An IOBinding that binds a copy of each host input, made when it is bound."""

    def __init__(self, binding: ort.IOBinding):
        self.binding = binding
        self.copies: dict[str, np.ndarray] = {}  # an OrtValue over a NumPy array does not hold it

    def bind_ortvalue_input(self, name: str, value: ort.OrtValue) -> None:
        if name in HOST_INPUTS:
            self.copies[name] = value.numpy().copy()
            value = ort.OrtValue.ortvalue_from_numpy(self.copies[name])
        self.binding.bind_ortvalue_input(name, value)

    def bind_cpu_input(self, name: str, array: np.ndarray) -> None:
        self.binding.bind_cpu_input(name, array.copy())

    def bind_ortvalue_output(self, name: str, value: ort.OrtValue) -> None:
        self.binding.bind_ortvalue_output(name, value)


class CopyingSession:
    """A decoder session whose bindings copy the host's inputs when they are bound, as a GPU session's do."""

    def __init__(self, session: ort.InferenceSession):
        self.session = session

    def io_binding(self) -> CopiedWhenBound:
        return CopiedWhenBound(self.session.io_binding())

    def run_with_iobinding(self, binding: CopiedWhenBound, run_options: ort.RunOptions | None = None) -> None:
        self.session.run_with_iobinding(binding.binding, run_options)


def copying_model(folder: Path, copies_bound_inputs: bool) -> ModelSessions:
    """The CPU's sessions as a GPU's: the step as exported (our kernels are the CPU's), its bindings copying."""
    model = ModelSessions(folder, ModelOptions(provider="cpu", threads=1, kernels=False))
    model.decoder, model.copies_bound_inputs = CopyingSession(model.decoder), copies_bound_inputs
    return model


@pytest.mark.parametrize("beam_size", [1, 4])
def test_a_decoder_whose_inputs_are_copied_when_bound_translates_as_on_the_cpu(tiny_model_dir: Path, beam_size: int):
    rng = np.random.default_rng(beam_size)
    batch = [[*rng.integers(4, 90, rng.integers(3, 20)).tolist(), 2] for _ in range(5)]
    opts = SearchOptions(beam_size=beam_size, n_best=beam_size, max_length_extra=20)
    cpu = ModelSessions(tiny_model_dir, ModelOptions(provider="cpu", threads=1, kernels=False))
    expected = tokens(search(ExportedDecoder(cpu), batch, opts, cpu.model_config))
    copying = copying_model(tiny_model_dir, copies_bound_inputs=True)
    assert tokens(search(ExportedDecoder(copying), batch, opts, copying.model_config)) == expected
    # the wrapper bites: a decoder that binds its inputs once reads the first step's tokens and positions ever after
    stale = copying_model(tiny_model_dir, copies_bound_inputs=False)
    assert tokens(search(ExportedDecoder(stale), batch, opts, stale.model_config)) != expected


def test_a_batchs_encoder_runs_give_each_sentence_its_own_keys_and_values(tiny_model_dir: Path):
    """The CPU encoder runs on sentences of similar length, ENCODE_TOKENS at a time, each run padded to its longest:
    in fp32 each sentence's keys/values are those it has encoded alone, and zeros past its run's length."""
    model = ModelSessions(tiny_model_dir, ModelOptions(provider="cpu", threads=1))
    rng = np.random.default_rng(0)
    lengths = [3, 17, 5, 9, 1, 12, 4, 20, 2, 7]
    sources = [[int(t) for t in rng.integers(4, 40, n)] + [model.model_config.eos_id] for n in lengths]
    src, src_mask = pad_batch(sources, model.model_config.pad_id)
    runs = encode_runs(src_mask)
    assert sorted(int(row) for rows, _ in runs for row in rows) == list(range(len(sources)))
    assert all(len(rows) == 1 or len(rows) * length <= ENCODE_TOKENS for rows, length in runs)
    assert all(length == max(len(sources[row]) for row in rows) for rows, length in runs)
    batch = [value.numpy() for value in encode(model, src, src_mask)]
    run_length = {int(row): length for rows, length in runs for row in rows}
    for row, source in enumerate(sources):
        alone_src, alone_mask = pad_batch([source], model.model_config.pad_id)
        alone = [value.numpy() for value in encode(model, alone_src, alone_mask)]
        for together, by_itself in zip(batch, alone):
            assert not together[row, :, run_length[row]:].any()
            np.testing.assert_allclose(together[row, :, :len(source)], by_itself[0], rtol=1e-5, atol=1e-6)
