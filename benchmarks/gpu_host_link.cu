// Host <-> GPU link of one GPU, measured the ways serving engines move KV blocks over it.
//
//   nvcc -O2 -std=c++17 -o /tmp/host_link benchmarks/gpu_host_link.cu && /tmp/host_link > host_link.json
//   python benchmarks/host_link_fit.py host_link.json          # (here) the fitted figures
//
// Prints one JSON object (about 30 s on an H100). What it times, each the median of repeated runs
// timed by CUDA events on the stream (GPU side) and, for the loops, by the host clock too:
//   contiguous  one cudaMemcpyAsync of 4 KiB .. 1 GiB, pinned host memory, each direction;
//   pageable    cudaMemcpy from/to ordinary (malloc) host memory, 64 MiB and 1 GiB;
//   blocks      N scattered device blocks <-> consecutive pinned host blocks, one cudaMemcpyAsync per
//               block in a C++ loop: vLLM's ``swap_blocks`` (``csrc/cache_kernels.cu``), the path of its
//               native CPU offloading; block sizes 4 KiB .. 2 MiB;
//   mapped      the same blocks moved by one kernel through mapped (zero-copy) pinned memory, one CUDA
//               block per KV block, 16-byte stores: LMCache's ``multi_layer_kv_transfer`` style;
//   both        a D2H and an H2D copy of 256 MiB at once on two streams (a store beside a reload).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#define CK(x)                                                                                   \
  do {                                                                                          \
    cudaError_t e_ = (x);                                                                       \
    if (e_ != cudaSuccess) {                                                                    \
      fprintf(stderr, "CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      exit(1);                                                                                  \
    }                                                                                           \
  } while (0)

static const size_t KIB = 1024, MIB = 1024 * 1024, GIB = 1024 * MIB;

static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Timing {
  double gpu_s;   // median GPU-side time between two events on the stream
  double host_s;  // median host time from the first enqueue to the end of the work
};

// Runs `enqueue` (work on stream s) `reps` times after two warm-ups; medians of both clocks.
static Timing time_on(cudaStream_t s, int reps, const std::function<void()>& enqueue) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (int i = 0; i < 2; i++) enqueue();
  CK(cudaStreamSynchronize(s));
  std::vector<double> g, h;
  for (int i = 0; i < reps; i++) {
    auto t0 = std::chrono::steady_clock::now();
    CK(cudaEventRecord(a, s));
    enqueue();
    CK(cudaEventRecord(b, s));
    CK(cudaEventSynchronize(b));
    auto t1 = std::chrono::steady_clock::now();
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    g.push_back(ms * 1e-3);
    h.push_back(std::chrono::duration<double>(t1 - t0).count());
  }
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  return {median(g), median(h)};
}

// One CUDA block per KV block: copy `bytes` (a multiple of 16) from src + idx_src[i] * bytes to
// dst + idx_dst[i] * bytes. Either side may be mapped host memory (zero-copy over the link).
__global__ void gather_blocks(const int4* __restrict__ src, int4* __restrict__ dst, const int* idx_src,
                              const int* idx_dst, size_t words_per_block) {
  const int4* s = src + (size_t)idx_src[blockIdx.x] * words_per_block;
  int4* d = dst + (size_t)idx_dst[blockIdx.x] * words_per_block;
  for (size_t w = threadIdx.x; w < words_per_block; w += blockDim.x) d[w] = s[w];
}

static void row(std::string& out, const char* kind, const char* dir, size_t bytes, size_t count, Timing t) {
  char buf[512];
  double total = (double)bytes * (double)count;
  snprintf(buf, sizeof buf,
           "%s{\"kind\": \"%s\", \"dir\": \"%s\", \"bytes_each\": %zu, \"count\": %zu, \"gpu_s\": %.9g, "
           "\"host_s\": %.9g, \"gb_s\": %.6g}",
           out.empty() ? "" : ",\n  ", kind, dir, bytes, count, t.gpu_s, t.host_s, total / t.gpu_s / 1e9);
  out += buf;
}

int main() {
  cudaDeviceProp p;
  CK(cudaGetDeviceProperties(&p, 0));
  int driver = 0, runtime = 0;
  CK(cudaDriverGetVersion(&driver));
  CK(cudaRuntimeGetVersion(&runtime));
  cudaStream_t s, s2;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));

  const size_t POOL = 1 * GIB;
  char *dev, *dev2, *host, *host2;
  CK(cudaMalloc(&dev, POOL));
  CK(cudaMalloc(&dev2, POOL));
  CK(cudaHostAlloc((void**)&host, POOL, cudaHostAllocMapped));
  CK(cudaHostAlloc((void**)&host2, POOL, cudaHostAllocMapped));
  CK(cudaMemset(dev, 1, POOL));
  CK(cudaMemset(dev2, 2, POOL));
  memset(host, 3, POOL);
  memset(host2, 4, POOL);
  std::string rows;

  // contiguous, pinned
  for (size_t bytes = 4 * KIB; bytes <= POOL; bytes *= 4) {
    int reps = (int)std::max<size_t>(7, std::min<size_t>(40, (4 * GIB) / bytes));
    row(rows, "contiguous", "d2h", bytes, 1,
        time_on(s, reps, [&] { CK(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, s)); }));
    row(rows, "contiguous", "h2d", bytes, 1,
        time_on(s, reps, [&] { CK(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, s)); }));
  }

  // pageable host memory (synchronous cudaMemcpy, as an unpinned tensor copy does)
  {
    char* pageable = (char*)malloc(POOL);
    memset(pageable, 5, POOL);
    for (size_t bytes : {64 * MIB, POOL}) {
      row(rows, "pageable", "d2h", bytes, 1,
          time_on(s, 5, [&] { CK(cudaMemcpy(pageable, dev, bytes, cudaMemcpyDeviceToHost)); }));
      row(rows, "pageable", "h2d", bytes, 1,
          time_on(s, 5, [&] { CK(cudaMemcpy(dev, pageable, bytes, cudaMemcpyHostToDevice)); }));
    }
    free(pageable);
  }

  // scattered blocks: one cudaMemcpyAsync per block (swap_blocks) and one mapped-memory kernel
  std::mt19937 rng(12345);
  int *d_src_idx, *d_dst_idx;
  CK(cudaMalloc(&d_src_idx, 65536 * sizeof(int)));
  CK(cudaMalloc(&d_dst_idx, 65536 * sizeof(int)));
  char* host_dev_ptr = nullptr;
  CK(cudaHostGetDevicePointer((void**)&host_dev_ptr, host, 0));
  for (size_t bytes = 4 * KIB; bytes <= 2 * MIB; bytes *= 2) {
    size_t pool_blocks = POOL / bytes;
    size_t n = std::min<size_t>({4096, (256 * MIB) / bytes, pool_blocks});
    if (n < 64) n = std::min<size_t>(64, pool_blocks);
    std::vector<int> perm(pool_blocks);
    for (size_t i = 0; i < pool_blocks; i++) perm[i] = (int)i;
    std::shuffle(perm.begin(), perm.end(), rng);
    std::vector<int> src_idx(perm.begin(), perm.begin() + n), seq(n);
    for (size_t i = 0; i < n; i++) seq[i] = (int)i;
    int reps = 9;
    row(rows, "blocks", "d2h", bytes, n, time_on(s, reps, [&] {
          for (size_t i = 0; i < n; i++)
            CK(cudaMemcpyAsync(host + i * bytes, dev + (size_t)src_idx[i] * bytes, bytes, cudaMemcpyDeviceToHost, s));
        }));
    row(rows, "blocks", "h2d", bytes, n, time_on(s, reps, [&] {
          for (size_t i = 0; i < n; i++)
            CK(cudaMemcpyAsync(dev + (size_t)src_idx[i] * bytes, host + i * bytes, bytes, cudaMemcpyHostToDevice, s));
        }));
    if (n <= 65535) {
      CK(cudaMemcpy(d_src_idx, src_idx.data(), n * sizeof(int), cudaMemcpyHostToDevice));
      CK(cudaMemcpy(d_dst_idx, seq.data(), n * sizeof(int), cudaMemcpyHostToDevice));
      size_t words = bytes / 16;
      row(rows, "mapped", "d2h", bytes, n, time_on(s, reps, [&] {
            gather_blocks<<<(unsigned)n, 256, 0, s>>>((const int4*)dev, (int4*)host_dev_ptr, d_src_idx, d_dst_idx, words);
            CK(cudaGetLastError());
          }));
      row(rows, "mapped", "h2d", bytes, n, time_on(s, reps, [&] {
            gather_blocks<<<(unsigned)n, 256, 0, s>>>((const int4*)host_dev_ptr, (int4*)dev, d_dst_idx, d_src_idx, words);
            CK(cudaGetLastError());
          }));
    }
  }

  // both directions at once: a 256 MiB store beside a 256 MiB reload
  {
    size_t bytes = 256 * MIB;
    std::vector<double> h;
    for (int i = 0; i < 9; i++) {
      CK(cudaDeviceSynchronize());
      auto t0 = std::chrono::steady_clock::now();
      CK(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, s));
      CK(cudaMemcpyAsync(dev2, host2, bytes, cudaMemcpyHostToDevice, s2));
      CK(cudaDeviceSynchronize());
      auto t1 = std::chrono::steady_clock::now();
      if (i >= 2) h.push_back(std::chrono::duration<double>(t1 - t0).count());
    }
    double m = median(h);
    row(rows, "both", "d2h+h2d", bytes, 2, Timing{m, m});
  }

  printf("{\"device\": \"%s\", \"sm_count\": %d, \"pci_bus_id\": %d, \"driver\": %d, \"runtime\": %d,\n",
         p.name, p.multiProcessorCount, p.pciBusID, driver, runtime);
  printf(" \"rows\": [\n  %s\n ]}\n", rows.c_str());
  return 0;
}
