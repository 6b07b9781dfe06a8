// SPDX-License-Identifier: MIT
//
// graph_racecheck_probe: race-free kernels that use shared memory, run in the shapes of the
// engine's Lloyd loop, to tell compute-sanitizer racecheck's behaviour on conditional graph nodes
// apart from the engine's kernels.
//
//   graph_racecheck_probe host|while|nested [ITERATIONS [RUNS [BLOCKS [FLAGS]]]]
//
//   host    the kernels launched from the host, one iteration after another
//   while   one graph: WHILE { a, b, decide }
//   nested  one graph in the engine's shape: WHILE { WHILE { a, decide }, IF { b }, c, decide }
//
// Each kernel writes its block's shared memory, waits at __syncthreads and reads what the other
// threads wrote, so racecheck must find no hazard. The program checks the result of every
// kernel (the sums it writes) and prints "ok" with the iteration count, or names what differs;
// exit status 0, 1 when a result differs, 77 without a device.
//
// RUNS (default 1) repeats the whole run, as a test of the engine makes several runs in one
// process: each run allocates its buffers afresh (the sums a little longer each time, so that
// the allocations move), builds and instantiates its own graph, and frees all of it before the
// next. BLOCKS (default 64, at most 4096) is each kernel's grid. FLAGS, words joined by commas,
// bring in more of what the engine does:
//   pending  the graph's capture begins while clearing the new sums (and a 256 MB buffer before
//            them) is still queued on the capturing stream, the order NVIDIA/warp#1406 reports
//            memcheck to mistake for reads of unallocated memory (not with host); without it the
//            stream is idle when the capture begins;
//   mapped   the deciding kernel publishes the iteration to pinned host memory mapped into the
//            device's address space and reads a cancel flag there (never set), while the host
//            polls the progress until the run ends, as the engine reports progress;
//   local    kernel b keeps 128 doubles per thread in local memory, indexed by the thread (as the
//            engine's generic pass keeps a row of up to 128 fp64 values), their sum checked: a
//            1024-byte stack frame, which no kernel of the probe has without this flag;
//   many     each run also allocates kSmall small buffers (40 to 320 bytes, their sizes changing
//            from run to run, allocated between the others, as the engine's run allocates some 25
//            buffers, its loop state and centres among them, and frees them at its end): kernel a
//            reads them across its blocks and threads, kernel b writes them, kernel c reads them
//            again, the values checked through the sums;
//   streamwait  the host waits for a run on its stream (cudaStreamSynchronize, or with mapped
//            cudaStreamQuery while it polls) and creates no event, as the probe did until it took
//            the engine's wait: an event recorded after the run's work, then
//            cudaEventSynchronize (cudaEventQuery while it polls).
// KMSEG_CUDA_STACK_BYTES sets the device's stack limit per thread, as it does for the engine.
// Run: compute-sanitizer --tool racecheck build/tests/cuda/graph_racecheck_probe while 20
//      compute-sanitizer --tool memcheck build/tests/cuda/graph_racecheck_probe nested 20 8 512

#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#define CHECK(call)                                                                               \
  do {                                                                                            \
    const cudaError_t e_ = (call);                                                                \
    if (e_ != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "%s failed: %s (line %d)\n", #call, cudaGetErrorString(e_), __LINE__); \
      std::exit(1);                                                                               \
    }                                                                                             \
  } while (0)

constexpr int kThreads = 256;
constexpr int kSmall = 16;  // the small buffers of many

struct State {
  int iteration;  // counts the outer iterations
  int inner;      // counts the inner loop's passes in this outer iteration
  int limit;
  cudaGraphConditionalHandle outer, innerHandle, ifHandle;
  long long* sums;  // one value per block of each kernel (gridDim.x): a, b, c
  // mapped: pinned host memory (device pointers), else null; progress[0] is the iteration
  // published, progress[1] the cancel flag
  volatile int* progress;
  // many: kSmall buffers of smallLen[i] ints each, else null
  int* small[kSmall];
  int smallLen[kSmall];
};

struct Flags {
  bool pending = false, mapped = false, local = false, many = false, streamwait = false;
};

// 0 in exact arithmetic, from 128 doubles of local memory per thread indexed by the thread: the
// values i ^ t (i < 128) visited in a permuted order sum to 128 (t & 128) + 8128.
__device__ int localTerm() {
  double row[128];
  const unsigned t = threadIdx.x;
  for (unsigned i = 0; i < 128; ++i) row[i] = double(i ^ t);
  double acc = 0;
  for (unsigned j = 0; j < 128; ++j) acc += row[(j * 7 + t) % 128];
  return int(acc - 128.0 * double(t & 128u) - 8128.0);
}

// The deciding kernels' publishing (mapped): the iteration, then whether the host cancelled.
__device__ bool publishAndCancelled(State* st) {
  if (!st->progress) return false;
  st->progress[0] = st->iteration;
  __threadfence_system();
  return st->progress[1] != 0;
}

// Shared memory written by every thread, read across threads after the barrier: race-free.
__device__ long long blockSum(int seed) {
  __shared__ long long s[kThreads];
  s[threadIdx.x] = seed + threadIdx.x;
  __syncthreads();
  long long v = s[(threadIdx.x + 1) % kThreads];
  __syncthreads();  // before anyone overwrites s
  s[threadIdx.x] = v;
  __syncthreads();
  long long total = 0;
  if (threadIdx.x == 0)
    for (int i = 0; i < kThreads; ++i) total += s[i];
  return total;
}

// many: 0 when the element of a small buffer that this thread reads holds what small[0][0] holds,
// as every element must (0 from the host's clearing, then the iteration of kernel b's last run),
// so that the sums stay as expected; any other value shows as a wrong sum. 0 without the buffers.
__device__ int smallRead(const State* st) {
  if (!st->small[0]) return 0;
  const int i = int(blockIdx.x + threadIdx.x) % kSmall;
  const int v = st->small[i][threadIdx.x % unsigned(st->smallLen[i])];
  // The same in every buffer and element; a thread's read of another value shows as a wrong sum.
  return v - st->small[0][0];
}

__global__ void kernelA(State* st) {
  const long long t = blockSum(st->iteration + int(blockIdx.x) + smallRead(st));
  if (threadIdx.x == 0) st->sums[blockIdx.x] = t;
}

// Dynamic shared memory, as the engine's passes use. kLocal: with localTerm's 1024-byte stack
// frame (ptxas, sm_90); without it no kernel of the probe has a stack frame.
template <bool kLocal>
__global__ void kernelB(State* st) {
  extern __shared__ int dyn[];
  dyn[threadIdx.x] = int(threadIdx.x) * 3 + st->iteration + (kLocal ? localTerm() : 0);
  __syncthreads();
  const int v = dyn[kThreads - 1 - threadIdx.x];
  __syncthreads();
  dyn[threadIdx.x] = v;
  // many: block b fills small buffers b, b + gridDim.x, ... with the iteration (the same value
  // everywhere).
  if (st->small[0])
    for (int i = int(blockIdx.x); i < kSmall; i += int(gridDim.x))
      for (int j = int(threadIdx.x); j < st->smallLen[i]; j += kThreads)
        st->small[i][j] = st->iteration;
  __syncthreads();
  if (threadIdx.x == 0) {
    long long total = 0;
    for (int i = 0; i < kThreads; ++i) total += dyn[i];
    st->sums[gridDim.x + blockIdx.x] = total;
  }
}

__global__ void kernelC(State* st) {
  const long long t = blockSum(2 * st->iteration + int(blockIdx.x) + smallRead(st));
  if (threadIdx.x == 0) st->sums[2 * gridDim.x + blockIdx.x] = t;
}

void launchB(int blocks, std::size_t dyn, cudaStream_t s, State* st, bool local) {
  if (local)
    kernelB<true><<<blocks, kThreads, dyn, s>>>(st);
  else
    kernelB<false><<<blocks, kThreads, dyn, s>>>(st);
}

// Host-loop and while shapes: one decision per iteration.
__global__ void decideKernel(State* st, int shape) {
  st->iteration += 1;
  const bool cancelled = publishAndCancelled(st);
  if (shape == 1)
    cudaGraphSetConditional(st->outer, st->iteration < st->limit && !cancelled ? 1u : 0u);
}

// Nested shape: the inner loop runs twice per outer iteration, then the IF node runs b on
// every odd iteration.
__global__ void decideInnerKernel(State* st) {
  st->inner += 1;
  const bool again = st->inner < 2;
  cudaGraphSetConditional(st->innerHandle, again ? 1u : 0u);
  if (!again) cudaGraphSetConditional(st->ifHandle, st->iteration % 2 == 1 ? 1u : 0u);
}

__global__ void decideOuterKernel(State* st) {
  st->iteration += 1;
  st->inner = 0;
  const bool cancelled = publishAndCancelled(st);
  const bool go = st->iteration < st->limit && !cancelled;
  cudaGraphSetConditional(st->outer, go ? 1u : 0u);
  cudaGraphSetConditional(st->innerHandle, go ? 1u : 0u);  // the inner loop runs again
}

long long expectedA(int iteration, int block) {
  long long total = 0;
  for (int i = 0; i < kThreads; ++i) total += iteration + block + (i + 1) % kThreads;
  return total;
}

long long expectedB(int iteration) {
  long long total = 0;
  for (int i = 0; i < kThreads; ++i) total += (kThreads - 1 - i) * 3 + iteration;
  return total;
}

// Adds a conditional node of `type` on `handle` to `graph`, after `dep` (none when null), and
// returns the graph of its body.
cudaGraph_t addConditional(cudaGraph_t graph, cudaGraphNode_t* node, const cudaGraphNode_t* dep,
                           cudaGraphConditionalHandle handle, cudaGraphConditionalNodeType type) {
  cudaGraphNodeParams p{};
  p.type = cudaGraphNodeTypeConditional;
  p.conditional.handle = handle;
  p.conditional.type = type;
  p.conditional.size = 1;
  CHECK(cudaGraphAddNode(node, graph, dep, nullptr, dep ? 1 : 0, &p));
  return p.conditional.phGraph_out[0];
}

// Waits for the work queued on `s`; with mapped progress, polls it meanwhile as the engine's host
// does (every 100 us, reading what the device published). With `onStream`, asks the stream rather
// than an event recorded on it (`done` is then null).
void waitPolling(cudaStream_t s, cudaEvent_t done, const int* progressHost, bool onStream) {
  if (!onStream) CHECK(cudaEventRecord(done, s));
  if (!progressHost) {
    CHECK(onStream ? cudaStreamSynchronize(s) : cudaEventSynchronize(done));
    return;
  }
  volatile const int* p = progressHost;
  for (;;) {
    const cudaError_t q = onStream ? cudaStreamQuery(s) : cudaEventQuery(done);
    if (q != cudaErrorNotReady) CHECK(q);
    (void)p[0];  // read as the engine reads its progress to report it
    if (q == cudaSuccess) return;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

// One whole run in `shape`, `run` being its index in the process (from 0): fresh buffers (the sums
// 16 * run entries longer than they need be; with many, the small buffers' sizes depend on run),
// the kernels launched from the host or the graph built and launched, the sums checked and
// everything freed. Returns the number of wrong sums, or -1 when the iteration count (or, with
// mapped, the progress published) is wrong.
int runOnce(const std::string& shape, int limit, int blocks, int run, const Flags& flags,
            cudaStream_t s) {
  const int extra = 16 * run;
  State host;
  std::memset(&host, 0, sizeof host);
  host.limit = limit;
  int* progressHost = nullptr;
  if (flags.mapped) {
    CHECK(cudaHostAlloc(reinterpret_cast<void**>(&progressHost), 2 * sizeof(int),
                        cudaHostAllocMapped));
    progressHost[0] = progressHost[1] = 0;
    int* dev = nullptr;
    CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dev), progressHost, 0));
    host.progress = dev;
  }
  cudaEvent_t done = nullptr;  // streamwait: no event at all
  if (!flags.streamwait) CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  State* st = nullptr;
  long long* sums = nullptr;
  CHECK(cudaMalloc(&st, sizeof(State)));
  if (flags.many)
    for (int i = 0; i < kSmall; ++i) {
      host.smallLen[i] = 10 + (5 * i + 3 * run) % 71;  // 40 to 320 bytes
      CHECK(cudaMalloc(&host.small[i], host.smallLen[i] * sizeof(int)));
      CHECK(cudaMemsetAsync(host.small[i], 0, host.smallLen[i] * sizeof(int), s));
    }
  // Only pending begins a capture with work queued.
  if (flags.many && !flags.pending) CHECK(cudaStreamSynchronize(s));
  CHECK(cudaMalloc(&sums, (3 * std::size_t(blocks) + std::size_t(extra)) * sizeof(long long)));
  host.sums = sums;
  const std::size_t dyn = kThreads * sizeof(int);

  if (shape == "host") {
    CHECK(cudaMemcpy(st, &host, sizeof host, cudaMemcpyHostToDevice));
    for (int i = 0; i < limit; ++i) {
      kernelA<<<blocks, kThreads, 0, s>>>(st);
      launchB(blocks, dyn, s, st, flags.local);
      kernelC<<<blocks, kThreads, 0, s>>>(st);
      decideKernel<<<1, 1, 0, s>>>(st, 0);
      CHECK(cudaGetLastError());
    }
    waitPolling(s, done, progressHost, flags.streamwait);
  } else {
    void* busy = nullptr;  // keeps the stream busy while the capture begins
    if (flags.pending) {
      const std::size_t bytes = std::size_t(256) << 20;
      CHECK(cudaMalloc(&busy, bytes));
      CHECK(cudaMemsetAsync(busy, 0, bytes, s));
      CHECK(cudaMemsetAsync(sums, 0, 3 * std::size_t(blocks) * sizeof(long long), s));
    }
    cudaGraph_t g;
    CHECK(cudaGraphCreate(&g, 0));
    CHECK(cudaGraphConditionalHandleCreate(&host.outer, g, 1, cudaGraphCondAssignDefault));
    cudaGraphNode_t whileNode;
    const cudaGraph_t body =
        addConditional(g, &whileNode, nullptr, host.outer, cudaGraphCondTypeWhile);
    cudaGraph_t captured;
    if (shape == "while") {
      CHECK(cudaStreamBeginCaptureToGraph(s, body, nullptr, nullptr, 0,
                                          cudaStreamCaptureModeThreadLocal));
      kernelA<<<blocks, kThreads, 0, s>>>(st);
      launchB(blocks, dyn, s, st, flags.local);
      kernelC<<<blocks, kThreads, 0, s>>>(st);
      decideKernel<<<1, 1, 0, s>>>(st, 1);
      CHECK(cudaStreamEndCapture(s, &captured));
    } else {
      CHECK(cudaGraphConditionalHandleCreate(&host.ifHandle, body, 0, 0));
      CHECK(
          cudaGraphConditionalHandleCreate(&host.innerHandle, body, 1, cudaGraphCondAssignDefault));
      cudaGraphNode_t innerNode;
      const cudaGraph_t inner =
          addConditional(body, &innerNode, nullptr, host.innerHandle, cudaGraphCondTypeWhile);
      CHECK(cudaStreamBeginCaptureToGraph(s, inner, nullptr, nullptr, 0,
                                          cudaStreamCaptureModeThreadLocal));
      kernelA<<<blocks, kThreads, 0, s>>>(st);
      decideInnerKernel<<<1, 1, 0, s>>>(st);
      CHECK(cudaStreamEndCapture(s, &captured));
      cudaGraphNode_t ifNode;
      const cudaGraph_t then =
          addConditional(body, &ifNode, &innerNode, host.ifHandle, cudaGraphCondTypeIf);
      CHECK(cudaStreamBeginCaptureToGraph(s, then, nullptr, nullptr, 0,
                                          cudaStreamCaptureModeThreadLocal));
      launchB(blocks, dyn, s, st, flags.local);
      CHECK(cudaStreamEndCapture(s, &captured));
      CHECK(cudaStreamBeginCaptureToGraph(s, body, &ifNode, nullptr, 1,
                                          cudaStreamCaptureModeThreadLocal));
      kernelC<<<blocks, kThreads, 0, s>>>(st);
      decideOuterKernel<<<1, 1, 0, s>>>(st);
      CHECK(cudaStreamEndCapture(s, &captured));
    }
    CHECK(cudaMemcpy(st, &host, sizeof host, cudaMemcpyHostToDevice));
    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, g, 0));
    CHECK(cudaGraphLaunch(exec, s));
    waitPolling(s, done, progressHost, flags.streamwait);
    if (busy) CHECK(cudaFree(busy));
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(g));
  }

  // The last iteration's sums: a and c ran with iteration = limit - 1; b with the last iteration
  // that ran it (the last in host and while; the last odd one in nested).
  CHECK(cudaMemcpy(&host, st, sizeof host, cudaMemcpyDeviceToHost));
  std::vector<long long> got(3 * std::size_t(blocks));
  CHECK(cudaMemcpy(got.data(), sums, got.size() * sizeof(long long), cudaMemcpyDeviceToHost));
  int wrong = 0;
  const int last = limit - 1;
  const int lastB = shape == "nested" ? (last % 2 == 1 ? last : last - 1) : last;
  for (int b = 0; b < blocks; ++b) {
    if (got[b] != expectedA(last, b)) ++wrong;
    if (lastB >= 0 && got[blocks + b] != expectedB(lastB)) ++wrong;
    if (got[2 * blocks + b] != expectedA(2 * last, b)) ++wrong;
  }
  CHECK(cudaFree(sums));
  for (int* p : host.small)
    if (p) CHECK(cudaFree(p));
  CHECK(cudaFree(st));
  if (done) CHECK(cudaEventDestroy(done));
  const int published = progressHost ? progressHost[0] : limit;
  if (progressHost) CHECK(cudaFreeHost(progressHost));
  if (published != limit) {
    std::printf("%s: progress %d published, %d expected\n", shape.c_str(), published, limit);
    return -1;
  }
  if (host.iteration != limit) {
    std::printf("%s: %d iterations of %d\n", shape.c_str(), host.iteration, limit);
    return -1;
  }
  return wrong;
}

int main(int argc, char** argv) {
  const std::string shape = argc > 1 ? argv[1] : "";
  const int limit = argc > 2 ? std::atoi(argv[2]) : 20;
  const int runs = argc > 3 ? std::atoi(argv[3]) : 1;
  const int blocks = argc > 4 ? std::atoi(argv[4]) : 64;
  Flags flags;
  bool flagsOk = true;
  if (argc > 5) {
    std::istringstream words(argv[5]);
    for (std::string w; std::getline(words, w, ',');) {
      if (w == "pending")
        flags.pending = true;
      else if (w == "mapped")
        flags.mapped = true;
      else if (w == "local")
        flags.local = true;
      else if (w == "many")
        flags.many = true;
      else if (w == "streamwait")
        flags.streamwait = true;
      else
        flagsOk = false;
    }
  }
  if ((shape != "host" && shape != "while" && shape != "nested") || limit < 1 || limit > 100000 ||
      runs < 1 || runs > 1000 || blocks < 1 || blocks > 4096 || !flagsOk ||
      (flags.pending && shape == "host")) {
    std::fprintf(stderr,
                 "usage: graph_racecheck_probe host|while|nested [ITERATIONS 1..100000 "
                 "[RUNS 1..1000 [BLOCKS 1..4096 [FLAGS: pending (not with host), mapped, local, "
                 "many, streamwait, joined by commas]]]]\n");
    return 2;
  }
  // The engine's sanitizer knob, the same here: the device's stack limit per thread in bytes.
  unsigned long long stackBytes = 0;
  if (const char* v = std::getenv("KMSEG_CUDA_STACK_BYTES")) {
    char* end = nullptr;
    stackBytes = std::strtoull(v, &end, 10);
    if (end == v || *end != '\0' || stackBytes == 0 || stackBytes > (1ull << 20)) {
      std::fprintf(stderr,
                   "KMSEG_CUDA_STACK_BYTES='%s' is not a stack size of 1 to 1048576 bytes\n", v);
      return 2;
    }
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no CUDA device answers: skipped\n");
    return 77;  // CTest's SKIP_RETURN_CODE
  }
  if (stackBytes) CHECK(cudaDeviceSetLimit(cudaLimitStackSize, std::size_t(stackBytes)));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (int run = 0; run < runs; ++run) {
    const int wrong = runOnce(shape, limit, blocks, run, flags, s);
    if (wrong > 0)
      std::printf("%s: run %d of %d, %d wrong sums\n", shape.c_str(), run + 1, runs, wrong);
    if (wrong != 0) return 1;
  }
  CHECK(cudaStreamDestroy(s));
  // Printed last: CTest judges the run by this line.
  std::printf("%s: ok, %d iterations\n", shape.c_str(), limit);
  return 0;
}
