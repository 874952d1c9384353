// The one translation unit NVRTC compiles per target: every template, whose
// instantiations codegen asks for by name expression.
#pragma once

#include "attention.cuh"
#include "attention_group.cuh"
#include "attention_prefill.cuh"
#include "matmul.cuh"
#include "matmul_f16_tc.cuh"
#include "matmul_f16_wgmma.cuh"
#include "matmul_q4k_wgmma.cuh"
#include "matmul_stream.cuh"
#include "matmul_tc.cuh"
#include "matmul_tile_int8.cuh"
#include "matmul_tile_tc.cuh"
#include "q4k_scale_table.cuh"
#include "rows.cuh"
