// A CUDA graph captured from what a callable enqueues on a stream, instantiated, and destroyed
// with the object: the capture boilerplate of the graph-replay tests.
//
//   msa::test::CapturedGraph g(stream, [&](cudaStream_t s) { op.run(args, s); });
//   CUDA_OK(g.launch(stream));
#pragma once

#if MSA_WITH_CUDA
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "tests/support/cuda_check.h"

namespace msa::test {

class CapturedGraph {
 public:
  // A capture or instantiation error is a (non-fatal) test failure and leaves ok() false;
  // launch() then fails too.
  template <class Enqueue>
  CapturedGraph(cudaStream_t stream, Enqueue&& enqueue, cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal) {
    CUDA_EXPECT_OK(cudaStreamBeginCapture(stream, mode));
    enqueue(stream);
    CUDA_EXPECT_OK(cudaStreamEndCapture(stream, &graph_));
    if (graph_ != nullptr) {  // braces: the macro expands to an if / else
      CUDA_EXPECT_OK(cudaGraphInstantiate(&exec_, graph_, 0));
    }
  }
  ~CapturedGraph() {
    if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
    if (graph_ != nullptr) cudaGraphDestroy(graph_);
  }
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;

  bool ok() const { return exec_ != nullptr; }
  cudaError_t launch(cudaStream_t stream) const {
    return exec_ != nullptr ? cudaGraphLaunch(exec_, stream) : cudaErrorInvalidValue;
  }

 private:
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace msa::test
#endif
