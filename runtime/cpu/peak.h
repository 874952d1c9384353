// The arithmetic peak of one CPU core for the instructions the matmuls are
// made of: a loop of independent multiply-add chains in registers, no
// memory, so the figure is the core's issue rate and nothing else. The
// ceiling `kiln bench --probe` prints prefill against (probe.h).
#pragma once

#include <cstdint>

#include "runtime/cpu/q8_dot.h"

namespace kiln::cpu {

// Runs `iterations` rounds of 256-bit FMAs (the f32 kernels' instruction;
// 2 flops a lane) and returns the flops done, or 0 without AVX2/FMA.
double RunF32Peak(int64_t iterations);

// Runs `iterations` rounds of `kernel`'s integer multiply-add sequence
// (vpdpbusd on 512 or 256 bits; AVX2's vpmaddubsw + vpmaddwd + vpaddd) and
// returns the operations done (2 a byte product), or 0 where this CPU lacks
// the kernel.
double RunInt8Peak(Q8Kernel kernel, int64_t iterations);

}  // namespace kiln::cpu
