// q4_K's decode copy (kQ4KCopyBlockBytes a block, vulkan_kernels.h), made on
// the host as the weights upload: the Vulkan decode matmuls read it instead
// of the blocks in place where the executor holds it.
#pragma once

#include <cstdint>
#include <span>

namespace kiln::vulkan {

// Bytes of the decode copy of `blocks` bytes of q4_K blocks (144 each).
int64_t Q4KDecodeCopyBytes(int64_t blocks_bytes);

// Writes the decode copy of the q4_K blocks `blocks` into `copy`
// (Q4KDecodeCopyBytes of it). False where a product d sc or dmin mn of a
// finite header is past f16's range: the copy cannot hold it, and the
// weight stays read in place.
bool MakeQ4KDecodeCopy(std::span<const uint8_t> blocks, std::span<uint8_t> copy);

}  // namespace kiln::vulkan
