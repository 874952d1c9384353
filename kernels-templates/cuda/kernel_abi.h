// The parameter structs of every CUDA kernel, shared by the NVRTC-compiled
// templates and the runtime that fills them (runtime/cuda). Plain structs of
// builtin types only, passed by value, so both sides agree on the layout
// without any CUDA or standard headers.
#pragma once

// Geometry helpers both the kernels and the runtime evaluate.
#ifdef __CUDACC__
#define KILN_ABI_FN __host__ __device__ constexpr
#else
#define KILN_ABI_FN constexpr
#endif

namespace kiln::cuda_abi {

// Dynamic step counts, written to the device with the step's inputs: the
// graph of a bucket serves every T up to the bucket because kernels read
// these instead of baking them in.
struct StepCounts {
  int tokens;      // T
  int seqs;        // S
  int logit_rows;  // R
  int reserved;
};

// Epilogues of the weight-times-activation kernels.
enum Epilogue : int { kEpilogueNone = 0, kEpilogueSiluMul = 1, kEpilogueResidualAdd = 2 };
// Weights a launch's output reads per row: gate and up for silu_mul, else one.
KILN_ABI_FN int EpilogueParts(int epilogue) { return epilogue == kEpilogueSiluMul ? 2 : 1; }

// Up to this many weights share one matmul launch (q, k, v).
constexpr int kMaxFusedWeights = 3;

// Geometry of matmul_kernel: kMatmulWarps warps per block, each walking a
// few weight rows (decode: the storage's lane kRows, MatmulRowsPerWarp on
// the host; tiles of kTile tokens: kMatmulTiledRowsPerWarp). The block stages its tokens'
// normalised activations in shared memory, a chunk of K at a time: padded
// rows (4 floats after every 32) followed by one sum per 16 elements.
// Chunks are the whole of K where that fits the budget, else a multiple of
// 2048 elements (whole blocks and lane steps of every storage).
constexpr int kMatmulWarps = 8, kMatmulTiledRowsPerWarp = 2;
// Steps of up to kMatmulPairTile tokens (two sequences decoding) run like
// one-token decode: one wave of blocks taking row groups in rounds, K split
// where the blocks are few, the storage's lane rows per warp.
constexpr int kMatmulPairTile = 2;
constexpr int kMatmulSmemBudgetFloats = 20480;
// Decode launches whose row blocks would not fill the SMs once (o_proj and
// down of an 8B model: 128 blocks) split K over two warps per set of rows,
// so twice the blocks and warps stream the weights.
KILN_ABI_FN int MatmulKSplit(int row_blocks, int multiprocessors) { return row_blocks <= multiprocessors ? 2 : 1; }
KILN_ABI_FN int MatmulPaddedLen(int len) { return (len + 3) / 4 * 4 + 4 * ((len + 31) / 32); }
KILN_ABI_FN int MatmulSumsLen(int len) { return len / 16 + 4; }
KILN_ABI_FN int MatmulSmemFloats(int chunk, int tile) { return tile * (MatmulPaddedLen(chunk) + MatmulSumsLen(chunk)); }
KILN_ABI_FN int MatmulChunk(int k, int tile) {
  return MatmulSmemFloats(k, tile) <= kMatmulSmemBudgetFloats
             ? k
             : (kMatmulSmemBudgetFloats / tile / 2560 > 0 ? kMatmulSmemBudgetFloats / tile / 2560 : 1) * 2048;
}

// matmul_stream_kernel (q8_0 one-token decode on sm_90): a ring of
// kStreamStages stages per block, each kStreamSlices row slices of
// kStreamChunk elements of K (64 q8_0 blocks, 2176 bytes), then the
// activations as int8 codes, scales and residuals (9/16 of K floats with
// their sums); two blocks per SM. Blocks: kMatmulWarps consumer warps and
// one producer warp that issues the copies.
constexpr int kStreamChunk = 2048, kStreamSlices = 16, kStreamStages = 2, kStreamBlocksPerSm = 2;
constexpr int kStreamThreads = 32 * (kMatmulWarps + 1);
KILN_ABI_FN int StreamSliceBytes(int block_elems, int block_bytes) { return kStreamChunk / block_elems * block_bytes; }
KILN_ABI_FN int StreamSmemBytes(int k, int slice_bytes) {
  return kStreamStages * kStreamSlices * slice_bytes + k / 16 * 9 * 4;
}

// matmul_tile_tc_kernel (buckets of 2-63 tokens): a block computes 32
// weight rows x 8 tokens with 8 warps splitting K, each warp both 16-row
// MMA tiles (so a warp's activation fragments serve 32 rows: with 16 the
// activations' bytes, 8 tokens x f16 hi + lo, were 3.5x the weights' bytes
// read per step).
constexpr int kTileTcRowsPerBlock = 32, kTileTcTokensPerBlock = 8;

// matmul_tile_int8_kernel (q4_K buckets of 2-63 tokens): a block computes
// 8 tokens x kTileInt8Rows outputs (silu_mul: each a gate and an up row)
// with kTileInt8Warps warps splitting K by 256-element units, two blocks
// per SM (one block of 16 warps per SM was slower: a block's phases, loads,
// MMAs and the reduction, then ran without another's to overlap them). 16
// outputs, not 32: o and down (4096 outputs) fill the GPU with 256 blocks.
constexpr int kTileInt8Warps = 8, kTileInt8Tokens = 8, kTileInt8Rows = 16;
// Its 16-row tiles a block (MatmulParams::tile_row_tiles): the most of 1, 2
// and 4 that still leave 7/4 blocks per SM. Fewer, larger blocks pay the
// block's start and its reduction of the warps' sums fewer times, but each
// warp then walks more of K one unit at a time. H200, steps of 8 / 16 / 32
// sequences (the 8B, ms): every launch at 1 tile 3.47 / 4.41 / 7.19, at 2
// 3.40 / 4.23 / 6.59, at 4 for launches of more than 4096 rows and 1 for
// the others 3.29 / 4.09 / 6.84, and 4 and 2: 3.38 / 4.18 / 6.43.
KILN_ABI_FN int TileInt8RowTiles(int total_n, int token_blocks, int multiprocessors) {
  int tiles = 4;
  while (tiles > 1 && 4 * ((total_n + kTileInt8Rows * tiles - 1) / (kTileInt8Rows * tiles)) * token_blocks <
                          7 * multiprocessors) {
    tiles /= 2;
  }
  return tiles;
}
// activations_int8_kernel: a block of kActivationsInt8Threads per row,
// kActivationsInt8Batch runs of 4 elements per thread in flight.
constexpr int kActivationsInt8Threads = 1024, kActivationsInt8Batch = 4;

// The tensor-core matmul reads its activations as f16, written (normalised
// when the launch has a norm prologue) by activations_f16_kernel once per
// launch instead of once per output tile.
// activations_f16_kernel: elements per block (a multiple of 32) where the
// grid is (rows, ceil(k / kActivationsChunk)); any grid.y works (the blocks
// of a row split it evenly).
constexpr int kActivationsChunk = 1024;
KILN_ABI_FN int ActivationsChunks(int k) { return (k + kActivationsChunk - 1) / kActivationsChunk; }

struct ActivationsF16Params {
  const float* x;
  const float* gamma;  // or null
  float eps;
  int k;
  const int* rows;
  unsigned short* y;     // [rows, k] f16 (split: the hi halves)
  unsigned short* y_lo;  // split: [rows, k] f16, x - hi
  float* sums;           // split: [rows, k / 32] sums of x
};

// activations_int8_kernel: x (normalised) as int8 codes with a scale per
// 256 elements and, per 32, f16 sums of what the codes miss and of x; grid (rows).
struct ActivationsInt8Params {
  const float* x;
  const float* gamma;  // or null
  float eps;
  int k;
  const int* rows;
  signed char* codes;    // [rows, k]
  unsigned short* sums;  // [rows, k / 256, 16] f16: R of the unit's 8 groups of 32, then S, over dx
  float* scales;         // [rows, k / 256]
};

// y[t, n] = epilogue(sum_k norm(x)[t, k] * W[n, k]) for t < *rows.
struct MatmulParams {
  const float* x;         // [rows, k]
  const float* gamma;     // [k] RMS-norm gain, or null
  float eps;
  int k;
  const int* rows;        // device count of activation rows
  int max_rows;           // the bucket's rows (grid extent)
  int num_weights;        // epilogue none: outputs; silu_mul: 2 (gate, up); residual_add: 1
  int total_n;            // rows of all weights together (epilogue none) or of one weight
  const unsigned char* w[kMaxFusedWeights];
  float* y[kMaxFusedWeights];
  int n[kMaxFusedWeights];
  long long row_bytes;    // bytes of one weight row
  const float* residual;  // [rows, n] for residual_add
  const unsigned short* x_f16;  // tensor-core kernel: x (normalised) as f16, [rows, k]
  int chunk;              // matmul_kernel: MatmulChunk(k, tile) elements of K staged at a time
  const unsigned short* x_lo;  // matmul_tile_tc_kernel: x - x_f16 as f16, [rows, k]
  const float* x_sums;         // matmul_tile_tc_kernel: sums of x per 32 elements, [rows, k / 32]
  int ksplit;                  // matmul_kernel decode: warps sharing a set of rows (MatmulKSplit)
  const signed char* x_i8;     // matmul_tile_int8_kernel: activations_int8_kernel's codes,
  const unsigned short* x_i8_sums;  // its sums,
  const float* x_i8_scales;         // and its scales
  int tile_row_tiles;               // matmul_tile_int8_kernel: 16-row tiles a block (1, 2, 4 or 8)
  // matmul_f16_wgmma_kernel over k_splits > 1 slices of K (grid z): each
  // slice's raw tile sums go to k_partials [k_splits, max_rows,
  // WgmmaPartialStride] and matmul_split_sum_kernel adds them in slice order
  // and applies the epilogue.
  float* k_partials;
  int k_splits;
  // matmul_kernel over q4_K: each weight's decode copy (Q4KTableRowBytes per
  // row), or null for all (it then decodes the blocks' headers).
  const unsigned char* tables[kMaxFusedWeights];
  // One-token decode over an int8 lane (matmul_kernel), where a silu_mul
  // launch's output is the next launch's activations: each of that next
  // launch's blocks would quantise the same vector (hundreds of blocks
  // reading it from L2 at once), so the silu_mul launch stages it once. The
  // last block to write a run of 256 outputs (counted in `stage_counts`,
  // zero between steps) writes their int8 staging to `stage_image`, laid
  // out as a consuming block's shared memory; the next launch, given it as
  // `prestaged`, copies it instead of staging. Null: none.
  float* stage_image;
  unsigned* stage_counts;
  const float* prestaged;
  // Decode (matmul_kernel): lane steps of each warp's first rows asked of L2
  // before the kernel waits for the launch before it (WaitForPrevious), so
  // their DRAM reads overlap that launch's last blocks.
  int prefetch_steps;
};

// The decode copy of a q4_K weight for matmul_kernel (LaneQ4_KTable): per
// 256-element block its 128 code bytes as stored, then, for c = 0..3, f16 d
// sc and dmin mn of sub-blocks 2c and 2c + 1 in the order A(2c), A(2c + 1),
// M(2c), M(2c + 1): 160 bytes, five whole 32-byte sectors, where reading the
// codes in place also moved the 16-byte header sharing their first sector.
constexpr int kQ4KTableBlockBytes = 160;
constexpr int kQ4KTableCodeBytes = 128;
KILN_ABI_FN long long Q4KTableRowBytes(long long k) { return k / 256 * kQ4KTableBlockBytes; }
// q4k_scale_table_kernel: the decode copy of `blocks` q4_K blocks at w, one
// thread per block; *overflow gets 1 where a product leaves f16's range.
struct Q4KTableParams {
  const unsigned char* w;
  unsigned char* table;
  long long blocks;
  unsigned* overflow;
};

// matmul_f16_tc_kernel (buckets of kTensorCoreMinBucket tokens and more,
// k a multiple of kGemmK): kGemmM tokens x kGemmN weight rows per block, K
// steps of kGemmK in a ring of kGemmStages in dynamic shared memory (rows
// padded to kGemmStride halves, so ldmatrix's 8 rows hit distinct banks).
constexpr int kGemmM = 128, kGemmN = 128, kGemmK = 32, kGemmStages = 4, kGemmStride = kGemmK + 8;
KILN_ABI_FN int GemmSmemBytes() { return kGemmStages * (kGemmM + kGemmN) * kGemmStride * 2; }
// Outputs of a tile's kGemmN weight rows: silu_mul's hold a gate and an up
// row per output.
KILN_ABI_FN int GemmTileOutputs(int epilogue) { return epilogue == kEpilogueSiluMul ? kGemmN / 2 : kGemmN; }
// matmul_f16_wgmma_kernel (sm_90a): the same tiles, kWgmmaK of K per stage
// in kWgmmaStages stages, plus 1 KB to align them (128-byte swizzle atoms).
constexpr int kWgmmaK = 64, kWgmmaStages = 3;
KILN_ABI_FN int WgmmaSmemBytes() { return kWgmmaStages * (kGemmM + kGemmN) * kWgmmaK * 2 + 1024; }
// matmul_q4k_wgmma_kernel (sm_90a): kQ4KWgmmaTokens tokens x two 128-row
// tiles a block, over q4_K rows as stored; shared memory: the decoded f16
// tiles, and per stage the activations and each thread's raw header and
// codes (kQ4KWgmmaRawBytes), plus 1 KB to align them.
constexpr int kQ4KWgmmaTokens = 64, kQ4KWgmmaRawBytes = 48;
KILN_ABI_FN int Q4KWgmmaSmemBytes() {
  return 2 * kGemmN * kWgmmaK * 2 + kWgmmaStages * (kQ4KWgmmaTokens * kWgmmaK * 2 + 2 * kGemmN * kQ4KWgmmaRawBytes) +
         1024;
}
// A block walks its K steps one after another, ~0.8 us each: where the
// tiles would leave at least half the SMs idle (small prefill steps: an 8B
// model's o_proj and down have 32 tiles at 64-128 tokens), K is cut into
// slices of at least kWgmmaMinSliceSteps steps, enough for two blocks per
// SM (at most kWgmmaMaxKSplits). Not where the tiles fill half the SMs: the
// slices' partial sums cost a write and a read of tokens x outputs floats
// each, which at 512 tokens (o_proj and down: 128 tiles) outweighed the
// gain (H200: 21.4 -> 23.2 ms per 512-token step with them). Returns the
// slices, none empty.
constexpr int kWgmmaMaxKSplits = 8, kWgmmaMinSliceSteps = 8;
KILN_ABI_FN int WgmmaKSplits(int tiles, int k, int multiprocessors) {
  if (2 * tiles > multiprocessors) return 1;
  const int steps = (k + kWgmmaK - 1) / kWgmmaK;
  int splits = (2 * multiprocessors + tiles - 1) / tiles;
  splits = splits < steps / kWgmmaMinSliceSteps ? splits : steps / kWgmmaMinSliceSteps;
  splits = splits < kWgmmaMaxKSplits ? splits : kWgmmaMaxKSplits;
  if (splits <= 1) return 1;
  const int per = (steps + splits - 1) / splits;
  return (steps + per - 1) / per;
}
// Floats per token row of k_partials: every tile's 128 rows (silu_mul: 64
// gate then 64 up rows per tile).
KILN_ABI_FN int WgmmaPartialStride(int total_n, int epilogue) {
  return (total_n + GemmTileOutputs(epilogue) - 1) / GemmTileOutputs(epilogue) * kGemmN;
}

// dequantize_f16_kernel: the rows of num_weights weights of one storage, one
// after another, decoded to f16 [sum n, k]; grid (sum n, ceil(k / 2048)),
// 256 threads of 8 elements.
struct DequantizeParams {
  const unsigned char* w[kMaxFusedWeights];
  int n[kMaxFusedWeights];
  int num_weights;
  long long row_bytes;
  int k;
  unsigned short* y;
};

// One-operand and two-operand element-wise ops over rows of `width`.
enum ElementwiseOp : int { kSilu = 0, kMul = 1, kAdd = 2, kBiasAdd = 3, kSiluMul = 4 };
struct ElementwiseParams {
  const float* a;
  const float* b;  // second operand; the bias vector for kBiasAdd
  float* y;
  int width;
  const int* rows;
  int max_rows;
  int op;
};

struct RmsNormParams {
  const float* x;
  const float* gamma;
  float* y;
  float eps;
  int width;
  const int* rows;
  int max_rows;
};

// Embedding rows of `table` for tokens[t], decoded to f32.
struct EmbeddingParams {
  const unsigned char* table;
  long long row_bytes;
  int width;
  int vocab;
  const int* tokens;
  float* y;
  const int* rows;
  int max_rows;
};

struct GatherRowsParams {
  const float* x;
  const int* indices;  // [*count]
  float* y;
  int width;
  const int* count;    // R
  int max_rows;
};

// argmax_kernel: threads a block (one block per row).
constexpr int kArgmaxThreads = 1024;

struct ArgmaxParams {
  const float* x;
  int* y;
  int width;
  const int* rows;
  int max_rows;
};

// Rotary embedding constants (the plan's rope_* constants).
struct RopeConstants {
  int dims;
  int half_style;  // 0: pairs (2i, 2i+1); 1: pairs (i, i + dims / 2)
  // [position][dims / 2][cos, sin] for every position the pool holds,
  // computed by the runtime in double exactly as the CPU backend does.
  const float* table;
};

struct RopeParams {
  const float* x;
  float* y;
  const int* positions;
  int num_heads;
  int head_dim;
  const int* rows;
  int max_rows;
  RopeConstants rope;
};

// The f32 KV page pool: [layer][K, V][page][slot][kv_head][head_dim].
struct PagePoolView {
  void* data;  // f32 or f16 elements, as the kernel's KvF32 / KvF16 says
  long long num_pages;
  int page_size;
  int kv_heads;
  int head_dim;
};

// The most context slices of a decode attention (AttentionParams::splits).
constexpr int kDecodeSplits = 16;
// Context slices per (token, query head) in a bucket of `tokens` over
// `heads` query heads: about four blocks an SM, 1 to kDecodeSplits. More
// blocks than that cost more in their starts and merges than the shorter
// walks save. H100, the 8B's 32 heads (ms a step at 512 positions of
// context): 2 tokens 3.11-3.14 at 16 slices, 2.99-3.04 at 8; 4 tokens
// 3.44-3.54 at 16, 3.28-3.29 at 4; 8 tokens 4.22-4.26 at 16, 3.96-3.98 at
// 4 (at 2048 positions 6.67 at 16, 6.09-6.10 at 4, 6.00-6.01 at 2); 16
// tokens 5.51 at 1, 5.64-5.65 at 2, 5.77-5.81 at 4.
KILN_ABI_FN int AttentionSplits(int tokens, int heads, int multiprocessors) {
  const int splits = 4 * multiprocessors / (tokens * heads > 0 ? tokens * heads : 1);
  return splits < 1 ? 1 : splits > kDecodeSplits ? kDecodeSplits : splits;
}

struct AttentionParams {
  const float* q;  // [T, num_heads * head_dim]
  const float* k;  // [T, kv_heads * head_dim]
  const float* v;
  float* y;        // [T, num_heads * head_dim]
  PagePoolView pool;
  int layer;
  int num_heads;
  float scale;
  int use_rope;
  RopeConstants rope;
  const StepCounts* counts;
  const int* positions;
  const int* query_starts;   // [S + 1]
  const int* context_lens;   // [S]
  const int* block_tables;   // [S, pages_stride]
  int pages_stride;
  int max_rows;
  // Split-K over the context (flash-decoding): with splits > 1 each block
  // handles one slice and writes (max, sum, output) to `partials`
  // [max_rows, num_heads, splits, head_dim + 2]; the last slice of a
  // (token, head) to finish, counted in `split_done` [max_rows, num_heads]
  // (zero between steps: the merging block resets its count), merges them.
  int splits;
  float* partials;
  unsigned* split_done;
  // 1 where attention_prefill_kernel ran first: tiles of kPrefillTileTokens
  // tokens of one sequence are done, and attention_kernel skips their tokens.
  int prefill_tiles;
  // 1 in steps without prefill tiles: attention_kernel reads the step's own
  // K/V rows from k/v and appends them (no kv_append launch).
  int append;
  // One-token steps whose next launch is a matmul_kernel decode over an int8
  // lane (o): each head's merging block writes the head's outputs staged as
  // that launch would stage them (MatmulParams::stage_image's layout; a
  // head of kAttentionStagedHeadDim dims is whole 32-element groups), so its
  // blocks copy them instead. Null: none.
  float* stage_image;
};

// The head size whose outputs attention_kernel stages (one per thread).
constexpr int kAttentionStagedHeadDim = 128;

// attention_prefill_kernel: tokens per tile (4 warps of 16).
constexpr int kPrefillTileTokens = 64;

}  // namespace kiln::cuda_abi
