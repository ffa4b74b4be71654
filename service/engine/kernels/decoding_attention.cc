// The decoder step's attention as kernels of our own: ONNX Runtime custom operators for the CPU provider, fp32.
// service.engine.kernels.graph puts them in place of the exported step's slot writes and Attention nodes;
// service.engine.kernels.build compiles this file against ONNX Runtime's C/C++ headers (its C API is versioned:
// a library built against 1.21's headers loads in the 1.31 runtime).
//
// ours.DecoderSelfAttention(q, k, v, cache_k, cache_v, positions) -> out, cache_k', cache_v'
//     q, k, v (N, D): one step's projections; caches (N, H, L, Dh); positions (N,) int64. Row i's key and value go
//     to slot positions[i] of cache_k', cache_v' (in place when ONNX Runtime gives them the caches' buffers, as
//     service.engine.decoder binds them; else after a copy), and, head by head,
//     out[i] = softmax(q_i K^T / sqrt(Dh)) V over slots 0..positions[i].
// ours.DecoderCrossAttention(q, cross_k, cross_v, src_mask) -> out
//     The same over the encoder's keys and values (N, H, S, Dh), at the source positions src_mask (N, S) keeps.
//
// Rows run in parallel on the session's intra-op threads. Both operators compute what ONNX's Attention computes for
// one query (model.transformer.attention); -fassociative-math lets the compiler vectorize the dot products, a sum in
// another order, as BLAS sums.

#define ORT_API_MANUAL_INIT
#include "onnxruntime_cxx_api.h"
#undef ORT_API_MANUAL_INIT

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace {

// out (dh) = softmax(q . K_j / sqrt(dh) for j < len where mask[j]) V; weights: scratch of len floats.
void attend(const float* q, const float* K, const float* V, int64_t len, int64_t dh, const bool* mask, float* out,
            float* weights) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
  float highest = -INFINITY;
  for (int64_t j = 0; j < len; ++j) {
    float score = -INFINITY;
    if (!mask || mask[j]) {
      const float* key = K + j * dh;
      float dot = 0.0f;
      for (int64_t d = 0; d < dh; ++d) dot += q[d] * key[d];
      score = dot * scale;
    }
    weights[j] = score;
    highest = std::max(highest, score);
  }
  float total = 0.0f;
  for (int64_t j = 0; j < len; ++j) {
    weights[j] = weights[j] == -INFINITY ? 0.0f : std::exp(weights[j] - highest);
    total += weights[j];
  }
  std::fill(out, out + dh, 0.0f);
  for (int64_t j = 0; j < len; ++j) {
    if (weights[j] == 0.0f) continue;
    const float* value = V + j * dh;
    const float weight = weights[j] / total;
    for (int64_t d = 0; d < dh; ++d) out[d] += weight * value[d];
  }
}

// One row's work; ParallelFor hands each call a row index.
struct Rows {
  const float *Q, *K, *V, *new_k, *new_v;  // new_k, new_v: self-attention only
  const int64_t* positions;                 // self-attention: row i attends to slots 0..positions[i]
  const bool* mask;                         // cross-attention: (N, S)
  int64_t heads, length, dh;
  float *out, *K_out, *V_out;

  static void run(void* rows, size_t row) { static_cast<Rows*>(rows)->attend_row(static_cast<int64_t>(row)); }

  void attend_row(int64_t r) {
    thread_local std::vector<float> weights;
    weights.resize(length);
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t head = r * heads + h, cache = head * length * dh;
      if (positions) {
        const int64_t slot = cache + positions[r] * dh;
        std::memcpy(K_out + slot, new_k + head * dh, dh * sizeof(float));
        std::memcpy(V_out + slot, new_v + head * dh, dh * sizeof(float));
        attend(Q + head * dh, K_out + cache, V_out + cache, positions[r] + 1, dh, nullptr, out + head * dh,
               weights.data());
      } else {
        attend(Q + head * dh, K + cache, V + cache, length, dh, mask + r * length, out + head * dh, weights.data());
      }
    }
  }
};

struct SelfAttentionKernel {
  SelfAttentionKernel(const OrtApi&, const OrtKernelInfo*) {}

  void Compute(OrtKernelContext* context) {
    Ort::KernelContext ctx(context);
    auto q = ctx.GetInput(0), k = ctx.GetInput(1), v = ctx.GetInput(2);
    auto cache_k = ctx.GetInput(3), cache_v = ctx.GetInput(4), positions = ctx.GetInput(5);
    const std::vector<int64_t> shape = cache_k.GetTensorTypeAndShapeInfo().GetShape();
    const int64_t rows = shape[0], heads = shape[1], slots = shape[2], dh = shape[3];
    float* out = ctx.GetOutput(0, {rows, heads * dh}).GetTensorMutableData<float>();
    float* K = ctx.GetOutput(1, shape).GetTensorMutableData<float>();
    float* V = ctx.GetOutput(2, shape).GetTensorMutableData<float>();
    const size_t bytes = static_cast<size_t>(rows * heads * slots * dh) * sizeof(float);
    if (K != cache_k.GetTensorData<float>()) std::memcpy(K, cache_k.GetTensorData<float>(), bytes);
    if (V != cache_v.GetTensorData<float>()) std::memcpy(V, cache_v.GetTensorData<float>(), bytes);
    Rows work{q.GetTensorData<float>(), nullptr, nullptr, k.GetTensorData<float>(), v.GetTensorData<float>(),
              positions.GetTensorData<int64_t>(), nullptr, heads, slots, dh, out, K, V};
    ctx.ParallelFor(Rows::run, static_cast<size_t>(rows), 0, &work);
  }
};

struct CrossAttentionKernel {
  CrossAttentionKernel(const OrtApi&, const OrtKernelInfo*) {}

  void Compute(OrtKernelContext* context) {
    Ort::KernelContext ctx(context);
    auto q = ctx.GetInput(0), cross_k = ctx.GetInput(1), cross_v = ctx.GetInput(2), mask = ctx.GetInput(3);
    const std::vector<int64_t> shape = cross_k.GetTensorTypeAndShapeInfo().GetShape();
    const int64_t rows = shape[0], heads = shape[1], length = shape[2], dh = shape[3];
    float* out = ctx.GetOutput(0, {rows, heads * dh}).GetTensorMutableData<float>();
    Rows work{q.GetTensorData<float>(), cross_k.GetTensorData<float>(), cross_v.GetTensorData<float>(), nullptr,
              nullptr, nullptr, mask.GetTensorData<bool>(), heads, length, dh, out, nullptr, nullptr};
    ctx.ParallelFor(Rows::run, static_cast<size_t>(rows), 0, &work);
  }
};

constexpr ONNXTensorElementDataType FLOAT = ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;

struct SelfAttentionOp : Ort::CustomOpBase<SelfAttentionOp, SelfAttentionKernel> {
  void* CreateKernel(const OrtApi& api, const OrtKernelInfo* info) const { return new SelfAttentionKernel(api, info); }
  const char* GetName() const { return "DecoderSelfAttention"; }
  const char* GetExecutionProviderType() const { return "CPUExecutionProvider"; }
  size_t GetInputTypeCount() const { return 6; }
  ONNXTensorElementDataType GetInputType(size_t i) const {
    return i == 5 ? ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64 : FLOAT;
  }
  size_t GetOutputTypeCount() const { return 3; }
  ONNXTensorElementDataType GetOutputType(size_t) const { return FLOAT; }
};

struct CrossAttentionOp : Ort::CustomOpBase<CrossAttentionOp, CrossAttentionKernel> {
  void* CreateKernel(const OrtApi& api, const OrtKernelInfo* info) const { return new CrossAttentionKernel(api, info); }
  const char* GetName() const { return "DecoderCrossAttention"; }
  const char* GetExecutionProviderType() const { return "CPUExecutionProvider"; }
  size_t GetInputTypeCount() const { return 4; }
  ONNXTensorElementDataType GetInputType(size_t i) const { return i == 3 ? ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL : FLOAT; }
  size_t GetOutputTypeCount() const { return 1; }
  ONNXTensorElementDataType GetOutputType(size_t) const { return FLOAT; }
};

SelfAttentionOp self_attention;
CrossAttentionOp cross_attention;

}  // namespace

// What SessionOptions.register_custom_ops_library calls: the operators, in the domain "ours".
extern "C" OrtStatus* ORT_API_CALL RegisterCustomOps(OrtSessionOptions* options, const OrtApiBase* api) {
  Ort::InitApi(api->GetApi(ORT_API_VERSION));
  static Ort::CustomOpDomain* domain = [] {  // once, however many sessions register it
    auto* ours = new Ort::CustomOpDomain("ours");
    ours->Add(&self_attention);
    ours->Add(&cross_attention);
    return ours;
  }();
  Ort::UnownedSessionOptions(options).Add(*domain);
  return nullptr;
}
