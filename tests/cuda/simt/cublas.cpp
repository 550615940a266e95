// The slice of cuBLAS kernels/cuda uses, on the emulated GPU (tests/cuda/emulation): handles bound to a
// stream, and GEMMs (plain and strided batched) with fp32 or bf16 operands, fp32 results and fp32
// accumulation (fp32 operands rounded to TF32 under CUBLAS_COMPUTE_32F_FAST_TF32). Arguments are checked as
// cuBLAS documents them (operations, types, leading dimensions), and every operand must lie in one device
// allocation of the size the arguments imply; alpha and beta are read at the call (host pointer mode); the
// product is queued on the handle's stream with what it reads and writes, so the emulation's race detector
// sees it.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "cuda/emulation/emulation.h"

struct cublasContext {
  cudaStream_t stream = nullptr;
};

namespace {

namespace emu = memwall::emulated_gpu;

float load(const void* p, cudaDataType t, std::size_t i) {
  if (t == CUDA_R_32F) return static_cast<const float*>(p)[i];
  const std::uint32_t bits = static_cast<std::uint32_t>(static_cast<const std::uint16_t*>(p)[i]) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Rounded to TF32 (10 mantissa bits, to nearest even), as the tensor cores take fp32 operands.
float to_tf32(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0xfffu + ((u >> 13) & 1u)) & ~0x1fffu;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

std::size_t type_bytes(cudaDataType t) {
  return t == CUDA_R_32F ? 4 : 2;
}

// Elements a column-major rows x cols operand with leading dimension ld spans, `batch` of them `stride`
// apart.
std::size_t span(int rows, int cols, long long ld, long long stride, int batch) {
  if (rows == 0 || cols == 0 || batch == 0) return 0;
  return static_cast<std::size_t>(stride) * static_cast<std::size_t>(batch - 1) +
         static_cast<std::size_t>(ld) * static_cast<std::size_t>(cols - 1) + static_cast<std::size_t>(rows);
}

cublasStatus_t invalid(const std::string& what) {
  emu::report(cudaErrorInvalidValue, "cuBLAS: " + what);
  return CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                    const void* alpha_p, const void* A, cudaDataType at, int lda, long long sa, const void* B,
                    cudaDataType bt, int ldb, long long sb, const void* beta_p, void* C, cudaDataType ct,
                    int ldc, long long sc, int batch, cublasComputeType_t compute, const char* name) {
  if (h == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  const std::string fn(name);
  if (m < 0 || n < 0 || k < 0 || batch < 0) return invalid(fn + ": a negative size");
  if ((ta != CUBLAS_OP_N && ta != CUBLAS_OP_T) || (tb != CUBLAS_OP_N && tb != CUBLAS_OP_T))
    return invalid(fn + ": only CUBLAS_OP_N and CUBLAS_OP_T are emulated");
  const bool tf32 = compute == CUBLAS_COMPUTE_32F_FAST_TF32;
  if (at != bt || (at != CUDA_R_32F && at != CUDA_R_16BF) || ct != CUDA_R_32F ||
      (compute != CUBLAS_COMPUTE_32F && !(tf32 && at == CUDA_R_32F))) {
    emu::report(cudaErrorNotSupported, fn + ": emulated for fp32 or bf16 A and B, fp32 C, CUBLAS_COMPUTE_32F "
                                            "(or CUBLAS_COMPUTE_32F_FAST_TF32 with fp32 A and B)");
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  const int a_rows = ta == CUBLAS_OP_N ? m : k, a_cols = ta == CUBLAS_OP_N ? k : m;
  const int b_rows = tb == CUBLAS_OP_N ? k : n, b_cols = tb == CUBLAS_OP_N ? n : k;
  if (lda < std::max(1, a_rows))
    return invalid(fn + ": lda " + std::to_string(lda) + " < " + std::to_string(a_rows));
  if (ldb < std::max(1, b_rows))
    return invalid(fn + ": ldb " + std::to_string(ldb) + " < " + std::to_string(b_rows));
  if (ldc < std::max(1, m)) return invalid(fn + ": ldc " + std::to_string(ldc) + " < " + std::to_string(m));
  if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;
  const float alpha = *static_cast<const float*>(alpha_p), beta = *static_cast<const float*>(beta_p);
  const std::size_t ea = k == 0 ? 0 : span(a_rows, a_cols, lda, sa, batch) * type_bytes(at);
  const std::size_t eb = k == 0 ? 0 : span(b_rows, b_cols, ldb, sb, batch) * type_bytes(bt);
  const std::size_t ec = span(m, n, ldc, sc, batch) * 4;
  for (const auto& [p, bytes, what] :
       {std::tuple<const void*, std::size_t, const char*>{A, ea, " A"}, {B, eb, " B"}, {C, ec, " C"}}) {
    if (bytes == 0) continue;
    const std::string where = fn + what;
    if (emu::check_device(p, bytes, where.c_str()) != 0) return CUBLAS_STATUS_INVALID_VALUE;
  }
  std::vector<emu::Access> access{{C, ec, true}};
  if (ea > 0) access.push_back({A, ea, false});
  if (eb > 0) access.push_back({B, eb, false});
  auto work = [=] {
    auto* c = static_cast<float*>(C);
    for (int b = 0; b < batch; ++b) {
      const std::size_t oa = static_cast<std::size_t>(sa) * b, ob = static_cast<std::size_t>(sb) * b;
      float* cb = c + static_cast<std::size_t>(sc) * b;
      for (int j = 0; j < n; ++j) {
        for (int i = 0; i < m; ++i) {
          float acc = 0;
          for (int l = 0; l < k; ++l) {
            const std::size_t ia = ta == CUBLAS_OP_N ? i + static_cast<std::size_t>(l) * lda
                                                     : l + static_cast<std::size_t>(i) * lda;
            const std::size_t ib = tb == CUBLAS_OP_N ? l + static_cast<std::size_t>(j) * ldb
                                                     : j + static_cast<std::size_t>(l) * ldb;
            float x = load(A, at, oa + ia), y = load(B, bt, ob + ib);
            if (tf32) x = to_tf32(x), y = to_tf32(y);
            acc += x * y;
          }
          float& out = cb[i + static_cast<std::size_t>(j) * ldc];
          out = alpha * acc + (beta == 0.0f ? 0.0f : beta * out);  // beta 0: C is not read (BLAS's rule)
        }
      }
    }
  };
  if (emu::enqueue(h->stream, work, access, name) != 0) return CUBLAS_STATUS_EXECUTION_FAILED;
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

extern "C" {

cublasStatus_t CUBLASWINAPI cublasCreate_v2(cublasHandle_t* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = new cublasContext();
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasDestroy_v2(cublasHandle_t handle) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

const char* CUBLASWINAPI cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    default:
      return "an emulated cuBLAS status";
  }
}

cublasStatus_t CUBLASWINAPI cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                                         cublasOperation_t transb, int m, int n, int k, const void* alpha,
                                         const void* A, cudaDataType Atype, int lda, const void* B,
                                         cudaDataType Btype, int ldb, const void* beta, void* C,
                                         cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                                         cublasGemmAlgo_t) {
  return gemm(handle, transa, transb, m, n, k, alpha, A, Atype, lda, 0, B, Btype, ldb, 0, beta, C, Ctype, ldc,
              0, 1, computeType, "cublasGemmEx");
}

cublasStatus_t CUBLASWINAPI cublasGemmStridedBatchedEx(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
    const void* alpha, const void* A, cudaDataType Atype, int lda, long long int strideA, const void* B,
    cudaDataType Btype, int ldb, long long int strideB, const void* beta, void* C, cudaDataType Ctype,
    int ldc, long long int strideC, int batchCount, cublasComputeType_t computeType, cublasGemmAlgo_t) {
  return gemm(handle, transa, transb, m, n, k, alpha, A, Atype, lda, strideA, B, Btype, ldb, strideB, beta, C,
              Ctype, ldc, strideC, batchCount, computeType, "cublasGemmStridedBatchedEx");
}

}  // extern "C"
