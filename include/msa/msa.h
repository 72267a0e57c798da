// Umbrella header of the msa library: MiniMax Sparse Attention on NVIDIA Hopper, with a CPU
// reference of every operator.
#pragma once

#include "msa/combine.h"
#include "msa/decode.h"
#include "msa/error.h"
#include "msa/indexer.h"
#include "msa/options.h"
#include "msa/plan.h"
#include "msa/prefill.h"
#include "msa/shapes.h"
#include "msa/tensor.h"
#include "msa/topk.h"
#include "msa/version.h"
