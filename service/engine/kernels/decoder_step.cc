// The decoder step's own kernels: ONNX Runtime custom operators for the CPU provider, fp32.
// service.engine.kernels.graph puts them in place of the exported step's nodes; service.engine.kernels.build compiles
// this file against ONNX Runtime's C/C++ headers (its C API is versioned: a library built against 1.21's headers
// loads in the 1.31 runtime).
//
// ours.DecoderSelfAttention(q, k, v, cache_k, cache_v, positions, slot_rows) -> out, cache_k', cache_v'
//     q, k, v (N, D): one step's projections; caches (C, H, L, Dh), C >= N: the first N rows the rows', the rest room
//     that no row reads; positions (N,) int64. Row i's key and value go to slot positions[i] of row i of cache_k',
//     cache_v' (in place when ONNX Runtime gives them the caches' buffers, as service.engine.decoder binds them; else
//     after a copy), and, head by head, out[i] = softmax(q_i K^T / sqrt(Dh)) V over slots 0..positions[i].
//     slot_rows (N, W) int64, W >= every position, or empty (0, 0): the row (< N) of the caches that holds each
//     earlier slot of row i (slot j at slot_rows[i, j], j < positions[i]); empty, each row holds its own. A beam
//     reorder then reorders this table, not the caches: beams that share a parent read its slots where they are.
// ours.DecoderCrossAttention(q, cross_k, cross_v, src_mask, cross_from) -> out
//     The same over the encoder's keys and values (M, H, S, Dh), at the source positions src_mask (N, S) keeps (a
//     row reads no further than its last kept position: a batch's padding after it costs nothing).
//     cross_from (N,) int64, or empty (0,): the row of cross_k and cross_v that row i reads (empty: its own, M = N).
//     A beam sentence's rows read one row of keys and values, held once a sentence, not once a beam.
// ours.TopLogSoftmax(logits, width) -> top_logp, top_tokens
//     Each row's `width` (a (1,) int64) best tokens and their log-probabilities, best first, the lower token first
//     among equals: TopK(LogSoftmax(logits), width), without the (N, V) log-probabilities written and read again.
//     A negative width -w asks for the w best tokens alone (a greedy search reads no log-probability): top_logp
//     then holds their logits, and the pass over the whole row that its log-sum-exp takes is left out.
// ours.AddLayerNorm(x, skip, scale, bias; epsilon) -> y
//     LayerNormalization(x + skip, scale, bias) over the last axis, epsilon its attribute: a post-LN layer's residual
//     sum and the LayerNorm after it in one node (one pass over the sum fewer, and one node's overhead fewer, at a
//     step of a few rows most of their time).
// ours.HalfGemm(x, w, bias; columns, relu, bias_last) -> y
//     y = x W + bias, then max(y, 0) where relu: x (..., K); W (S, K, 64) fp16, the rewrite's packing of a (K, columns)
//     weight whose values are fp16's (exported as fp16 and cast), in strips of 64 output columns (the last padded
//     with zeros); bias (S * 64,) or empty (0,): none. Each output sums over K in blocks of 256, each block from zero
//     and added in order, the bias first (a Gemm's) or, with bias_last, after them (a MatMul's, then an Add): the
//     order in which ONNX Runtime's Gemm and MatMul (MLAS) sum on the CPUs that run it (AVX-512), so that y is
//     theirs to the bit, with the weights read at half the bytes. A step of a few rows reads every weight for little
//     arithmetic: its time is the bytes it reads.
// ours.MoveRows(x, rows, lengths) -> y
//     x (N, H, L, Dh), lengths (K,) int64 (K <= N): the slots in use of x's first K rows; rows (M,) int64 (M <= N),
//     each one of those K (M > K where a beam's first row becomes its beams, into the rows after the K). y has x's shape: y = x, then y[i] = x[rows[i]] for i < M, of each head only the first
//     lengths[rows[i]] slots (a self-attention cache's slots in use; the rest of the row is left as it was). In
//     place when ONNX Runtime gives y x's buffer (service.engine.decoder binds it so): the rows from M on are not
//     touched, nor is a row that keeps its place; a row whose content another row still has to read is written after
//     that read, and a cycle of rows goes through a copy of one of them. When a sentence leaves, the decoder moves
//     only the rows that fill its place (a beam reorder moves none: it reorders the slot table).
//
// Rows run in parallel on the session's intra-op threads. The attention computes what ONNX's Attention computes for
// one query (model.transformer.attention); -fassociative-math lets the compiler vectorize the sums, in another order,
// as BLAS sums. The attention at the usual head sizes and the top-k's largest logit of a block are written in eight-
// lane vectors (GCC's and Clang's vector extension), which the compiler left scalar or gathered.

#define ORT_API_MANUAL_INIT
#include "onnxruntime_cxx_api.h"
#undef ORT_API_MANUAL_INIT

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

namespace {

// e^x for x <= 0, as Cephes' expf: e^x = 2^n e^r with n = round(x / ln 2), |r| <= ln(2) / 2, and e^r its degree-7
// polynomial; x is held above -87 (e^-87 ~ 1.6e-38, nothing beside e^0 in a sum). No branch: the loops that call
// it vectorize.
inline float exp_nonpositive(float x) {
  x = std::max(x, -87.0f);
  const float n = std::floor(x * 1.44269504088896341f + 0.5f);
  const float r = x - n * 0.693359375f + n * 2.12194440e-4f;  // x - n ln(2), ln(2) in two parts
  float p = 1.9875691500e-4f;
  for (const float c : {1.3981999507e-3f, 8.3334519073e-3f, 4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f}) {
    p = p * r + c;
  }
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;  // 2^n as a float's exponent
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return (p * r * r + r + 1.0f) * scale;
}

// Key or value j of a head: at X + at[j] (Table: a self-attention cache whose slots other rows hold), else side by
// side. A template parameter, so that the loops without a table are those before it, with no test in them.
template <bool Table>
inline const float* slot(const float* X, const int64_t* at, int64_t j, int64_t dh) {
  if constexpr (Table) return X + at[j];
  return X + j * dh;
}

// scores[j] = q . K_j for j < len, four keys at a time: four sums in flight rather than one chain of additions.
template <bool Table>
void dot_products(const float* q, const float* K, const int64_t* at, int64_t len, int64_t dh, float* scores) {
  int64_t j = 0;
  for (; j + 4 <= len; j += 4) {
    const float *k0 = slot<Table>(K, at, j, dh), *k1 = slot<Table>(K, at, j + 1, dh),
                *k2 = slot<Table>(K, at, j + 2, dh), *k3 = slot<Table>(K, at, j + 3, dh);
    float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
    for (int64_t d = 0; d < dh; ++d) {
      s0 += q[d] * k0[d];
      s1 += q[d] * k1[d];
      s2 += q[d] * k2[d];
      s3 += q[d] * k3[d];
    }
    scores[j] = s0, scores[j + 1] = s1, scores[j + 2] = s2, scores[j + 3] = s3;
  }
  for (; j < len; ++j) {
    const float* key = slot<Table>(K, at, j, dh);
    float dot = 0.0f;
    for (int64_t d = 0; d < dh; ++d) dot += q[d] * key[d];
    scores[j] = dot;
  }
}

// out = share * sum_j weights[j] V_j for j < len, four values at a time (one store of out per four rather than per
// value). A masked position weighs exactly 0; its value is finite (the encoder's, or a cache's zeros).
template <bool Table>
void weighted_sum(const float* weights, const float* V, const int64_t* at, int64_t len, int64_t dh, float share,
                  float* __restrict out) {
  std::fill(out, out + dh, 0.0f);
  int64_t j = 0;
  for (; j + 4 <= len; j += 4) {
    const float *v0 = slot<Table>(V, at, j, dh), *v1 = slot<Table>(V, at, j + 1, dh),
                *v2 = slot<Table>(V, at, j + 2, dh), *v3 = slot<Table>(V, at, j + 3, dh);
    const float w0 = weights[j] * share, w1 = weights[j + 1] * share, w2 = weights[j + 2] * share,
                w3 = weights[j + 3] * share;
    for (int64_t d = 0; d < dh; ++d) out[d] += w0 * v0[d] + w1 * v1[d] + w2 * v2[d] + w3 * v3[d];
  }
  for (; j < len; ++j) {
    const float* value = slot<Table>(V, at, j, dh);
    const float weight = weights[j] * share;
    for (int64_t d = 0; d < dh; ++d) out[d] += weight * value[d];
  }
}

// weights[j] = e^(weights[j] - highest) for j < len, 0 where weights[j] is -inf (a masked position); their sum.
inline float exponentiate(float* weights, int64_t len, float highest) {
  float total = 0.0f;
  for (int64_t j = 0; j < len; ++j) {  // no branch: the compiler vectorizes it
    const float weight = exp_nonpositive(weights[j] - highest);
    weights[j] = weights[j] == -INFINITY ? 0.0f : weight;
    total += weights[j];
  }
  return total;
}

// Eight floats as one value (GCC's and Clang's vector extension: an AVX register where the CPU has them, else two
// SSE registers or scalars), read and written through memcpy, which asks no alignment.
typedef float Floats8 __attribute__((vector_size(32)));

inline Floats8 load8(const float* p) {
  Floats8 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

inline float sum8(Floats8 v) { return ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7])); }

// attend() for a head size DH known when compiled (a multiple of 16): the query and the weighted sum held in
// registers eight lanes at a time, each dot product two sums in flight. Plain loops over runtime sizes were
// vectorized across keys, through gathers.
template <bool Table, int64_t DH>
void attend_fixed(const float* q, const float* K, const float* V, const int64_t* at, int64_t len, const bool* mask,
                  float* out, float* weights) {
  constexpr int64_t C = DH / 8;
  static_assert(DH % 16 == 0, "two sums of eight lanes");
  Floats8 query[C];
  for (int64_t c = 0; c < C; ++c) query[c] = load8(q + 8 * c);
  const float scale = 1.0f / std::sqrt(static_cast<float>(DH));
  float highest = -INFINITY;
  for (int64_t j = 0; j < len; ++j) {
    const float* key = slot<Table>(K, at, j, DH);
    Floats8 even = query[0] * load8(key), odd = query[1] * load8(key + 8);
    for (int64_t c = 2; c < C; c += 2) {
      even += query[c] * load8(key + 8 * c);
      odd += query[c + 1] * load8(key + 8 * c + 8);
    }
    weights[j] = !mask || mask[j] ? sum8(even + odd) * scale : -INFINITY;
    highest = std::max(highest, weights[j]);
  }
  const float total = exponentiate(weights, len, highest);
  Floats8 sum[C] = {};
  for (int64_t j = 0; j < len; ++j) {
    const float* value = slot<Table>(V, at, j, DH);
    for (int64_t c = 0; c < C; ++c) sum[c] += weights[j] * load8(value + 8 * c);
  }
  const float share = total > 0.0f ? 1.0f / total : 0.0f;
  for (int64_t c = 0; c < C; ++c) {
    const Floats8 shared = sum[c] * share;
    std::memcpy(out + 8 * c, &shared, sizeof(shared));
  }
}

// out (dh) = softmax(q . K_j / sqrt(dh) for j < len where mask[j]) V, K_j and V_j where `at` says (slot());
// weights: scratch of len floats. A head of a usual size runs attend_fixed.
template <bool Table>
void attend(const float* q, const float* K, const float* V, const int64_t* at, int64_t len, int64_t dh,
            const bool* mask, float* out, float* weights) {
  switch (dh) {  // the usual head sizes (64: the shipped models', OPUS-MT's, NLLB-200's)
    case 16: return attend_fixed<Table, 16>(q, K, V, at, len, mask, out, weights);
    case 32: return attend_fixed<Table, 32>(q, K, V, at, len, mask, out, weights);
    case 64: return attend_fixed<Table, 64>(q, K, V, at, len, mask, out, weights);
    case 128: return attend_fixed<Table, 128>(q, K, V, at, len, mask, out, weights);
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
  dot_products<Table>(q, K, at, len, dh, weights);
  float highest = -INFINITY;
  for (int64_t j = 0; j < len; ++j) {
    weights[j] = !mask || mask[j] ? weights[j] * scale : -INFINITY;
    highest = std::max(highest, weights[j]);
  }
  const float total = exponentiate(weights, len, highest);
  weighted_sum<Table>(weights, V, at, len, dh, total > 0.0f ? 1.0f / total : 0.0f, out);
}

// One row's work; ParallelFor hands each call a row index.
struct Rows {
  const float *Q, *K, *V, *new_k, *new_v;  // new_k, new_v: self-attention only
  const int64_t* positions;                 // self-attention: row i attends to slots 0..positions[i]
  const int64_t* slot_rows;                 // self-attention: (N, slot_columns), or nullptr (every slot its row's)
  int64_t slot_columns;
  const int64_t* cross_from;                // cross-attention: the row of K, V each row reads, or nullptr (its own)
  const bool* mask;                         // cross-attention: (N, S)
  int64_t heads, length, dh;
  float *out, *K_out, *V_out;

  static void run(void* rows, size_t row) { static_cast<Rows*>(rows)->attend_row(static_cast<int64_t>(row)); }

  void attend_row(int64_t r) {
    thread_local std::vector<float> weights;
    thread_local std::vector<int64_t> at;  // where each slot of the row is, from the first head's (slot())
    weights.resize(length);
    if (slot_rows) {
      at.resize(positions[r] + 1);
      for (int64_t j = 0; j < positions[r]; ++j) at[j] = (slot_rows[r * slot_columns + j] * heads * length + j) * dh;
      at[positions[r]] = (r * heads * length + positions[r]) * dh;  // the slot written now, in its own row
    }
    // cross-attention: the source positions up to the row's last one kept (the padding after it weighs nothing)
    int64_t kept = length;
    while (mask && kept > 0 && !mask[r * length + kept - 1]) --kept;
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t head = r * heads + h, cache = head * length * dh;
      if (positions) {
        const int64_t written = cache + positions[r] * dh;
        std::memcpy(K_out + written, new_k + head * dh, dh * sizeof(float));
        std::memcpy(V_out + written, new_v + head * dh, dh * sizeof(float));
        if (slot_rows) {
          attend<true>(Q + head * dh, K_out + h * length * dh, V_out + h * length * dh, at.data(), positions[r] + 1,
                       dh, nullptr, out + head * dh, weights.data());
        } else {
          attend<false>(Q + head * dh, K_out + cache, V_out + cache, nullptr, positions[r] + 1, dh, nullptr,
                        out + head * dh, weights.data());
        }
      } else {
        const int64_t from = ((cross_from ? cross_from[r] : r) * heads + h) * length * dh;
        attend<false>(Q + head * dh, K + from, V + from, nullptr, kept, dh, mask + r * length, out + head * dh,
                      weights.data());
      }
    }
  }
};

// One row's best tokens: the top of the logits themselves (log-softmax keeps their order), then less the row's
// log-sum-exp, log sum_j e^(x_j) = m + log sum_j e^(x_j - m) with m its largest logit. The top is found in two
// passes: the largest logit of each block of BLOCK, then, of the blocks whose largest reaches the width-th largest of
// those (a bound that at least `width` logits reach, one in each such block), the logits that reach it; those few are
// sorted, the lower token first among equals (as ONNX's TopK).
struct TopRows {
  static constexpr int64_t BLOCK = 32;
  const float* logits;
  int64_t vocab, width;
  bool log_probs;  // else top_logp gets the logits (a negative width)
  float* top_logp;
  int64_t* top_tokens;

  static void run(void* rows, size_t row) { static_cast<TopRows*>(rows)->top_row(static_cast<int64_t>(row)); }

  void top_row(int64_t r) {
    thread_local std::vector<float> largest, bound;
    thread_local std::vector<std::pair<float, int64_t>> reached;
    const float* x = logits + r * vocab;
    const int64_t blocks = (vocab + BLOCK - 1) / BLOCK;
    largest.resize(blocks);
    for (int64_t b = 0; b < blocks; ++b) {
      const float* block = x + b * BLOCK;
      float most = -INFINITY;
      if (b + 1 < blocks) {  // a whole block, eight lanes at a time: each step one vector maximum
        Floats8 lanes = load8(block);
        for (int64_t j = 8; j < BLOCK; j += 8) {
          const Floats8 next = load8(block + j);
          lanes = lanes > next ? lanes : next;
        }
        for (int64_t l = 0; l < 8; ++l) most = std::max(most, lanes[l]);
      } else {
        for (int64_t j = 0; j < vocab - b * BLOCK; ++j) most = std::max(most, block[j]);
      }
      largest[b] = most;
    }
    float threshold = -INFINITY;
    if (width <= blocks) {  // the width largest maxima, sorted by insertion: most blocks are passed over at once
      bound.assign(width, -INFINITY);
      for (int64_t b = 0; b < blocks; ++b) {
        if (!(largest[b] > bound[width - 1])) continue;
        int64_t i = width - 1;
        for (; i > 0 && largest[b] > bound[i - 1]; --i) bound[i] = bound[i - 1];
        bound[i] = largest[b];
      }
      threshold = bound[width - 1];
    }
    reached.clear();
    for (int64_t b = 0; b < blocks; ++b) {
      if (!(largest[b] >= threshold)) continue;
      for (int64_t j = b * BLOCK, end = std::min(j + BLOCK, vocab); j < end; ++j) {
        if (x[j] >= threshold) reached.emplace_back(x[j], j);
      }
    }
    const int64_t kept = std::min<int64_t>(width, static_cast<int64_t>(reached.size()));
    std::partial_sort(reached.begin(), reached.begin() + kept, reached.end(), [](const auto& a, const auto& b) {
      return a.first > b.first || (a.first == b.first && a.second < b.second);
    });
    float log_sum_exp = 0.0f;
    if (log_probs) {
      const float highest = kept > 0 ? reached[0].first : -INFINITY;
      float total = 0.0f;
      for (int64_t j = 0; j < vocab; ++j) total += exp_nonpositive(x[j] - highest);
      log_sum_exp = highest + std::log(total);
    }
    float* best = top_logp + r * width;
    int64_t* tokens = top_tokens + r * width;
    for (int64_t i = 0; i < kept; ++i) {
      best[i] = reached[i].first - log_sum_exp;
      tokens[i] = reached[i].second;
    }
  }
};

// The in-place order of MoveRows: each row written only once no row still to be written reads it (Kahn's order of
// the graph "i reads rows[i]"); a row on a cycle is first copied aside (`aside`), and its readers read the copy.
struct RowMoves {
  float* x;                      // (N, H, L, Dh), read and written
  const int64_t* rows;           // (M,)
  const int64_t* lengths;        // (K,) slots in use of each of the first K rows, each rows[i] < K
  int64_t m, heads, slots, dh;

  void copy_row(float* to, const float* from, int64_t length) const {
    const int64_t head = slots * dh, count = std::min(length, slots) * dh;
    for (int64_t h = 0; h < heads; ++h) std::memcpy(to + h * head, from + h * head, count * sizeof(float));
  }

  float* row(int64_t r) const { return x + r * heads * slots * dh; }

  void run() const {
    std::vector<int64_t> readers(m, 0), ready;
    std::vector<bool> moves(m, false), done(m, false);
    for (int64_t i = 0; i < m; ++i) {
      moves[i] = rows[i] != i;
      if (moves[i] && rows[i] < m) ++readers[rows[i]];
    }
    for (int64_t i = 0; i < m; ++i) {
      if (moves[i] && readers[i] == 0) ready.push_back(i);
    }
    std::vector<float> aside;  // rows copied aside, whole
    std::vector<int64_t> aside_of(m, -1);
    const int64_t row_size = heads * slots * dh;
    int64_t next = 0;  // the first row not yet passed over for cycles
    while (true) {
      while (!ready.empty()) {
        const int64_t i = ready.back();
        ready.pop_back();
        const int64_t from = rows[i];
        const float* source = from < m && aside_of[from] >= 0 ? aside.data() + aside_of[from] * row_size : row(from);
        copy_row(row(i), source, lengths[from]);
        done[i] = true;
        if (from < m && moves[from] && --readers[from] == 0 && !done[from]) ready.push_back(from);
      }
      while (next < m && !(moves[next] && !done[next])) ++next;
      if (next == m) break;
      // every row left to write is on a cycle: one of them aside, then its readers read the copy
      aside_of[next] = static_cast<int64_t>(aside.size() / row_size);
      aside.resize(aside.size() + row_size);
      copy_row(aside.data() + aside_of[next] * row_size, row(next), lengths[next]);
      readers[next] = 0;
      ready.push_back(next);
    }
  }
};

// The rows' positions, each a slot of the caches, and their slot table (N, W), or none (where == nullptr): a row
// for each row, a column for each slot before its position, and every entry one of the N rows. Else an error, not a
// read outside the caches.
void check_positions(const int64_t* positions, const int64_t* where, const std::vector<int64_t>& table, int64_t rows,
                     int64_t slots) {
  if (where && (table.size() != 2 || table[0] != rows)) {
    ORT_CXX_API_THROW("DecoderSelfAttention: slot_rows must have a row for each row", ORT_INVALID_ARGUMENT);
  }
  for (int64_t r = 0; r < rows; ++r) {
    if (positions[r] < 0 || positions[r] >= slots || (where && positions[r] > table[1])) {
      ORT_CXX_API_THROW("DecoderSelfAttention: a position outside the cache or the slot table", ORT_INVALID_ARGUMENT);
    }
    for (int64_t j = 0; where && j < positions[r]; ++j) {
      const int64_t row = where[r * table[1] + j];
      if (row < 0 || row >= rows) ORT_CXX_API_THROW("DecoderSelfAttention: slot_rows names no row", ORT_INVALID_ARGUMENT);
    }
  }
}

struct SelfAttentionKernel {
  SelfAttentionKernel(const OrtApi&, const OrtKernelInfo*) {}

  void Compute(OrtKernelContext* context) {
    Ort::KernelContext ctx(context);
    auto q = ctx.GetInput(0), k = ctx.GetInput(1), v = ctx.GetInput(2);
    auto cache_k = ctx.GetInput(3), cache_v = ctx.GetInput(4), positions = ctx.GetInput(5);
    auto slot_rows = ctx.GetInput(6);
    const std::vector<int64_t> shape = cache_k.GetTensorTypeAndShapeInfo().GetShape();
    const int64_t held = shape[0], heads = shape[1], slots = shape[2], dh = shape[3];
    const int64_t rows = q.GetTensorTypeAndShapeInfo().GetShape()[0];
    if (rows > held || static_cast<int64_t>(positions.GetTensorTypeAndShapeInfo().GetElementCount()) != rows) {
      ORT_CXX_API_THROW("DecoderSelfAttention: the caches must hold a row for each row, and positions name a "
                        "position for each", ORT_INVALID_ARGUMENT);
    }
    const std::vector<int64_t> table = slot_rows.GetTensorTypeAndShapeInfo().GetShape();
    const int64_t* where = table[0] * table[1] > 0 ? slot_rows.GetTensorData<int64_t>() : nullptr;
    check_positions(positions.GetTensorData<int64_t>(), where, table, rows, slots);
    float* out = ctx.GetOutput(0, {rows, heads * dh}).GetTensorMutableData<float>();
    float* K = ctx.GetOutput(1, shape).GetTensorMutableData<float>();
    float* V = ctx.GetOutput(2, shape).GetTensorMutableData<float>();
    const size_t bytes = static_cast<size_t>(held * heads * slots * dh) * sizeof(float);
    if (K != cache_k.GetTensorData<float>()) std::memcpy(K, cache_k.GetTensorData<float>(), bytes);
    if (V != cache_v.GetTensorData<float>()) std::memcpy(V, cache_v.GetTensorData<float>(), bytes);
    Rows work{q.GetTensorData<float>(), nullptr, nullptr, k.GetTensorData<float>(), v.GetTensorData<float>(),
              positions.GetTensorData<int64_t>(), where, table[1], nullptr, nullptr, heads, slots, dh, out, K, V};
    ctx.ParallelFor(Rows::run, static_cast<size_t>(rows), 0, &work);
  }
};

struct CrossAttentionKernel {
  CrossAttentionKernel(const OrtApi&, const OrtKernelInfo*) {}

  void Compute(OrtKernelContext* context) {
    Ort::KernelContext ctx(context);
    auto q = ctx.GetInput(0), cross_k = ctx.GetInput(1), cross_v = ctx.GetInput(2), mask = ctx.GetInput(3);
    auto cross_from = ctx.GetInput(4);
    const std::vector<int64_t> shape = cross_k.GetTensorTypeAndShapeInfo().GetShape();
    const int64_t held = shape[0], heads = shape[1], length = shape[2], dh = shape[3];
    const int64_t rows = q.GetTensorTypeAndShapeInfo().GetShape()[0];
    const int64_t named = static_cast<int64_t>(cross_from.GetTensorTypeAndShapeInfo().GetElementCount());
    const int64_t* from = named > 0 ? cross_from.GetTensorData<int64_t>() : nullptr;
    if (from ? named != rows : held != rows) {
      ORT_CXX_API_THROW("DecoderCrossAttention: cross_from must name a row for each row, or be empty where the keys "
                        "and values hold a row for each", ORT_INVALID_ARGUMENT);
    }
    for (int64_t r = 0; from && r < rows; ++r) {
      if (from[r] < 0 || from[r] >= held) ORT_CXX_API_THROW("DecoderCrossAttention: cross_from names no row",
                                                           ORT_INVALID_ARGUMENT);
    }
    float* out = ctx.GetOutput(0, {rows, heads * dh}).GetTensorMutableData<float>();
    Rows work{q.GetTensorData<float>(), cross_k.GetTensorData<float>(), cross_v.GetTensorData<float>(), nullptr,
              nullptr, nullptr, nullptr, 0, from, mask.GetTensorData<bool>(), heads, length, dh, out, nullptr, nullptr};
    ctx.ParallelFor(Rows::run, static_cast<size_t>(rows), 0, &work);
  }
};

struct TopLogSoftmaxKernel {
  TopLogSoftmaxKernel(const OrtApi&, const OrtKernelInfo*) {}

  void Compute(OrtKernelContext* context) {
    Ort::KernelContext ctx(context);
    auto logits = ctx.GetInput(0), width = ctx.GetInput(1);
    const std::vector<int64_t> shape = logits.GetTensorTypeAndShapeInfo().GetShape();
    const int64_t rows = shape[0], vocab = shape[1];
    const int64_t asked = width.GetTensorData<int64_t>()[0], k = std::min(std::abs(asked), vocab);
    TopRows work{logits.GetTensorData<float>(), vocab, k, asked >= 0,
                 ctx.GetOutput(0, {rows, k}).GetTensorMutableData<float>(),
                 ctx.GetOutput(1, {rows, k}).GetTensorMutableData<int64_t>()};
    if (k > 0) ctx.ParallelFor(TopRows::run, static_cast<size_t>(rows), 0, &work);
  }
};

// One row: its sum, its mean, the mean of its squared deviations from it (two passes: no cancellation), then each
// element normalized, scaled and shifted.
void add_layer_norm_row(const float* x, const float* skip, const float* scale, const float* bias, int64_t size,
                        float epsilon, float* __restrict y) {
  float total = 0.0f;
  for (int64_t h = 0; h < size; ++h) {
    y[h] = x[h] + skip[h];
    total += y[h];
  }
  const float mean = total / static_cast<float>(size);
  float deviations = 0.0f;
  for (int64_t h = 0; h < size; ++h) deviations += (y[h] - mean) * (y[h] - mean);
  const float inverse = 1.0f / std::sqrt(deviations / static_cast<float>(size) + epsilon);
  for (int64_t h = 0; h < size; ++h) y[h] = (y[h] - mean) * inverse * scale[h] + bias[h];
}

// One row's work for ParallelFor, as Rows'.
struct AddNormRows {
  const float *x, *skip, *scale, *bias;
  int64_t size;
  float epsilon;
  float* y;

  static void run(void* rows, size_t row) { static_cast<AddNormRows*>(rows)->norm_row(static_cast<int64_t>(row)); }

  void norm_row(int64_t r) { add_layer_norm_row(x + r * size, skip + r * size, scale, bias, size, epsilon, y + r * size); }
};

struct AddLayerNormKernel {
  float epsilon;

  AddLayerNormKernel(const OrtApi&, const OrtKernelInfo* info)
      : epsilon(Ort::ConstKernelInfo(info).GetAttribute<float>("epsilon")) {}

  void Compute(OrtKernelContext* context) {
    Ort::KernelContext ctx(context);
    auto x = ctx.GetInput(0), skip = ctx.GetInput(1), scale = ctx.GetInput(2), bias = ctx.GetInput(3);
    const std::vector<int64_t> shape = x.GetTensorTypeAndShapeInfo().GetShape();
    const int64_t size = shape.empty() ? 1 : shape.back();
    const int64_t count = static_cast<int64_t>(x.GetTensorTypeAndShapeInfo().GetElementCount());
    if (static_cast<int64_t>(skip.GetTensorTypeAndShapeInfo().GetElementCount()) != count ||
        static_cast<int64_t>(scale.GetTensorTypeAndShapeInfo().GetElementCount()) != size ||
        static_cast<int64_t>(bias.GetTensorTypeAndShapeInfo().GetElementCount()) != size) {
      ORT_CXX_API_THROW("AddLayerNorm: skip must be x's shape, scale and bias its last axis", ORT_INVALID_ARGUMENT);
    }
    AddNormRows work{x.GetTensorData<float>(), skip.GetTensorData<float>(), scale.GetTensorData<float>(),
                     bias.GetTensorData<float>(), size, epsilon, ctx.GetOutput(0, shape).GetTensorMutableData<float>()};
    if (size > 0) ctx.ParallelFor(AddNormRows::run, static_cast<size_t>(count / size), 0, &work);
  }
};

// HalfGemm's arithmetic, compiled for AVX-512 whatever the library's -march (HalfWeights() says whether this CPU
// runs it). STRIP output columns are four 16-lane vectors; a row's sums over a K block run in them, R rows at a time,
// so that each weight converted from fp16 serves R rows. Its additions are builtins (add_in_order) that the
// library's -fassociative-math cannot reorder: the order is what makes the outputs MLAS's.
constexpr int64_t STRIP = 64, K_BLOCK = 256;

#define AVX512 __attribute__((target("avx512f")))

AVX512 inline __m512 add_in_order(__m512 a, __m512 b) { return _mm512_add_round_ps(a, b, _MM_FROUND_CUR_DIRECTION); }

template <int R>
AVX512 void strip_rows(const float* x, int64_t K, const uint16_t* w, const float* bias, bool bias_last, bool relu,
                       float* y, int64_t ldy, int64_t width) {
  __m512 sum[R][4], block[R][4];
  for (int64_t k0 = 0; k0 < K; k0 += K_BLOCK) {
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < 4; ++j) block[r][j] = _mm512_setzero_ps();
    for (int64_t k = k0; k < std::min(k0 + K_BLOCK, K); ++k) {
      const uint16_t* wk = w + k * STRIP;
      __m512 b[4];
      for (int j = 0; j < 4; ++j) {
        b[j] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wk + 16 * j)));
      }
      for (int r = 0; r < R; ++r) {
        const __m512 a = _mm512_set1_ps(x[r * K + k]);
        for (int j = 0; j < 4; ++j) block[r][j] = _mm512_fmadd_ps(a, b[j], block[r][j]);
      }
    }
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < 4; ++j) {
        if (k0 > 0) sum[r][j] = add_in_order(sum[r][j], block[r][j]);
        else sum[r][j] = bias && !bias_last ? add_in_order(_mm512_loadu_ps(bias + 16 * j), block[r][j]) : block[r][j];
      }
  }
  if (bias && bias_last) {
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < 4; ++j) sum[r][j] = add_in_order(sum[r][j], _mm512_loadu_ps(bias + 16 * j));
  }
  for (int r = 0; r < R; ++r) {
    alignas(64) float row[STRIP];
    for (int j = 0; j < 4; ++j) {
      _mm512_store_ps(row + 16 * j, relu ? _mm512_max_ps(sum[r][j], _mm512_setzero_ps()) : sum[r][j]);
    }
    std::memcpy(y + r * ldy, row, static_cast<size_t>(width) * sizeof(float));
  }
}

// One strip of output columns, for every row, for ParallelFor.
struct HalfGemmStrips {
  const float* x;
  const uint16_t* w;
  const float* bias;  // nullptr: none
  int64_t rows, K, columns;
  bool bias_last, relu;
  float* y;

  static void run(void* strips, size_t s) { static_cast<HalfGemmStrips*>(strips)->strip(static_cast<int64_t>(s)); }

  // strip_rows for 1 to 6 rows at a time, by their count
  using StripRows = void (*)(const float*, int64_t, const uint16_t*, const float*, bool, bool, float*, int64_t,
                             int64_t);
  static constexpr StripRows by_count[] = {nullptr,       strip_rows<1>, strip_rows<2>, strip_rows<3>,
                                           strip_rows<4>, strip_rows<5>, strip_rows<6>};

  void strip(int64_t s) {
    const uint16_t* ws = w + s * K * STRIP;
    const float* bs = bias ? bias + s * STRIP : nullptr;
    const int64_t first = s * STRIP, width = std::min(STRIP, columns - first);
    for (int64_t r = 0; r < rows; r += 6) {
      by_count[std::min<int64_t>(6, rows - r)](x + r * K, K, ws, bs, bias_last, relu, y + r * columns + first,
                                                columns, width);
    }
  }
};

struct HalfGemmKernel {
  int64_t columns;
  bool relu, bias_last;

  HalfGemmKernel(const OrtApi&, const OrtKernelInfo* info)
      : columns(Ort::ConstKernelInfo(info).GetAttribute<int64_t>("columns")),
        relu(Ort::ConstKernelInfo(info).GetAttribute<int64_t>("relu") != 0),
        bias_last(Ort::ConstKernelInfo(info).GetAttribute<int64_t>("bias_last") != 0) {}

  void Compute(OrtKernelContext* context) {
    Ort::KernelContext ctx(context);
    auto x = ctx.GetInput(0), w = ctx.GetInput(1), bias = ctx.GetInput(2);
    std::vector<int64_t> shape = x.GetTensorTypeAndShapeInfo().GetShape();
    const std::vector<int64_t> packed = w.GetTensorTypeAndShapeInfo().GetShape();
    const int64_t K = shape.empty() ? 0 : shape.back(), strips = (columns + STRIP - 1) / STRIP;
    const int64_t biased = static_cast<int64_t>(bias.GetTensorTypeAndShapeInfo().GetElementCount());
    if (packed.size() != 3 || packed[0] != strips || packed[1] != K || packed[2] != STRIP ||
        (biased != 0 && biased != strips * STRIP)) {
      ORT_CXX_API_THROW("HalfGemm: w must be (ceil(columns / 64), K, 64) for x's last axis K, and bias empty or "
                        "64 a strip", ORT_INVALID_ARGUMENT);
    }
    const int64_t rows = K > 0 ? static_cast<int64_t>(x.GetTensorTypeAndShapeInfo().GetElementCount()) / K : 0;
    shape.back() = columns;
    HalfGemmStrips work{x.GetTensorData<float>(), w.GetTensorData<uint16_t>(),
                        biased ? bias.GetTensorData<float>() : nullptr, rows, K, columns, bias_last, relu,
                        ctx.GetOutput(0, shape).GetTensorMutableData<float>()};
    if (rows > 0) ctx.ParallelFor(HalfGemmStrips::run, static_cast<size_t>(strips), 0, &work);
  }
};

struct MoveRowsKernel {
  MoveRowsKernel(const OrtApi&, const OrtKernelInfo*) {}

  void Compute(OrtKernelContext* context) {
    Ort::KernelContext ctx(context);
    auto x = ctx.GetInput(0), rows = ctx.GetInput(1), lengths = ctx.GetInput(2);
    const std::vector<int64_t> shape = x.GetTensorTypeAndShapeInfo().GetShape();
    const int64_t n = shape[0], m = static_cast<int64_t>(rows.GetTensorTypeAndShapeInfo().GetElementCount());
    const int64_t k = static_cast<int64_t>(lengths.GetTensorTypeAndShapeInfo().GetElementCount());
    if (k > n || m > n) ORT_CXX_API_THROW("MoveRows: lengths and rows must name at most x's rows", ORT_INVALID_ARGUMENT);
    const int64_t* from = rows.GetTensorData<int64_t>();
    for (int64_t i = 0; i < m; ++i) {
      if (from[i] < 0 || from[i] >= k) ORT_CXX_API_THROW("MoveRows: a row out of range", ORT_INVALID_ARGUMENT);
    }
    float* y = ctx.GetOutput(0, shape).GetTensorMutableData<float>();
    const float* source = x.GetTensorData<float>();
    if (y != source) std::memcpy(y, source, x.GetTensorTypeAndShapeInfo().GetElementCount() * sizeof(float));
    RowMoves{y, from, lengths.GetTensorData<int64_t>(), m, shape[1], shape[2], shape[3]}.run();
  }
};

constexpr ONNXTensorElementDataType FLOAT = ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
constexpr ONNXTensorElementDataType INT64 = ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64;

constexpr ONNXTensorElementDataType BOOL = ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL;
constexpr ONNXTensorElementDataType HALF = ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16;

// An operator of ours on the CPU provider: its name, its inputs' and outputs' types, and the kernel that runs it.
template <typename Kernel>
struct Operator : Ort::CustomOpBase<Operator<Kernel>, Kernel> {
  Operator(const char* name, std::vector<ONNXTensorElementDataType> inputs,
           std::vector<ONNXTensorElementDataType> outputs)
      : name(name), inputs(std::move(inputs)), outputs(std::move(outputs)) {}

  void* CreateKernel(const OrtApi& api, const OrtKernelInfo* info) const { return new Kernel(api, info); }
  const char* GetName() const { return name; }
  const char* GetExecutionProviderType() const { return "CPUExecutionProvider"; }
  size_t GetInputTypeCount() const { return inputs.size(); }
  ONNXTensorElementDataType GetInputType(size_t i) const { return inputs[i]; }
  size_t GetOutputTypeCount() const { return outputs.size(); }
  ONNXTensorElementDataType GetOutputType(size_t i) const { return outputs[i]; }

  const char* name;
  std::vector<ONNXTensorElementDataType> inputs, outputs;
};

Operator<SelfAttentionKernel> self_attention{
    "DecoderSelfAttention", {FLOAT, FLOAT, FLOAT, FLOAT, FLOAT, INT64, INT64}, {FLOAT, FLOAT, FLOAT}};
Operator<CrossAttentionKernel> cross_attention{"DecoderCrossAttention", {FLOAT, FLOAT, FLOAT, BOOL, INT64}, {FLOAT}};
Operator<TopLogSoftmaxKernel> top_log_softmax{"TopLogSoftmax", {FLOAT, INT64}, {FLOAT, INT64}};
Operator<MoveRowsKernel> move_rows{"MoveRows", {FLOAT, INT64, INT64}, {FLOAT}};
Operator<AddLayerNormKernel> add_layer_norm{"AddLayerNorm", {FLOAT, FLOAT, FLOAT, FLOAT}, {FLOAT}};
Operator<HalfGemmKernel> half_gemm{"HalfGemm", {FLOAT, HALF, FLOAT}, {FLOAT}};

}  // namespace

// Whether this CPU runs ours.HalfGemm (service.engine.kernels.graph puts it in only where it does).
extern "C" int HalfWeights() { return __builtin_cpu_supports("avx512f") ? 1 : 0; }

// What SessionOptions.register_custom_ops_library calls: the operators, in the domain "ours".
extern "C" OrtStatus* ORT_API_CALL RegisterCustomOps(OrtSessionOptions* options, const OrtApiBase* api) {
  const OrtApi* ours = api->GetApi(ORT_API_VERSION);
  if (ours == nullptr) {  // a runtime older than the headers: an error, which the first API version can make
    return api->GetApi(1)->CreateStatus(ORT_FAIL, "the kernels were built against a newer ONNX Runtime's headers");
  }
  Ort::InitApi(ours);
  static Ort::CustomOpDomain* domain = [] {  // once, however many sessions register it
    auto* ours = new Ort::CustomOpDomain("ours");
    ours->Add(&self_attention);
    ours->Add(&cross_attention);
    ours->Add(&top_log_softmax);
    ours->Add(&move_rows);
    ours->Add(&add_layer_norm);
    ours->Add(&half_gemm);
    return ours;
  }();
  Ort::UnownedSessionOptions(options).Add(*domain);
  return nullptr;
}
