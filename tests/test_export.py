"""ONNX export with a KV cache, and the ONNX Runtime translator, against the PyTorch model.

The first part exports small random models (post-LN and pre-LN) with a SentencePiece model trained on the sentences
below, once per session, and checks the graphs, their dynamic shapes, their numbers and the translator.

The second part checks the shipped model, models/en-de, on Multi30k test_2016_flickr (MULTI30K_DIR). A missing model
or data set fails these tests, it does not skip them; leave them out with -k "not shipped" while developing.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from core.corpus import load_test_set, multi30k_dir
from core.folder import FolderConfig, GraphIO, cache_names
from core.search import SearchOptions, StepPlan, block_items, filled_order, pad_batch, search
from core.slots import CACHE_SLOTS, cache_slots
from core.tokenizer import Tokenizer
from export import onnx_files
from export.__main__ import VARIANTS, export_model
from export.graphs import flatten, pairs
from export.quantize import weights_multiplied_in_float
from model.checkpoint import load_model
from model.config import preset
from model.decode import translate
from model.tokenizer import train_sentencepiece
from model.train import batch_loss, collate, encode_pairs
from model.transformer import Transformer, best_next_tokens
from service.engine.cache_graphs import join_graph, select_graph
from service.engine.config import ModelOptions
from service.engine.decoder import KERNELS_FIRST_SLOTS, ExportedDecoder, SlotTableDecoder
from service.engine.graphed import BucketedDecoder, BucketStore
from service.engine.kernels.graph import SLOT_ROWS
from service.engine.sessions import ModelSessions
from service.translator import Translator

REPO = Path(__file__).resolve().parents[1]
SHIPPED_DIR = REPO / "models" / "en-de"
SHIPPED_THREADS = 2  # the same on every machine, so that a near-tie between two outputs breaks the same way
SHIPPED_FILES = ["model.pt", "spm.model", "config.json", "encoder.onnx", "decoder.onnx"]
MAX_IR_VERSION = 13  # the newest ONNX Runtime 1.31 reads
ATOL = 1e-4  # fp32 logits and caches, ONNX Runtime against PyTorch

# Written for these tests; the SentencePiece model is trained on them, the translation tests translate them.
SENTENCES = [
    "A man in a blue shirt is riding a bicycle down the street.",
    "Two children are playing with a red ball in the garden.",
    "An old woman sells fresh bread at the market.",
    "The dog jumps over the fence to catch the frisbee.",
    "Three friends sit on a bench and laugh.",
    "A girl with long hair is reading a book under a tree.",
    "Workers in orange vests repair the road.",
    "Is this the train to Berlin?",
    "Ein Mann in einem blauen Hemd fährt mit dem Fahrrad die Straße hinunter.",
    "Zwei Kinder spielen im Garten mit einem roten Ball.",
    "Eine alte Frau verkauft frisches Brot auf dem Markt.",
    "Der Hund springt über den Zaun, um die Frisbeescheibe zu fangen.",
    "Drei Freunde sitzen auf einer Bank und lachen.",
    "Ein Mädchen mit langen Haaren liest unter einem Baum ein Buch.",
    "Arbeiter in orangefarbenen Westen reparieren die Straße.",
    "Ist das der Zug nach Berlin?",
]
VOCAB = 120

# Noise from torch.onnx.export while the fixtures export.
pytestmark = [
    pytest.mark.filterwarnings("ignore:.*LeafSpec.*:FutureWarning"),
    pytest.mark.filterwarnings("ignore:.*axis name.*:UserWarning"),
]


# --- fixtures -----------------------------------------------------------------------------------------------


@dataclass
class Exported:
    """A PyTorch model, its tokenizer and the model folder exported from it, with CPU sessions of its graphs."""

    model: Transformer
    tokenizer: Tokenizer
    directory: Path

    def __post_init__(self) -> None:
        self.encoder, self.decoder = (cpu_session(self.directory / f"{name}.onnx") for name in ("encoder", "decoder"))

    def translator(self, **kwargs) -> Translator:
        return Translator(self.directory, **{"provider": "cpu", "threads": 1, **kwargs})


def cpu_session(graph: Path | bytes) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    return ort.InferenceSession(graph if isinstance(graph, bytes) else str(graph), opts,
                                providers=["CPUExecutionProvider"])


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """PyTorch on n threads for a while (another test file may have set one thread for the whole session)."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def half_trained_model(tokenizer: Tokenizer, pre_norm: bool, steps: int = 50) -> Transformer:
    """A small random model after a few Adam steps on SENTENCES (English to German and back).

    Untrained, a model repeats one token until the length limit; this one's outputs differ from sentence to
    sentence, some end early and some run to the limit, so searches take every path (rows leaving a batch, beams
    finishing at different steps). It trains on one thread in about a second.
    """
    torch.manual_seed(0)
    sizes = dict(n_layers=2, d_model=48, n_heads=3, max_len=64)
    cfg = preset("tiny", vocab_size=tokenizer.vocab_size, pre_norm=pre_norm, **sizes)
    model = Transformer(cfg)
    half = len(SENTENCES) // 2
    both_ways = list(zip(SENTENCES[:half], SENTENCES[half:])) + list(zip(SENTENCES[half:], SENTENCES[:half]))
    batch = collate(encode_pairs(tokenizer, both_ways, cfg), cfg, "cpu")
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    with torch_threads(1):
        for _ in range(steps):
            loss, _ = batch_loss(model, batch, cfg, label_smoothing=0.0, amp=False)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return model.eval()


@pytest.fixture(scope="session")
def export_spm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return train_sentencepiece(SENTENCES * 10, tmp_path_factory.mktemp("export-spm") / "spm", vocab_size=VOCAB)


@pytest.fixture(scope="session", params=[False, True], ids=["post-ln", "pre-ln"])
def exported(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, export_spm: Path) -> Exported:
    """A small model saved as a checkpoint and exported in every precision, as `python -m export` does."""
    tokenizer = Tokenizer(export_spm)
    model = half_trained_model(tokenizer, pre_norm=request.param)
    with torch.no_grad():  # rounded to fp16 as model.package rounds the shipped weights
        for p in model.parameters():
            p.copy_(p.half().float())
    directory = tmp_path_factory.mktemp("export-pre-ln" if request.param else "export-post-ln")
    torch.save({"config": model.cfg.to_dict(), "model": model.state_dict()}, directory / "model.pt")
    export_model(directory / "model.pt", directory, export_spm, list(VARIANTS))
    return Exported(model, tokenizer, directory)


# --- running both sides -------------------------------------------------------------------------------------


def random_source(model: Transformer, lengths: list[int], seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A right-padded batch of random source ids of the given lengths (each ending with </s>) and its mask."""
    rng = np.random.default_rng(seed)
    cfg = model.cfg
    return pad_batch([rng.integers(4, cfg.vocab_size, n - 1).tolist() + [cfg.eos_id] for n in lengths], cfg.pad_id)


Cache = list[np.ndarray]  # a KV cache as the graphs take it: keys and values of layer 0, of layer 1, ...


@torch.inference_mode()
def torch_encode(model: Transformer, src: np.ndarray, src_mask: np.ndarray) -> tuple[np.ndarray, Cache]:
    memory = model.encode(torch.as_tensor(src), torch.as_tensor(src_mask))
    return memory.numpy(), [x.numpy() for x in flatten(model.cross_keys_values(memory))]


@torch.inference_mode()
def torch_step(
    model: Transformer, tokens: np.ndarray, positions: np.ndarray, self_kv: Cache, cross_kv: Cache, src_mask: np.ndarray
) -> tuple[np.ndarray, Cache]:
    """One decoding step in PyTorch: logits (N, V) of the next token and the cache with this step written."""
    self_t, cross_t = (pairs([torch.as_tensor(x) for x in cache]) for cache in (self_kv, cross_kv))
    logits, new_self_kv = model.decode_step(torch.as_tensor(tokens), torch.as_tensor(positions), cross_t,
                                            torch.as_tensor(src_mask), self_t)
    return logits.numpy(), [x.numpy() for x in flatten(new_self_kv)]


def step_feeds(tokens: np.ndarray, positions: np.ndarray, self_kv: Cache, cross_kv: Cache, src_mask: np.ndarray,
               width: int = 1) -> dict:
    layers = len(self_kv) // 2
    feeds = {"tokens": tokens, "positions": positions, "src_mask": src_mask, "width": np.array([width])}
    return feeds | dict(zip(cache_names("self", layers), self_kv)) | dict(zip(cache_names("cross", layers), cross_kv))


def ort_step(
    session: ort.InferenceSession, tokens: np.ndarray, positions: np.ndarray, self_kv: Cache, cross_kv: Cache,
    src_mask: np.ndarray,
) -> tuple[np.ndarray, Cache]:
    outputs = ["logits", *cache_names("new_self", len(self_kv) // 2)]
    logits, *new_self_kv = session.run(outputs, step_feeds(tokens, positions, self_kv, cross_kv, src_mask))
    return logits, new_self_kv


def ort_encode(session: ort.InferenceSession, src: np.ndarray, src_mask: np.ndarray, layers: int):
    memory, *cross_kv = session.run(["memory", *cache_names("cross", layers)], {"src": src, "src_mask": src_mask})
    return memory, cross_kv


def random_cache(model: Transformer, batch: int, slots: int = CACHE_SLOTS, seed: int = 0) -> Cache:
    """A self-attention cache of `slots` slots of random keys and values."""
    cfg, rng = model.cfg, np.random.default_rng(seed)
    shape = (batch, cfg.n_heads, slots, cfg.d_head)
    return [rng.standard_normal(shape).astype(np.float32) for _ in range(2 * cfg.n_layers)]


def assert_close(actual: np.ndarray, expected: np.ndarray, what: str, atol: float = ATOL) -> None:
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape}, expected {expected.shape}"
    diff = float(np.abs(actual - expected).max()) if actual.size else 0.0
    assert diff <= atol, f"{what}: max abs difference {diff:.3g} > {atol}"


def assert_caches_close(actual: Cache, expected: Cache, what: str) -> None:
    assert len(actual) == len(expected), f"{what}: {len(actual)} tensors, expected {len(expected)}"
    for i, (a, e) in enumerate(zip(actual, expected)):
        assert_close(a, e, f"{what}[{i}]")


def assert_steps_match(
    exported: Exported, model: Transformer, src: np.ndarray, src_mask: np.ndarray, targets: np.ndarray
) -> None:
    """Teacher-force targets (N, T) through both decoders, each step fed PyTorch's caches; compare every output."""
    _, cross_kv = torch_encode(model, src, src_mask)
    _, ort_cross_kv = ort_encode(exported.encoder, src, src_mask, model.cfg.n_layers)
    assert_caches_close(ort_cross_kv, cross_kv, "cross_kv")
    self_kv = random_cache(model, len(src), cache_slots(targets.shape[1], model.cfg.max_len))
    for t in range(targets.shape[1]):
        positions = np.full(len(src), t)
        logits, new_self_kv = torch_step(model, targets[:, t], positions, self_kv, cross_kv, src_mask)
        ort_logits, ort_new_self_kv = ort_step(exported.decoder, targets[:, t], positions, self_kv, cross_kv, src_mask)
        assert_close(ort_logits, logits, f"logits at step {t}")
        assert_caches_close(ort_new_self_kv, new_self_kv, f"new_self_kv at step {t}")
        self_kv = new_self_kv


# --- the graphs ---------------------------------------------------------------------------------------------


def test_graphs_pass_the_checker_with_a_readable_ir_version(exported: Exported):
    paths = sorted(exported.directory.glob("*.onnx"))
    names = {p.name for p in paths}
    assert {"encoder.onnx", "decoder.onnx", "encoder.int8.onnx", "decoder.fp16.onnx"} <= names
    for path in paths:
        onnx.checker.check_model(str(path), full_check=True)
        assert onnx.load(str(path), load_external_data=False).ir_version <= MAX_IR_VERSION, path.name


def test_each_attention_is_one_node_and_each_cache_write_one_scatter_from_the_split_heads(exported: Exported):
    """Every attention, self and cross, is one Attention node (model.transformer.fused_attention): a step has no
    Softmax or Where of its own. Each cache's ScatterND takes the new keys or values from the Reshape that split
    their heads, with no Gather or Expand of its own (model.transformer.write_slot), and every one reads the same
    index, built once a step."""
    graph = onnx.load(str(exported.directory / "decoder.onnx")).graph
    made_by = {output: node for node in graph.node for output in node.output}
    layers, ops = exported.model.cfg.n_layers, [node.op_type for node in graph.node]
    assert ops.count("Attention") == 2 * layers and not {"Softmax", "Where"} & set(ops)
    scatters = [node for node in graph.node if node.op_type == "ScatterND"]
    assert len(scatters) == 2 * layers
    assert {made_by[node.input[2]].op_type for node in scatters} == {"Reshape"}
    assert len({node.input[1] for node in scatters}) == 1


def test_one_product_per_input_and_no_transpose_in_the_encoders_self_attention(exported: Exported):
    """A self-attention's queries, keys and values are one product, and the encoder's keys and values of every
    decoder layer's cross-attention one more (model.transformer.linears), each of one weight (export.graphs
    .fold_weights): a decoder layer's products are QKV, the self-attention's output, the cross-attention's queries
    and output, and the feed-forward's two; an encoder layer's QKV, output and the feed-forward's two. The encoder's
    self-attentions take their heads side by side (model.transformer.fused_attention's 3-D inputs): its only
    Transposes are those of the cross keys/values, which the decoder reads per head."""
    layers = exported.model.cfg.n_layers
    for name, per_layer in (("decoder.onnx", 6), ("encoder.onnx", 4)):
        graph = onnx.load(str(exported.directory / name)).graph
        products = [node for node in graph.node if node.op_type in ("Gemm", "MatMul")]
        assert len(products) == per_layer * layers + 1, name  # + the output projection, or the cross keys/values
        assert not [node for node in graph.node if node.op_type == "Concat"
                    and set(node.input) <= {w.name for w in graph.initializer}], name
    encoder = onnx.load(str(exported.directory / "encoder.onnx")).graph
    assert [node.op_type for node in encoder.node].count("Transpose") == 2 * layers


def test_fp32_graphs_store_their_fp16_rounded_weights_as_fp16(exported: Exported):
    for name in ("encoder.onnx", "decoder.onnx"):
        matrices = [w for w in onnx.load(str(exported.directory / name)).graph.initializer if np.prod(w.dims) >= 48**2]
        assert any(w.data_type == onnx.TensorProto.FLOAT16 for w in matrices), name
        for w in matrices:  # what is left in fp32 is what fp16 cannot hold, such as the positional table
            if w.data_type == onnx.TensorProto.FLOAT:
                values = onnx.numpy_helper.to_array(w)
                assert not np.array_equal(values.astype(np.float16).astype(np.float32), values), (name, w.name)


SHAPES = [  # (source lengths, each row's position): none is the export example's (2 rows, source 5, 6 slots)
    pytest.param([1], [0], id="batch1-src1-p0"),
    pytest.param([9], [0], id="batch1-p0"),
    pytest.param([9], [4], id="batch1-p4"),
    pytest.param([11, 3, 7], [0, 0, 0], id="batch3-padded-p0"),
    pytest.param([2, 12, 6, 1, 12], [17, 17, 17, 17, 17], id="batch5-padded-p17"),
    pytest.param([2, 12, 6, 1, 12], [0, 15, 3, 31, 8], id="batch5-padded-mixed-positions"),
]


@pytest.mark.parametrize("lengths,positions", SHAPES)
def test_encoder_matches_pytorch_at_any_shape(exported: Exported, lengths: list[int], positions: list[int]):
    model = exported.model
    src, src_mask = random_source(model, lengths, seed=len(lengths) + positions[0])
    memory, cross_kv = torch_encode(model, src, src_mask)
    ort_memory, ort_cross_kv = ort_encode(exported.encoder, src, src_mask, model.cfg.n_layers)
    assert_close(ort_memory, memory, "memory")
    assert_caches_close(ort_cross_kv, cross_kv, "cross_kv")


@pytest.mark.parametrize("lengths,positions", SHAPES)
def test_decoder_step_matches_pytorch_at_any_shape(exported: Exported, lengths: list[int], positions: list[int]):
    """Rows at different positions share a step; each writes its slot of the cache and no other."""
    model, position = exported.model, np.array(positions)
    src, src_mask = random_source(model, lengths, seed=len(lengths) + positions[0])
    _, cross_kv = torch_encode(model, src, src_mask)
    slots = cache_slots(int(position.max()) + 1, model.cfg.max_len)
    self_kv = random_cache(model, len(lengths), slots, seed=positions[-1])
    tokens = np.random.default_rng(positions[-1]).integers(4, model.cfg.vocab_size, len(lengths))
    logits, new_self_kv = torch_step(model, tokens, position, self_kv, cross_kv, src_mask)
    ort_logits, ort_new_self_kv = ort_step(exported.decoder, tokens, position, self_kv, cross_kv, src_mask)
    n, cfg = len(lengths), model.cfg
    assert ort_logits.shape == (n, cfg.vocab_size)
    assert {x.shape for x in ort_new_self_kv} == {(n, cfg.n_heads, slots, cfg.d_head)}
    for old, new in zip(self_kv, ort_new_self_kv):
        written = np.zeros(old.shape[:1] + old.shape[2:3], dtype=bool)
        written[np.arange(n), position] = True
        np.testing.assert_array_equal(new.transpose(0, 2, 1, 3)[~written], old.transpose(0, 2, 1, 3)[~written])
    assert_close(ort_logits, logits, "logits")
    assert_caches_close(ort_new_self_kv, new_self_kv, "new_self_kv")


@pytest.mark.parametrize("width", [1, 3, 8])
def test_decoder_top_k_is_pytorch_s_best_next_tokens(exported: Exported, width: int):
    model = exported.model
    src, src_mask = random_source(model, [9, 4, 6], seed=width)
    _, cross_kv = torch_encode(model, src, src_mask)
    self_kv, tokens, positions = random_cache(model, 3, seed=width), np.array([5, 6, 7]), np.array([2, 0, 5])
    logits, _ = torch_step(model, tokens, positions, self_kv, cross_kv, src_mask)
    expected_logp, expected_tokens = best_next_tokens(torch.as_tensor(logits), width)
    feeds = step_feeds(tokens, positions, self_kv, cross_kv, src_mask, width)
    top_logp, top_tokens = exported.decoder.run(["top_logp", "top_tokens"], feeds)
    assert top_tokens.shape == (3, width)
    np.testing.assert_array_equal(top_tokens, expected_tokens.numpy())
    assert_close(top_logp, expected_logp.numpy(), "top_logp")
    assert (np.diff(top_logp, axis=1) <= 0).all(), "best first"


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_decoding_steps_match_pytorch_on_padded_batches(exported: Exported, seed: int):
    model = exported.model
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 20, 6).tolist()
    src, src_mask = random_source(model, lengths, seed)
    targets = np.concatenate([np.full((6, 1), model.cfg.bos_id), rng.integers(4, model.cfg.vocab_size, (6, 8))], 1)
    assert_steps_match(exported, model, src, src_mask, targets)


@pytest.mark.parametrize("rows", [[4, 0, 0, 2], [1], [4, 3, 2, 1, 0], [0, 0, 0, 0, 0, 0, 0, 0]])
@pytest.mark.parametrize("slots", [0, 3])
def test_select_graph_gathers_rows(rows: list[int], slots: int):
    rng, index = np.random.default_rng(slots), np.array(rows, dtype=np.int64)
    xs = [rng.standard_normal((5, 3, slots, 4)).astype(np.float32) for _ in range(4)]
    feeds = {f"x_{i}": x for i, x in enumerate(xs)} | {"rows": index}
    ys = cpu_session(select_graph(4)).run([f"y_{i}" for i in range(4)], feeds)
    for x, y in zip(xs, ys):
        np.testing.assert_array_equal(y, x[index])


@pytest.mark.parametrize("a_rows,b_rows,b_length,length", [(3, 2, 5, 7), (3, 2, 0, 16), (0, 4, 16, 32), (0, 2, 16, 8)])
def test_join_graph_appends_rows_padded_with_zeros(a_rows: int, b_rows: int, b_length: int, length: int):
    """Sentences that join (encoder outputs of a shorter source, empty self-attention caches), and a cache that
    grows or is cut (no rows in a)."""
    rng = np.random.default_rng(a_rows + b_length)
    a = [rng.standard_normal((a_rows, 3, length, 4)).astype(np.float32) for _ in range(2)]
    b = [rng.standard_normal((b_rows, 3, b_length, 4)).astype(np.float32) for _ in range(2)]
    feeds = {f"a_{i}": x for i, x in enumerate(a)} | {f"b_{i}": x for i, x in enumerate(b)}
    feeds["pads_b"] = np.array([0, 0, 0, 0, 0, 0, length - b_length, 0])
    ys = cpu_session(join_graph(2)).run(["y_0", "y_1"], feeds)
    for x, z, y in zip(a, b, ys):
        expected = np.zeros((a_rows + b_rows, 3, length, 4), np.float32)
        expected[:a_rows], expected[a_rows:, :, : min(b_length, length)] = x, z[:, :, :length]
        np.testing.assert_array_equal(y, expected)


# --- the translator -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("beam_size", [1, 4])
def test_translator_translates_as_pytorch_does(exported: Exported, beam_size: int):
    texts = SENTENCES + [s.lower() for s in SENTENCES] + ["", "Berlin.", "Hello, how are you today, my friend?"]
    opts = SearchOptions(beam_size=beam_size)
    with torch_threads(1):  # as many as the translator's
        expected = translate(exported.model, exported.tokenizer, texts, opts, batch_size=8)
    got = [hyps[0].text for hyps in exported.translator().translate(texts, opts, batch_size=8)]
    assert len(set(expected)) > len(texts) // 2, "the model should not translate everything alike"
    mismatches = [(t, e, g) for t, e, g in zip(texts, expected, got) if e != g]
    assert not mismatches, f"{len(mismatches)} translations differ, e.g. {mismatches[:3]}"


@pytest.mark.parametrize("kernels", [False, True])
def test_a_sentence_s_steps_do_not_depend_on_the_rows_beside_it(exported: Exported, kernels: bool):
    """The ONNX Runtime decoder: a sentence that joins a running row (whose source is longer and whose cache has
    grown to 16 slots; with our kernels, held 32 from the first step) and stays after that row leaves (the encoder
    keys/values cut to its source; as exported, the self-attention cache to its slots, while the slot table keeps a
    batch's first slots) gets, step by step, what it gets alone."""
    translator, cfg = exported.translator(kernels=kernels), exported.model.cfg
    assert translator.sessions.kernels == kernels
    long, short = translator.encode_texts([" ".join(SENTENCES[:2]), "Berlin."])
    tokens = np.random.default_rng(0).integers(4, cfg.vocab_size, 30)
    alone = translator.new_decoder()
    alone.add(*pad_batch([short], cfg.pad_id))
    expected = [alone.step(tokens[i : i + 1], 5) for i in range(6)]
    shared = translator.new_decoder()
    shared.add(*pad_batch([long], cfg.pad_id))
    for token in tokens[10:22]:
        shared.step(np.array([token]), 5)
    shared.add(*pad_batch([short], cfg.pad_id))
    got = [shared.step(np.array([tokens[22 + i], tokens[i]]), 5) for i in range(3)]
    assert shared.slots == (KERNELS_FIRST_SLOTS if kernels else 2 * CACHE_SLOTS)
    assert shared.src_mask.shape[1] == len(long)
    shared.apply(StepPlan(np.array([1]), np.array([1])))  # the long one leaves
    assert shared.slots == (KERNELS_FIRST_SLOTS if kernels else CACHE_SLOTS)
    assert shared.src_mask.shape[1] == len(short) <= len(long) // 2  # a cut the slot table makes too
    assert {x.shape()[2] for x in shared.cross_kv} == {len(short)}
    got += [shared.step(tokens[i : i + 1], 5) for i in range(3, 6)]
    for step, ((top, logp), (expected_top, expected_logp)) in enumerate(zip(got, expected)):
        np.testing.assert_array_equal(top[-1], expected_top[0], err_msg=f"step {step}")  # the short one's row
        assert_close(logp[-1], expected_logp[0], f"top_logp at step {step}")


@pytest.mark.parametrize("kernels", [False, True])
def test_beam_reorders_need_no_new_cache_buffers(exported: Exported, kernels: bool):
    """The ONNX Runtime decoder: a reorder of every row (beam search's select at almost every step) needs no new
    memory step after step, and the steps get what they get with the caches selected into new buffers. As exported,
    the rows are written in their new order into a spare set of buffers, which then takes turns with the first; with
    our kernels they move within the caches themselves (the move graph). The host's inputs (tokens, positions) are
    written in place: the step bindings read the decoder's own arrays, bound once."""
    translator, cfg = exported.translator(kernels=kernels), exported.model.cfg
    assert translator.sessions.kernels == kernels
    source, beams = translator.encode_texts([SENTENCES[0]]), 3
    tokens = np.random.default_rng(0).integers(4, cfg.vocab_size, (4, beams))
    orders = [np.array([2, 0, 0]), np.array([1, 2, 0]), np.array([0, 0, 1]), np.array([2, 1, 0])]
    turned, fresh = translator.new_decoder(), translator.new_decoder()
    for decoder in turned, fresh:
        decoder.add(*pad_batch(source, cfg.pad_id))
        decoder.apply(StepPlan(np.zeros(beams, np.int64), np.zeros(beams, np.int64)))  # its beams' rows
    sets = []
    for step, (step_tokens, order) in enumerate(zip(tokens, orders)):
        (top, logp), (expected_top, expected_logp) = turned.step(step_tokens, 5), fresh.step(step_tokens, 5)
        np.testing.assert_array_equal(top, expected_top, err_msg=f"step {step}")
        assert_close(logp, expected_logp, f"top_logp at step {step}")
        turned.apply(StepPlan(order, None))
        # rows of one sentence share its encoder keys/values: placing them so changes nothing
        fresh.apply(StepPlan(order, order))
        sets.append([id(x) for x in turned.self_kv])
    if kernels:
        assert sets[0] == sets[1] == sets[2] == sets[3] and isinstance(turned, SlotTableDecoder)  # no spare set
    else:
        assert sets[0] == sets[2] and sets[1] == sets[3] and sets[0] != sets[1]
    bound = [step.bound for step in turned.step_bindings.values()]
    assert len(bound) == (1 if kernels else 2)
    assert all(b[GraphIO.TOKENS] is turned.tokens and b[GraphIO.POSITIONS] is turned.positions for b in bound)
    if kernels:  # the beams read each other's slots: the step reads the slot table (it is NO_TABLE until then)
        assert turned.shared_slots and bound[0][SLOT_ROWS] is turned.slot_rows


def test_with_our_kernels_a_beam_sentence_reads_one_row_of_encoder_keys_values(exported: Exported):
    """With our kernels each row reads its sentence's row of encoder keys/values (cross_from; one row a sentence,
    whatever its beam). After a sentence leaves, the others' rows stay where they are, until the rows read half of
    those in use or fewer: then they move to the first rows. The steps get what the step as exported gets, each
    row over its own."""
    ours, exported_step = exported.translator(kernels=True), exported.translator(kernels=False)
    cfg, beams = exported.model.cfg, np.array([2, 3, 1])
    sources = ours.encode_texts(SENTENCES[:3])
    tokens = np.random.default_rng(1).integers(4, cfg.vocab_size, (4, beams.sum()))
    decoders = ours.new_decoder(), exported_step.new_decoder()
    for decoder in decoders:
        decoder.add(*pad_batch(sources, cfg.pad_id))
        decoder.apply(StepPlan(rows := np.repeat(np.arange(3), beams), rows))  # each sentence's beams' rows
    np.testing.assert_array_equal(decoders[0].cross_from, [0, 0, 1, 1, 1, 2])
    assert decoders[0].cross_kv[0].shape()[0] == 3
    for step_tokens in tokens[:2]:
        (top, logp), (expected_top, expected_logp) = (decoder.step(step_tokens, 5) for decoder in decoders)
        np.testing.assert_array_equal(top, expected_top)
        assert_close(logp, expected_logp, "top_logp")
    order = filled_order(np.array([False, True, True]))  # the first sentence leaves; the last takes its place
    rows = block_items(beams, order)
    for decoder in decoders:
        decoder.apply(StepPlan(rows, rows))
    np.testing.assert_array_equal(decoders[0].cross_from, [2, 1, 1, 1])  # two of three read: none moved
    assert decoders[0].cross_kv[0].shape()[0] == 3
    (top, logp), (expected_top, expected_logp) = (decoder.step(tokens[2, : len(rows)], 5) for decoder in decoders)
    np.testing.assert_array_equal(top, expected_top)
    assert_close(logp, expected_logp, "top_logp after the leave")
    rows = block_items(np.array([1, 3]), filled_order(np.array([True, False])))  # the beam-3 sentence leaves too
    for decoder in decoders:
        decoder.apply(StepPlan(rows, rows))
    np.testing.assert_array_equal(decoders[0].cross_from, [0])  # one of three: moved to the first row,
    assert decoders[0].cross_rows == 1 and decoders[0].cross_kv[0].shape()[0] == 3  # the others' rows room now
    (top, logp), (expected_top, expected_logp) = (decoder.step(tokens[3, : len(rows)], 5) for decoder in decoders)
    np.testing.assert_array_equal(top, expected_top)
    assert_close(logp, expected_logp, "top_logp after the second leave")


def test_a_beam_wider_than_half_the_vocabulary_works(exported: Exported):
    """Beam search asks a step for 2 * beam tokens per row; here that is more than the vocabulary holds."""
    opts, texts = SearchOptions(beam_size=VOCAB // 2 + 4), SENTENCES[:3]
    with torch_threads(1):
        expected = translate(exported.model, exported.tokenizer, texts, opts)
    assert [hyps[0].text for hyps in exported.translator().translate(texts, opts)] == expected


def test_graphs_of_an_older_export_are_refused_clearly(exported: Exported, tmp_path: Path):
    old = tmp_path / "old"
    shutil.copytree(exported.directory, old)
    shutil.copy(old / "encoder.onnx", old / "decoder.onnx")  # a decoder without the `positions` input
    with pytest.raises(ValueError, match="export its model.pt again"):
        Translator(old, provider="cpu")


def gpu_present() -> bool:
    return Path("/dev/nvidia0").exists() or Path("/dev/dxg").exists()


@pytest.mark.parametrize("provider", ["auto", "cpu"])
def test_reported_provider_is_the_one_that_runs(exported: Exported, provider: str):
    translator = exported.translator(provider=provider)
    sessions = translator.sessions
    assert translator.provider == sessions.decoder.get_providers()[0] == sessions.encoder.get_providers()[0]
    assert sessions.on_gpu == (translator.provider == "CUDAExecutionProvider")
    if provider == "cpu" or not gpu_present():
        assert translator.provider == "CPUExecutionProvider"


@pytest.mark.parametrize("precision", ["int8", "fp16"])
def test_other_precisions_load_and_translate(exported: Exported, precision: str):
    translator = exported.translator(precision=precision)
    got = translator.translate(SENTENCES, SearchOptions(beam_size=2))
    assert [len(hyps) for hyps in got] == [1] * len(SENTENCES)
    assert all(isinstance(hyps[0].text, str) for hyps in got)
    assert len({hyps[0].text for hyps in got}) > 1


def test_fp16_graphs_keep_their_caches_in_fp16_and_translate_as_graphs_that_cast_them(exported: Exported,
                                                                                      tmp_path: Path):
    """An fp16 export's caches are fp16 in and out, so that no step casts them (the engine keeps them in the type
    the step reads); its other inputs and outputs stay fp32. Its translations, eager and in TRANSLATOR_CUDA_GRAPHS's
    buckets, greedy and beam, are those of fp16 graphs that read and write fp32 caches (the export before), to the
    bit: a value cast from fp16 to fp32 and back is the same value."""
    from onnxruntime.transformers.float16 import convert_float_to_float16

    config = FolderConfig.load(exported.directory)
    for name in config.graphs["fp16"].values():
        graph = onnx.load(str(exported.directory / name)).graph
        types = {x.name: x.type.tensor_type.elem_type for x in [*graph.input, *graph.output]}
        caches = {n for n in types if n.startswith((f"{GraphIO.CROSS}_", f"{GraphIO.SELF}_", f"{GraphIO.NEW_SELF}_"))}
        assert caches and {types[n] for n in caches} == {onnx.TensorProto.FLOAT16}, name
        assert onnx.TensorProto.FLOAT16 not in {types[n] for n in types if n not in caches}, name
    casting = tmp_path / "casting"
    shutil.copytree(exported.directory, casting)
    for part, name in config.graphs["fp16"].items():
        onnx.save(convert_float_to_float16(str(exported.directory / config.graphs["fp32"][part]), keep_io_types=True),
                  str(casting / name))
    sources = [ids + [exported.model.cfg.eos_id] for ids in exported.tokenizer.encode(SENTENCES[:6])]
    found = {}
    for folder in (exported.directory, casting):
        model = ModelSessions(folder, ModelOptions("fp16", provider="cpu", threads=1, kernels=False))
        for beam in (1, 3):
            opts = SearchOptions(beam_size=beam, max_length=24)
            found[folder, beam] = [search(ExportedDecoder(model), sources, opts, model.model_config),
                                   search(BucketedDecoder(model, BucketStore(model, model.decoder, capture=False)),
                                          sources, opts, model.model_config)]
        assert model.cache_type == (np.float16 if folder == exported.directory else np.float32)
    for beam in (1, 3):
        assert found[exported.directory, beam] == found[casting, beam], beam


def test_large_graphs_keep_their_weights_beside_them_and_translate_alike(
    exported: Exported, export_spm: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Graphs of export.onnx_files.LARGE_BYTES of weights or more (a 600M-parameter model's, past protobuf's 2 GiB)
    keep them in GRAPH.data beside the graph: forced here for the small model, whose every precision then translates
    as its one-file export does (the shipped folders stay one file a graph)."""
    assert not list(exported.directory.glob("*.data"))
    monkeypatch.setattr(onnx_files, "LARGE_BYTES", 0)
    export_model(exported.directory / "model.pt", tmp_path, export_spm, list(VARIANTS))
    for precision, graphs in FolderConfig.load(tmp_path).graphs.items():
        for name in graphs.values():
            weights = onnx.load(str(tmp_path / name), load_external_data=False).graph.initializer
            assert onnx_files.data_file(tmp_path / name).is_file(), name
            assert any(w.data_location == onnx.TensorProto.EXTERNAL for w in weights), name
            onnx.checker.check_model(str(tmp_path / name))
        texts, opts = SENTENCES[:6], SearchOptions(beam_size=4, n_best=2)
        translator = Translator(tmp_path, precision, provider="cpu", threads=1)
        # our kernels read the weights beside it too
        assert translator.sessions.kernels == (precision != "fp16"), precision
        beside = translator.translate(texts, opts)
        assert beside == exported.translator(precision=precision).translate(texts, opts), precision


def test_int8_graphs_multiply_no_weight_in_fp32(exported: Exported):
    """Every product with a weight is an int8 one, the output projection through the transposed (tied) embedding
    included."""
    for part in ("encoder", "decoder"):
        graph = onnx.load(str(exported.directory / f"{part}.int8.onnx")).graph
        assert weights_multiplied_in_float(graph) == [], part
        fp32_graph = onnx.load(str(exported.directory / f"{part}.onnx")).graph
        assert weights_multiplied_in_float(fp32_graph), f"{part}: the check finds nothing even in fp32"


# --- the shipped model --------------------------------------------------------------------------------------


@dataclass
class Shipped:
    exported: Exported
    sources: list[str]  # test_2016_flickr, English
    references: list[str]  # and German


@pytest.fixture(scope="session")
def shipped() -> Shipped:
    missing = [name for name in SHIPPED_FILES if not (SHIPPED_DIR / name).exists()]
    if missing:
        pytest.fail(f"the shipped model is incomplete: {SHIPPED_DIR} lacks {', '.join(missing)}", pytrace=False)
    try:
        sources, references = load_test_set()
    except FileNotFoundError as e:
        message = f"Multi30k test_2016_flickr not found ({e}); set MULTI30K_DIR (now {multi30k_dir()})"
        pytest.fail(message, pytrace=False)
    model = load_model(SHIPPED_DIR / "model.pt")
    tokenizer = Tokenizer(SHIPPED_DIR / "spm.model", model.cfg.case_tags)
    return Shipped(Exported(model, tokenizer, SHIPPED_DIR), sources, references)


@pytest.mark.parametrize("first", [0, 300, 600, 984])
def test_shipped_logits_match_pytorch_on_test_batches(shipped: Shipped, first: int):
    """16 consecutive test sentences (so of mixed lengths, padded), teacher-forced with their references."""
    exported, cfg = shipped.exported, shipped.exported.model.cfg
    tokenizer = exported.tokenizer
    sources = tokenizer.encode(shipped.sources[first : first + 16])
    references = tokenizer.encode(shipped.references[first : first + 16])
    src, src_mask = pad_batch([ids + [cfg.eos_id] for ids in sources], cfg.pad_id)
    targets, _ = pad_batch([[cfg.bos_id] + ids for ids in references], cfg.pad_id)
    assert_steps_match(exported, exported.model, src, src_mask, targets)


@pytest.mark.parametrize("beam_size", [1, 4])
def test_shipped_translator_translates_test_set_as_pytorch_does(shipped: Shipped, beam_size: int):
    """Every sentence of test_2016_flickr, as `python -m model.evaluate` translates it (batches of 64)."""
    exported, opts = shipped.exported, SearchOptions(beam_size=beam_size)
    with torch_threads(SHIPPED_THREADS):
        expected = translate(exported.model, exported.tokenizer, shipped.sources, opts, batch_size=64)
    translator = exported.translator(threads=SHIPPED_THREADS)
    got = [hyps[0].text for hyps in translator.translate(shipped.sources, opts, batch_size=64)]
    mismatches = [(i, e, g) for i, (e, g) in enumerate(zip(expected, got)) if e != g]
    assert not mismatches, f"{len(mismatches)} of {len(got)} translations differ, e.g. {mismatches[:3]}"
