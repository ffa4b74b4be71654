// A decoder step's attention as kernels of our own: ONNX Runtime custom operators for the CPU, fp32, for
// bench.studies.decoding_attention (its "kernels" variant). Not part of the service: a measure of what a kernel of
// our own would buy. Build against ONNX Runtime's C/C++ headers: 1.21's were tried here, and since the C API is
// versioned the 1.31 runtime loads the library. Debian 13's libonnxruntime-dev (1.21) has them; on Debian 12, unpack that package's .deb from Debian's pool with
// `dpkg-deb -x` and point -I at its usr/include/onnxruntime. Then pass the library to the study with --kernels:
//
//     g++ -O3 -march=native -fassociative-math -fno-signed-zeros -fno-trapping-math -shared -fPIC -std=c++17
//         -I/usr/include/onnxruntime bench/studies/decoding_attention.cc -o /tmp/decoding_attention.so  (one line)
//
// (-fassociative-math lets the dot products vectorize: a sum in another order, as BLAS sums.)
//
// ours.DecoderSelfAttention(q, k, v, cache_k, cache_v, positions) -> out, cache_k', cache_v'   (attribute num_heads)
//     q, k, v (N, D): one step's projections; caches (N, H, L, Dh); positions (N,) int64. Row i's key and value go
//     to slot positions[i] of cache_k', cache_v' (in place when ONNX Runtime gives them the caches' buffers, as
//     service.engine.decoder binds them; else after a copy), and out[i] = softmax(q_i K^T / sqrt(Dh)) V over slots
//     0..positions[i], head by head.
// ours.DecoderCrossAttention(q, cross_k, cross_v, src_mask) -> out
//     The same over the encoder's keys and values (N, H, S, Dh), at the slots src_mask (N, S) keeps.

#define ORT_API_MANUAL_INIT
#include "onnxruntime_cxx_api.h"
#undef ORT_API_MANUAL_INIT

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace {

// out (dh) = softmax(q . K_j / sqrt(dh), j < len, where mask allows) V; weights is scratch of len floats.
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

struct SelfAttentionKernel {
  int64_t heads;

  SelfAttentionKernel(const OrtApi&, const OrtKernelInfo* info)
      : heads(Ort::ConstKernelInfo(info).GetAttribute<int64_t>("num_heads")) {}

  void Compute(OrtKernelContext* context) {
    Ort::KernelContext ctx(context);
    auto q = ctx.GetInput(0), k = ctx.GetInput(1), v = ctx.GetInput(2);
    auto cache_k = ctx.GetInput(3), cache_v = ctx.GetInput(4), positions = ctx.GetInput(5);
    const std::vector<int64_t> shape = cache_k.GetTensorTypeAndShapeInfo().GetShape();
    const int64_t rows = shape[0], slots = shape[2], dh = shape[3];
    float* out = ctx.GetOutput(0, {rows, heads * dh}).GetTensorMutableData<float>();
    float* K = ctx.GetOutput(1, shape).GetTensorMutableData<float>();
    float* V = ctx.GetOutput(2, shape).GetTensorMutableData<float>();
    const size_t bytes = static_cast<size_t>(rows * heads * slots * dh) * sizeof(float);
    if (K != cache_k.GetTensorData<float>()) std::memcpy(K, cache_k.GetTensorData<float>(), bytes);
    if (V != cache_v.GetTensorData<float>()) std::memcpy(V, cache_v.GetTensorData<float>(), bytes);
    const float *Q = q.GetTensorData<float>(), *new_k = k.GetTensorData<float>(), *new_v = v.GetTensorData<float>();
    const int64_t* P = positions.GetTensorData<int64_t>();
    std::vector<float> weights(slots);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t head = r * heads + h, cache = head * slots * dh;
        std::memcpy(K + cache + P[r] * dh, new_k + head * dh, dh * sizeof(float));
        std::memcpy(V + cache + P[r] * dh, new_v + head * dh, dh * sizeof(float));
        attend(Q + head * dh, K + cache, V + cache, P[r] + 1, dh, nullptr, out + head * dh, weights.data());
      }
    }
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
    const float *Q = q.GetTensorData<float>(), *K = cross_k.GetTensorData<float>(), *V = cross_v.GetTensorData<float>();
    const bool* M = mask.GetTensorData<bool>();
    std::vector<float> weights(length);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t head = r * heads + h;
        attend(Q + head * dh, K + head * length * dh, V + head * length * dh, length, dh, M + r * length,
               out + head * dh, weights.data());
      }
    }
  }
};

constexpr ONNXTensorElementDataType FLOAT = ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;

struct SelfAttentionOp : Ort::CustomOpBase<SelfAttentionOp, SelfAttentionKernel> {
  void* CreateKernel(const OrtApi& api, const OrtKernelInfo* info) const { return new SelfAttentionKernel(api, info); }
  const char* GetName() const { return "DecoderSelfAttention"; }
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
