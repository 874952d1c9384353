// Element decoder of one weight slot, instantiated once per slot that a
// kernel reads. Codegen defines before including it:
//   WBUF (w0..w2), WBYTE / WWORD / WF16 / WSCALEMINK / WREAD / WREAD4 (this slot's
//   function names),
//   WSTORAGE (an ST_* of common.glsl), WROW_BYTES (bytes of one row, a uint
//   literal), WGROUP (elements per group for int4 / int2).
// WREAD(row, e) is element e of row `row`, decoded exactly as the reference
// decoders of runtime/formats/quant.cc do (those define the block layouts);
// WREAD4(row, e) elements e..e+3 (e a multiple of 4: never across a block),
// reading each block's scales once and its codes a word at a time where the
// layout allows.
// Weights are read as 32-bit words so no 8/16-bit storage feature is needed.

uint WBYTE(uint off) { return (WBUF[off >> 2] >> ((off & 3u) << 3)) & 0xFFu; }
// Four bytes from any byte offset (two aligned loads at most).
uint WWORD(uint off) {
  const uint shift = (off & 3u) << 3, w = WBUF[off >> 2];
  return shift == 0u ? w : (w >> shift) | (WBUF[(off >> 2) + 1u] << (32u - shift));
}
float WF16(uint off) { return unpackHalf2x16(WBYTE(off) | (WBYTE(off + 1u) << 8)).x; }
// The 6-bit scale and min of sub-block s (0..7) of a q4_K / q5_K block whose
// 12 packed scale bytes start at byte t.
uvec2 WSCALEMINK(uint t, uint s) {
  if (s < 4u) return uvec2(WBYTE(t + s) & 63u, WBYTE(t + s + 4u) & 63u);
  return uvec2((WBYTE(t + s + 4u) & 15u) | ((WBYTE(t + s - 4u) >> 6) << 4),
               (WBYTE(t + s + 4u) >> 4) | ((WBYTE(t + s) >> 6) << 4));
}


float WREAD(uint row, uint e) {
  const uint base = row * WROW_BYTES;
#if WSTORAGE == ST_F32
  return uintBitsToFloat(WBUF[(base >> 2) + e]);
#elif WSTORAGE == ST_F16
  return WF16(base + 2u * e);
#elif WSTORAGE == ST_BF16
  const uint o = base + 2u * e;
  return uintBitsToFloat((WBYTE(o) | (WBYTE(o + 1u) << 8)) << 16);
#elif WSTORAGE == ST_Q8_0
  const uint b = base + (e / 32u) * 34u;
  const int q = int(WBYTE(b + 2u + e % 32u) ^ 0x80u) - 128;  // int8
  return WF16(b) * float(q);
#elif WSTORAGE == ST_Q4_0
  const uint b = base + (e / 32u) * 18u, j = e % 32u;
  const uint q = (WBYTE(b + 2u + j % 16u) >> (j < 16u ? 0u : 4u)) & 15u;
  return WF16(b) * float(int(q) - 8);
#elif WSTORAGE == ST_Q4_1
  const uint b = base + (e / 32u) * 20u, j = e % 32u;
  const uint q = (WBYTE(b + 4u + j % 16u) >> (j < 16u ? 0u : 4u)) & 15u;
  return WF16(b) * float(q) + WF16(b + 2u);
#elif WSTORAGE == ST_Q5_0 || WSTORAGE == ST_Q5_1
#if WSTORAGE == ST_Q5_0
  const uint b = base + (e / 32u) * 22u, qh_at = b + 2u, qs_at = b + 6u;
#else
  const uint b = base + (e / 32u) * 24u, qh_at = b + 4u, qs_at = b + 8u;
#endif
  const uint j = e % 32u;
  const uint low = (WBYTE(qs_at + j % 16u) >> (j < 16u ? 0u : 4u)) & 15u;
  const uint high = (WBYTE(qh_at + j / 8u) >> (j % 8u)) & 1u;
  const uint q = low | (high << 4);
#if WSTORAGE == ST_Q5_0
  return WF16(b) * float(int(q) - 16);
#else
  return WF16(b) * float(q) + WF16(b + 2u);
#endif
#elif WSTORAGE == ST_Q2_K
  const uint b = base + (e / 256u) * 84u, x = e % 256u;
  const uint sc = WBYTE(b + x / 16u);
  const uint q = (WBYTE(b + 16u + (x / 128u) * 32u + x % 32u) >> (2u * ((x % 128u) / 32u))) & 3u;
  return WF16(b + 80u) * float(sc & 15u) * float(q) - WF16(b + 82u) * float(sc >> 4);
#elif WSTORAGE == ST_Q3_K
  const uint b = base + (e / 256u) * 110u, x = e % 256u;
  const uint low = (WBYTE(b + 32u + (x / 128u) * 32u + x % 32u) >> (2u * ((x % 128u) / 32u))) & 3u;
  const uint high = (WBYTE(b + x % 32u) >> (x / 32u)) & 1u;
  const int q = int(low) - (high != 0u ? 0 : 4);
  const uint s = x / 16u;
  const uint sl = s < 8u ? (WBYTE(b + 96u + s) & 15u) : (WBYTE(b + 96u + s - 8u) >> 4);
  const uint sh = (WBYTE(b + 104u + s % 4u) >> (2u * (s / 4u))) & 3u;
  return WF16(b + 108u) * float(int(sl | (sh << 4)) - 32) * float(q);
#elif WSTORAGE == ST_Q4_K || WSTORAGE == ST_Q5_K
#if WSTORAGE == ST_Q4_K
  const uint b = base + (e / 256u) * 144u, qs_at = b + 16u;
#else
  const uint b = base + (e / 256u) * 176u, qs_at = b + 48u;
#endif
  const uint x = e % 256u, s = x / 32u, t = b + 4u;
  const uvec2 scale_min = WSCALEMINK(t, s);
  const uint sc = scale_min.x, mn = scale_min.y;
  uint q = (WBYTE(qs_at + (x / 64u) * 32u + x % 32u) >> (4u * (s % 2u))) & 15u;
#if WSTORAGE == ST_Q5_K
  q |= ((WBYTE(b + 16u + x % 32u) >> s) & 1u) << 4;
#endif
  return WF16(b) * float(sc) * float(q) - WF16(b + 2u) * float(mn);
#elif WSTORAGE == ST_Q6_K
  const uint b = base + (e / 256u) * 210u, x = e % 256u;
  const uint c = x / 128u, k = (x % 128u) / 32u, l = x % 32u;
  const uint low = (WBYTE(b + 64u * c + 32u * (k % 2u) + l) >> (4u * (k / 2u))) & 15u;
  const uint high = (WBYTE(b + 128u + 32u * c + l) >> (2u * k)) & 3u;
  const int scale = int(WBYTE(b + 192u + x / 16u) ^ 0x80u) - 128;
  return WF16(b + 208u) * float(scale) * float(int(low | (high << 4)) - 32);
#elif WSTORAGE == ST_INT4 || WSTORAGE == ST_INT2
#if WSTORAGE == ST_INT4
  const uint b = base + (e / WGROUP) * (WGROUP / 2u + 4u), j = e % WGROUP;
  const uint q = (WBYTE(b + 4u + j / 2u) >> (4u * (j % 2u))) & 15u;
#else
  const uint b = base + (e / WGROUP) * (WGROUP / 4u + 4u), j = e % WGROUP;
  const uint q = (WBYTE(b + 4u + j / 4u) >> (2u * (j % 4u))) & 3u;
#endif
  return WF16(b) * float(q) + WF16(b + 2u);
#else
#error unknown WSTORAGE
#endif
}

vec4 WREAD4(uint row, uint e) {
  const uint base = row * WROW_BYTES;
#if WSTORAGE == ST_F32
  const uint o = (base >> 2) + e;
  return vec4(uintBitsToFloat(WBUF[o]), uintBitsToFloat(WBUF[o + 1u]), uintBitsToFloat(WBUF[o + 2u]),
              uintBitsToFloat(WBUF[o + 3u]));
#elif WSTORAGE == ST_F16
  const uint o = base + 2u * e;
  return vec4(unpackHalf2x16(WWORD(o)), unpackHalf2x16(WWORD(o + 4u)));
#elif WSTORAGE == ST_BF16
  const uint o = base + 2u * e, a = WWORD(o), b = WWORD(o + 4u);
  return vec4(uintBitsToFloat(a << 16), uintBitsToFloat(a & 0xFFFF0000u), uintBitsToFloat(b << 16),
              uintBitsToFloat(b & 0xFFFF0000u));
#elif WSTORAGE == ST_Q8_0
  const uint b = base + (e / 32u) * 34u;
  const vec4 q = byte_fields(WWORD(b + 2u + e % 32u) ^ 0x80808080u, 0u, 0xFFu) - 128.0;  // int8
  return WF16(b) * q;
#elif WSTORAGE == ST_Q4_0 || WSTORAGE == ST_Q4_1
#if WSTORAGE == ST_Q4_0
  const uint b = base + (e / 32u) * 18u, qs = b + 2u;
#else
  const uint b = base + (e / 32u) * 20u, qs = b + 4u;
#endif
  const uint j = e % 32u;
  const vec4 q = byte_fields(WWORD(qs + j % 16u), j < 16u ? 0u : 4u, 15u);
#if WSTORAGE == ST_Q4_0
  return WF16(b) * (q - 8.0);
#else
  return WF16(b) * q + WF16(b + 2u);
#endif
#elif WSTORAGE == ST_Q4_K
  const uint b = base + (e / 256u) * 144u;
  const uint x = e % 256u, s = x / 32u, t = b + 4u;
  const uvec2 scale_min = WSCALEMINK(t, s);
  const uint sc = scale_min.x, mn = scale_min.y;
  const vec4 q = byte_fields(WWORD(b + 16u + (x / 64u) * 32u + x % 32u), 4u * (s % 2u), 15u);
  return WF16(b) * float(sc) * q - WF16(b + 2u) * float(mn);
#elif WSTORAGE == ST_Q6_K
  const uint b = base + (e / 256u) * 210u, x = e % 256u;
  const uint c = x / 128u, k = (x % 128u) / 32u, l = x % 32u;
  const vec4 low = byte_fields(WWORD(b + 64u * c + 32u * (k % 2u) + l), 4u * (k / 2u), 15u);
  const vec4 high = byte_fields(WWORD(b + 128u + 32u * c + l), 2u * k, 3u);
  const int scale = int(WBYTE(b + 192u + x / 16u) ^ 0x80u) - 128;
  return WF16(b + 208u) * float(scale) * (low + 16.0 * high - 32.0);
#elif WSTORAGE == ST_INT4
  const uint b = base + (e / WGROUP) * (WGROUP / 2u + 4u), j = e % WGROUP;
  const uint codes = WBYTE(b + 4u + j / 2u) | (WBYTE(b + 5u + j / 2u) << 8);
  const vec4 q = vec4(codes & 15u, (codes >> 4) & 15u, (codes >> 8) & 15u, (codes >> 12) & 15u);
  return WF16(b) * q + WF16(b + 2u);
#else
  return vec4(WREAD(row, e), WREAD(row, e + 1u), WREAD(row, e + 2u), WREAD(row, e + 3u));
#endif
}

#if WSTORAGE == ST_Q4_K
// Lane chunk c of a q4_K row (matmul.comp's Q4K_LANES): its 16 code bytes
// hold elements lo..lo+15 (low nibbles) and lo+32..lo+47 (high nibbles) of
// one 64-element pair of sub-blocks, with lo = 256 (c / 8) + 64 (c % 8 / 2) +
// 16 (c % 2). One word load per 4 codes and the block header as 4 words;
// scales and mins applied per sub-block, through the activation sums
// sum_lo / sum_hi:  sum (d sc q - dmin mn) x = d sc sum q x - dmin mn sum x.
float WDOTQ4K(uint row, uint c, vec4 xl[4], vec4 xh[4], float sum_lo, float sum_hi) {
  const uint b = (row * WROW_BYTES) / 4u + (c / 8u) * 36u;
  const uint q = c % 8u, s = 2u * (q / 2u);
  const vec2 dm = unpackHalf2x16(WBUF[b]);
  const uint y = WBUF[b + 1u], z = WBUF[b + 2u], w = WBUF[b + 3u];
  float sc[2], mn[2];
  for (uint i = 0u; i < 2u; ++i) {
    const vec2 sm = q4k_scale_min(y, z, w, s + i);
    sc[i] = sm.x;
    mn[i] = sm.y;
  }
  float lo = 0.0, hi = 0.0;
  for (uint i = 0u; i < 4u; ++i) {
    const uint word = WBUF[b + 4u + 4u * q + i];
    lo += dot(byte_fields(word, 0u, 15u), xl[i]);
    hi += dot(byte_fields(word, 4u, 15u), xh[i]);
  }
  return dm.x * sc[0] * lo - dm.y * mn[0] * sum_lo + dm.x * sc[1] * hi - dm.y * mn[1] * sum_hi;
}
#endif
