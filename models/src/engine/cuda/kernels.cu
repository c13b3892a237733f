// redline's INT8 kernels for the CUDA engine, compiled at run time by NVRTC
// (`--fmad=false`, IEEE division: every float operation rounds exactly as the CPU's).
//
// Contract: each thread computes one output element, or a fixed group of them (an output
// pixel x channel tile, 4 or 16 channels of a max pool, 16 bytes of a transpose), from its
// inputs only, with the same arithmetic as the CPU kernel it mirrors
// (models/src/onnx/kernels.rs, models/src/conv/scalar.rs, models/src/quant.rs): integer sums
// are exact (order-independent), and every float step is one correctly rounded IEEE
// operation in the CPU's order (`__fmul_rn`, `__fadd_rn`, `__fdiv_rn`, `rintf` = round half
// to even). So outputs are bit-identical to the native engine's on any grid. Parameter
// structs are mirrored field for field by `#[repr(C)]` structs in launch.rs.

typedef signed char i8;
typedef unsigned char u8;
typedef unsigned long long u64;

#define MAX_RANK 8

struct Win {
    int in_h, in_w, out_h, out_w, kh, kw, sh, sw, dh, dw, pt, pl;
};

// saturate_i8(round_half_even(clamp(v, -1024, 1024)) + zp), clamped into [lo, hi]; NaN -> 0
// (Rust's saturating cast), as `requant_f32`.
__device__ __forceinline__ int requant(float v, int zp, int lo, int hi) {
    if (isnan(v)) return 0;
    v = fminf(fmaxf(v, -1024.0f), 1024.0f);
    float r = __fadd_rn(rintf(v), (float)zp);
    r = fminf(fmaxf(r, (float)lo), (float)hi);
    return (int)r;
}

__device__ __forceinline__ int clampi(int v, int lo, int hi) {
    return v < lo ? lo : (v > hi ? hi : v);
}

// ------------------------------------------------------------------------------------------
// Convolution: acc = bias + sum (x - x_zp) w over in-image taps (exact, i32), then
// requant(acc * M[oc]) and the step's clamp.

// out_f32 0: requantized i8 outputs (mult: the requantization multipliers). out_f32 1: a
// float-output convolution (TensorRT-style Q/DQ placement, kernels.rs `acc_to_f32`): f32
// outputs acc * mult[oc] + fbias[oc], two IEEE roundings (mult: x_scale * w_scale[oc]).
struct ConvP {
    u64 x, y, w, bias, mult, wsum, fbias;
    Win win;
    int in_c, out_c, groups, batch, x_zp, y_zp, lo, hi, clo, chi, out_f32;
};

// Output `at` (= pixel * out_c + oc) of a convolution from its exact sum `a` (bias and the
// zero-point correction included), as the step's output kind asks.
__device__ __forceinline__ void conv_store(const ConvP& p, size_t at, int oc, unsigned a) {
    float v = __fmul_rn((float)(int)a, ((const float*)p.mult)[oc]);
    if (p.out_f32) {
        ((float*)p.y)[at] = __fadd_rn(v, ((const float*)p.fbias)[oc]);
    } else {
        ((i8*)p.y)[at] = (i8)clampi(requant(v, p.y_zp, p.lo, p.hi), p.clo, p.chi);
    }
}

#define OCT 8

// Ungrouped, in_c % 4 == 0: one thread = one output pixel x OCT output channels, dp4a over
// 4 input channels at a time. Padded taps read x_zp (contributing x_zp * w), and x_zp * sum(w)
// over all taps is subtracted once: the same exact integer as skipping them.
extern "C" __global__ void conv_dp4a(const ConvP p) {
    const Win wn = p.win;
    int npix = p.batch * wn.out_h * wn.out_w;
    int pix = blockIdx.x * blockDim.x + threadIdx.x;
    int oc0 = blockIdx.y * OCT;
    if (pix >= npix) return;
    int ox = pix % wn.out_w;
    int t = pix / wn.out_w;
    int oy = t % wn.out_h;
    int b = t / wn.out_h;
    const i8* x = (const i8*)p.x + (size_t)b * wn.in_h * wn.in_w * p.in_c;
    const int* w = (const int*)p.w;
    int c4 = p.in_c >> 2;
    int taps4 = wn.kh * wn.kw * c4;
    int zp4 = (p.x_zp & 0xff) * 0x01010101;
    int nj = min(OCT, p.out_c - oc0);
    int acc[OCT];
#pragma unroll
    for (int j = 0; j < OCT; j++) acc[j] = 0;
    for (int ky = 0; ky < wn.kh; ky++) {
        int iy = oy * wn.sh + ky * wn.dh - wn.pt;
        bool iny = iy >= 0 && iy < wn.in_h;
        for (int kx = 0; kx < wn.kw; kx++) {
            int ix = ox * wn.sw + kx * wn.dw - wn.pl;
            bool in = iny && ix >= 0 && ix < wn.in_w;
            const int* xp = (const int*)(x + ((size_t)(in ? iy : 0) * wn.in_w + (in ? ix : 0)) * p.in_c);
            int wi = (ky * wn.kw + kx) * c4;
            for (int c = 0; c < c4; c++) {
                int xv = in ? __ldg(xp + c) : zp4;
                if (nj == OCT) {
#pragma unroll
                    for (int j = 0; j < OCT; j++)
                        acc[j] = __dp4a(xv, __ldg(w + (size_t)(oc0 + j) * taps4 + wi + c), acc[j]);
                } else {
                    for (int j = 0; j < nj; j++)
                        acc[j] = __dp4a(xv, __ldg(w + (size_t)(oc0 + j) * taps4 + wi + c), acc[j]);
                }
            }
        }
    }
    const int* bias = (const int*)p.bias;
    const int* wsum = (const int*)p.wsum;
    for (int j = 0; j < nj; j++) {
        int oc = oc0 + j;
        // Unsigned arithmetic: wrapping partial sums, exact final value (the layer's bound).
        unsigned a = (unsigned)bias[oc] + (unsigned)acc[j] - (unsigned)(p.x_zp * wsum[oc]);
        conv_store(p, (size_t)pix * p.out_c + oc, oc, a);
    }
}

// Tensor cores (sm_80+: Orin, Ampere, Hopper): the convolution as an implicit GEMM,
// C[pixels x out_c] = A[pixels x K] * B[K x out_c] with K = kh * kw * in_c, on
// mma.sync.m16n8k32 s8 x s8 -> s32 (exact integer products and sums, so the result is the
// same integer as every other path). A block computes 64 pixels x 64 channels with 4 warps
// (32 x 32 each) over K slices of 64, double-buffered: the next slice is read from global
// memory into registers while the tensor cores work on the current one in shared memory.
// A thread gathers 2 x 16 bytes of A and of B per slice (one vector load each when
// in_c % 16 == 0, else byte by byte); padded taps and the K tail read x_zp against zero
// weights, and x_zp * sum(w) is subtracted once in the epilogue.
#define MMA_BM 64
#define MMA_BN 64
#define MMA_BK 64
#define MMA_STRIDE 80 // bytes per shared row: 16-byte aligned, conflict-free fragment reads

__device__ __forceinline__ void mma_s8(int* c, const unsigned* a, const unsigned* b) {
#if __CUDA_ARCH__ >= 800
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

// 16 bytes of A's row for GEMM columns kk .. kk+15 (output pixel with input origin (y0, x0)
// in image xb): one 16-byte load when in_c % 16 == 0, four 4-byte loads when in_c % 4 == 0,
// else byte by byte (one division, then the tap and channel are stepped).
__device__ __forceinline__ int4 load_a(const ConvP& p, const i8* xb, int y0, int x0, int kk, bool row,
                                       int K, bool vec, int zp4) {
    const Win& wn = p.win;
    int4 v = make_int4(zp4, zp4, zp4, zp4);
    if (!row || kk >= K) return v;
    int tap = kk / p.in_c, c = kk - tap * p.in_c;
    int ky = tap / wn.kw, kx = tap - ky * wn.kw;
    if (vec) {
        int iy = y0 + ky * wn.dh, ix = x0 + kx * wn.dw;
        if (iy >= 0 && iy < wn.in_h && ix >= 0 && ix < wn.in_w)
            v = __ldg((const int4*)(xb + ((size_t)iy * wn.in_w + ix) * p.in_c + c));
        return v;
    }
    if ((p.in_c & 3) == 0) {
        // Four channels of one tap per word (kk and in_c are multiples of 4).
        int w4[4];
#pragma unroll
        for (int q = 0; q < 4; q++) {
            int iy = y0 + ky * wn.dh, ix = x0 + kx * wn.dw;
            w4[q] = zp4;
            if (kk + q * 4 < K && iy >= 0 && iy < wn.in_h && ix >= 0 && ix < wn.in_w)
                w4[q] = __ldg((const int*)(xb + ((size_t)iy * wn.in_w + ix) * p.in_c + c));
            c += 4;
            if (c == p.in_c) {
                c = 0;
                if (++kx == wn.kw) {
                    kx = 0;
                    ky++;
                }
            }
        }
        return make_int4(w4[0], w4[1], w4[2], w4[3]);
    }
    unsigned w[4];
#pragma unroll
    for (int q = 0; q < 4; q++) {
        unsigned word = 0;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            unsigned byte = (unsigned)(p.x_zp & 0xff);
            int iy = y0 + ky * wn.dh, ix = x0 + kx * wn.dw;
            if (kk + q * 4 + j < K && iy >= 0 && iy < wn.in_h && ix >= 0 && ix < wn.in_w)
                byte = (unsigned)(u8)xb[((size_t)iy * wn.in_w + ix) * p.in_c + c];
            word |= byte << (8 * j);
            if (++c == p.in_c) {
                c = 0;
                if (++kx == wn.kw) {
                    kx = 0;
                    ky++;
                }
            }
        }
        w[q] = word;
    }
    return make_int4((int)w[0], (int)w[1], (int)w[2], (int)w[3]);
}

// 16 bytes of B's row (output channel's weights) for GEMM columns kk .. kk+15; 0 past K.
__device__ __forceinline__ int4 load_b(const i8* wb, int kk, bool row, int K, bool vec) {
    if (!row || kk >= K) return make_int4(0, 0, 0, 0);
    if (vec) return __ldg((const int4*)(wb + kk));
    unsigned w[4];
#pragma unroll
    for (int q = 0; q < 4; q++) {
        unsigned word = 0;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            int k = kk + q * 4 + j;
            word |= (k < K ? (unsigned)(u8)wb[k] : 0u) << (8 * j);
        }
        w[q] = word;
    }
    return make_int4((int)w[0], (int)w[1], (int)w[2], (int)w[3]);
}

extern "C" __global__ void __launch_bounds__(128) conv_mma(const ConvP p) {
#if __CUDA_ARCH__ >= 800
    __shared__ __align__(16) u8 As[2][MMA_BM * MMA_STRIDE];
    __shared__ __align__(16) u8 Bs[2][MMA_BN * MMA_STRIDE];
    const Win wn = p.win;
    int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    int M = p.batch * wn.out_h * wn.out_w;
    int K = wn.kh * wn.kw * p.in_c;
    int m0 = blockIdx.x * MMA_BM, n0 = blockIdx.y * MMA_BN;
    // This thread's slots in each K slice: row r, bytes q0 * 16 .. q0 * 16 + 31.
    int r = tid >> 1, q0 = (tid & 1) * 2;
    int am = m0 + r;
    bool arow = am < M;
    int ox = 0, oy = 0, b = 0;
    if (arow) {
        ox = am % wn.out_w;
        int t = am / wn.out_w;
        oy = t % wn.out_h;
        b = t / wn.out_h;
    }
    int y0 = oy * wn.sh - wn.pt, x0 = ox * wn.sw - wn.pl;
    const i8* xb = (const i8*)p.x + (size_t)b * wn.in_h * wn.in_w * p.in_c;
    int bn = n0 + r;
    bool brow = bn < p.out_c;
    const i8* wb = (const i8*)p.w + (size_t)(brow ? bn : 0) * K;
    int zp4 = (p.x_zp & 0xff) * 0x01010101;
    bool vec_a = (p.in_c & 15) == 0, vec_b = (K & 15) == 0;
    int wm = (warp >> 1) * 32, wc = (warp & 1) * 32;
    int g = lane >> 2, t4 = lane & 3;
    int acc[2][4][4];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[i][j][e] = 0;
    int4 ra[2], rb[2];
#pragma unroll
    for (int q = 0; q < 2; q++) {
        ra[q] = load_a(p, xb, y0, x0, (q0 + q) * 16, arow, K, vec_a, zp4);
        rb[q] = load_b(wb, (q0 + q) * 16, brow, K, vec_b);
    }
    int buf = 0;
#pragma unroll
    for (int q = 0; q < 2; q++) {
        *(int4*)(&As[0][r * MMA_STRIDE + (q0 + q) * 16]) = ra[q];
        *(int4*)(&Bs[0][r * MMA_STRIDE + (q0 + q) * 16]) = rb[q];
    }
    __syncthreads();
    for (int k0 = 0; k0 < K; k0 += MMA_BK) {
        bool more = k0 + MMA_BK < K;
        if (more) {
#pragma unroll
            for (int q = 0; q < 2; q++) {
                int kk = k0 + MMA_BK + (q0 + q) * 16;
                ra[q] = load_a(p, xb, y0, x0, kk, arow, K, vec_a, zp4);
                rb[q] = load_b(wb, kk, brow, K, vec_b);
            }
        }
#pragma unroll
        for (int ks = 0; ks < MMA_BK; ks += 32) {
            unsigned fa[2][4], fb[4][2];
#pragma unroll
            for (int i = 0; i < 2; i++) {
                const u8* pa = &As[buf][(wm + i * 16 + g) * MMA_STRIDE + ks + t4 * 4];
                fa[i][0] = *(const unsigned*)(pa);
                fa[i][1] = *(const unsigned*)(pa + 8 * MMA_STRIDE);
                fa[i][2] = *(const unsigned*)(pa + 16);
                fa[i][3] = *(const unsigned*)(pa + 8 * MMA_STRIDE + 16);
            }
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const u8* pb = &Bs[buf][(wc + j * 8 + g) * MMA_STRIDE + ks + t4 * 4];
                fb[j][0] = *(const unsigned*)(pb);
                fb[j][1] = *(const unsigned*)(pb + 16);
            }
#pragma unroll
            for (int i = 0; i < 2; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) mma_s8(acc[i][j], fa[i], fb[j]);
        }
        if (more) {
            // The other buffer was last read before the previous barrier: free to fill.
#pragma unroll
            for (int q = 0; q < 2; q++) {
                *(int4*)(&As[buf ^ 1][r * MMA_STRIDE + (q0 + q) * 16]) = ra[q];
                *(int4*)(&Bs[buf ^ 1][r * MMA_STRIDE + (q0 + q) * 16]) = rb[q];
            }
        }
        __syncthreads();
        buf ^= 1;
    }
    const int* bias = (const int*)p.bias;
    const int* wsum = (const int*)p.wsum;
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int row = m0 + wm + i * 16 + g + (e >= 2 ? 8 : 0);
                int oc = n0 + wc + j * 8 + t4 * 2 + (e & 1);
                if (row < M && oc < p.out_c) {
                    unsigned a = (unsigned)bias[oc] + (unsigned)acc[i][j][e] - (unsigned)(p.x_zp * wsum[oc]);
                    conv_store(p, (size_t)row * p.out_c + oc, oc, a);
                }
            }
#else
    __trap();
#endif
}

// Any convolution (groups, any channel count): one thread = one output value.
extern "C" __global__ void conv_generic(const ConvP p) {
    const Win wn = p.win;
    long long n = (long long)p.batch * wn.out_h * wn.out_w * p.out_c;
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int oc = (int)(i % p.out_c);
    long long pix = i / p.out_c;
    int ox = (int)(pix % wn.out_w);
    long long t = pix / wn.out_w;
    int oy = (int)(t % wn.out_h);
    int b = (int)(t / wn.out_h);
    int icg = p.in_c / p.groups;
    int ocg = p.out_c / p.groups;
    int g = oc / ocg;
    const i8* x = (const i8*)p.x + (size_t)b * wn.in_h * wn.in_w * p.in_c + g * icg;
    const i8* w = (const i8*)p.w + (size_t)oc * wn.kh * wn.kw * icg;
    int acc = 0;
    for (int ky = 0; ky < wn.kh; ky++) {
        int iy = oy * wn.sh + ky * wn.dh - wn.pt;
        if (iy < 0 || iy >= wn.in_h) continue;
        for (int kx = 0; kx < wn.kw; kx++) {
            int ix = ox * wn.sw + kx * wn.dw - wn.pl;
            if (ix < 0 || ix >= wn.in_w) continue;
            const i8* xp = x + ((size_t)iy * wn.in_w + ix) * p.in_c;
            const i8* wp = w + (ky * wn.kw + kx) * icg;
            for (int c = 0; c < icg; c++) acc += ((int)xp[c] - p.x_zp) * (int)wp[c];
        }
    }
    unsigned a = (unsigned)((const int*)p.bias)[oc] + (unsigned)acc;
    conv_store(p, (size_t)i, oc, a);
}

// Channels padded to `c_out` with `fill` (the convolution's x_zp), so a stem convolution
// of 3 channels reads 4-byte taps; its weights are padded with zeros, so the sums are
// unchanged.
struct PadP {
    u64 x, y;
    int pixels, c_in, c_out, fill;
};

// One thread = one pixel: its c_in bytes, then `fill` up to c_out, written as whole 4-byte
// words (the launch plan pads to a multiple of 4 channels, and y is aligned).
extern "C" __global__ void pad_channels(const PadP p) {
    int px = blockIdx.x * blockDim.x + threadIdx.x;
    if (px >= p.pixels) return;
    const i8* x = (const i8*)p.x + (size_t)px * p.c_in;
    unsigned* y = (unsigned*)((i8*)p.y + (size_t)px * p.c_out);
    for (int w = 0; w < p.c_out / 4; w++) {
        unsigned word = 0;
        for (int k = 0; k < 4; k++) {
            int c = 4 * w + k;
            u8 v = (u8)(c < p.c_in ? x[c] : (i8)p.fill);
            word |= (unsigned)v << (8 * k);
        }
        y[w] = word;
    }
}

// ------------------------------------------------------------------------------------------
// Graph inputs and outputs, quantization, tables.

// mode 0: copy; 1: flip (x ^ 0x80); 2: dequantize i8 -> f32 ((x - zp) * scale).
struct CopyP {
    u64 x, y;
    int n, mode, zp;
    float scale;
};

extern "C" __global__ void copy_io(const CopyP p) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= p.n) return;
    i8 v = ((const i8*)p.x)[i];
    if (p.mode == 2) {
        ((float*)p.y)[i] = __fmul_rn((float)((int)v - p.zp), p.scale);
    } else {
        ((u8*)p.y)[i] = (u8)v ^ (p.mode == 1 ? 0x80 : 0);
    }
}

struct QuantP {
    u64 x, y;
    int n, zp;
    float scale;
};

// QuantizeLinear: requant(x / scale) (a division, as ONNX Runtime); NaN -> -128, the lowest
// value, as ONNX Runtime and the CPU's `kernels::quantize`.
extern "C" __global__ void quantize(const QuantP p) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= p.n) return;
    float v = __fdiv_rn(((const float*)p.x)[i], p.scale);
    ((i8*)p.y)[i] = isnan(v) ? (i8)-128 : (i8)requant(v, p.zp, -128, 127);
}

struct LutP {
    u64 x, y, table;
    int n;
};

extern "C" __global__ void lut(const LutP p) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= p.n) return;
    ((i8*)p.y)[i] = ((const i8*)p.table)[(u8)((const i8*)p.x)[i]];
}

// ------------------------------------------------------------------------------------------
// Pooling over NHWC images: one thread per output value.

struct PoolP {
    u64 x, y;
    Win win;
    int c, batch, avg, x_zp, y_zp, lo, hi, count_include_pad;
    float x_scale, y_scale;
    // Max pooling: channels per thread, 16, 4 or 1 (c and both pointers are multiples of it).
    int vec;
    // Average pooling in ONNX Runtime's float formula (kernels::AvgFloat) when float_sum.
    int float_sum, offset;
    float stored_zp;
};

// Per-byte signed maximum of 1, 4 or 16 channels at once, and the all -128 starting value.
__device__ __forceinline__ i8 vmax(i8 a, i8 b) { return a > b ? a : b; }
__device__ __forceinline__ unsigned vmax(unsigned a, unsigned b) { return __vmaxs4(a, b); }
__device__ __forceinline__ uint4 vmax(uint4 a, uint4 b) {
    return make_uint4(__vmaxs4(a.x, b.x), __vmaxs4(a.y, b.y), __vmaxs4(a.z, b.z), __vmaxs4(a.w, b.w));
}
__device__ __forceinline__ void vmin_value(i8& m) { m = -128; }
__device__ __forceinline__ void vmin_value(unsigned& m) { m = 0x80808080u; }
__device__ __forceinline__ void vmin_value(uint4& m) {
    m = make_uint4(0x80808080u, 0x80808080u, 0x80808080u, 0x80808080u);
}

// Max pooling over `V` channels per thread (`T`: i8, unsigned for 4 or uint4 for 16 bytes;
// the launch plan picks V so that c and both pointers are multiples of it). The maximum is
// taken per byte, so the bytes do not depend on V. Padded taps are skipped (they never win
// a max), as on the CPU. 32-bit index arithmetic: the launch plan checks that the element
// count fits an i32.
template <int V, typename T>
__device__ __forceinline__ void max_pool(const PoolP& p) {
    const Win wn = p.win;
    int groups = p.c / V;
    int n = p.batch * wn.out_h * wn.out_w * groups;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int g = i % groups;
    int pix = i / groups;
    int ox = pix % wn.out_w;
    int t = pix / wn.out_w;
    int oy = t % wn.out_h;
    int b = t / wn.out_h;
    const i8* x = (const i8*)p.x + (size_t)b * wn.in_h * wn.in_w * p.c + (size_t)g * V;
    T m;
    vmin_value(m);
    for (int ky = 0; ky < wn.kh; ky++) {
        int iy = oy * wn.sh + ky * wn.dh - wn.pt;
        if (iy < 0 || iy >= wn.in_h) continue;
        for (int kx = 0; kx < wn.kw; kx++) {
            int ix = ox * wn.sw + kx * wn.dw - wn.pl;
            if (ix < 0 || ix >= wn.in_w) continue;
            m = vmax(m, *(const T*)(x + ((size_t)iy * wn.in_w + ix) * p.c));
        }
    }
    *(T*)((i8*)p.y + (size_t)pix * p.c + (size_t)g * V) = m;
}

extern "C" __global__ void pool(const PoolP p) {
    if (!p.avg) {
        if (p.vec == 16) {
            max_pool<16, uint4>(p);
        } else if (p.vec == 4) {
            max_pool<4, unsigned>(p);
        } else {
            max_pool<1, i8>(p);
        }
        return;
    }
    const Win wn = p.win;
    long long n = (long long)p.batch * wn.out_h * wn.out_w * p.c;
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int ch = (int)(i % p.c);
    long long pix = i / p.c;
    int ox = (int)(pix % wn.out_w);
    long long t = pix / wn.out_w;
    int oy = (int)(t % wn.out_h);
    int b = (int)(t / wn.out_h);
    const i8* x = (const i8*)p.x + (size_t)b * wn.in_h * wn.in_w * p.c + ch;
    // One walk of the window: the integer sum (and, for ONNX Runtime's QLinearAveragePool
    // formula, kernels::AvgFloat, the dequantized taps summed in f32 in window order).
    unsigned inside = 0, padded = 0;
    int acc = 0;
    float sum = 0.0f;
    for (int ky = 0; ky < wn.kh; ky++) {
        int iy = oy * wn.sh + ky * wn.dh - wn.pt;
        bool in_pad_y = iy >= -wn.pt && iy < wn.in_h + wn.pt;
        for (int kx = 0; kx < wn.kw; kx++) {
            int ix = ox * wn.sw + kx * wn.dw - wn.pl;
            if (iy < 0 || iy >= wn.in_h || ix < 0 || ix >= wn.in_w) {
                bool in_pad_x = ix >= -wn.pl && ix < wn.in_w + wn.pl;
                if (in_pad_y && in_pad_x) padded++;
            } else {
                inside++;
                int q = (int)x[((size_t)iy * wn.in_w + ix) * p.c] - p.x_zp;
                acc += q;
                sum = __fadd_rn(sum, __fmul_rn(p.x_scale, (float)q));
            }
        }
    }
    if (p.float_sum) {
        // Divided by the whole kernel's size with count_include_pad (else by the taps
        // inside), + the stored zero point in f32, rounded half to even, less the uint8
        // offset.
        float div = p.count_include_pad ? (float)(wn.kh * wn.kw) : (float)(inside < 1 ? 1 : inside);
        float v = __fadd_rn(__fdiv_rn(__fdiv_rn(sum, div), p.y_scale), p.stored_zp);
        v = fminf(fmaxf(v, -1024.0f), 1024.0f);
        int r = (int)rintf(v) - p.offset;
        ((i8*)p.y)[i] = (i8)min(max(r, p.lo), p.hi);
        return;
    }
    unsigned count = p.count_include_pad ? inside + padded : inside;
    if (count < 1) count = 1;
    float scale = __fdiv_rn(p.x_scale, __fmul_rn(p.y_scale, (float)count));
    ((i8*)p.y)[i] = (i8)requant(__fmul_rn((float)acc, scale), p.y_zp, p.lo, p.hi);
}

// Threads per block of `global_avg_pool` (launch.rs `GAP_BLOCK`).
#define GAP_BLOCK 256

// Adds the V signed bytes of `v` to `acc[0..V]`.
__device__ __forceinline__ void add_bytes(int* acc, i8 v) { acc[0] += v; }
__device__ __forceinline__ void add_bytes(int* acc, unsigned v) {
#pragma unroll
    for (int k = 0; k < 4; k++) acc[k] += (int)(signed char)(v >> (8 * k));
}
__device__ __forceinline__ void add_bytes(int* acc, uint4 v) {
    add_bytes(acc, v.x);
    add_bytes(acc + 4, v.y);
    add_bytes(acc + 8, v.z);
    add_bytes(acc + 12, v.w);
}

// A global average pool (a whole-image window from the top-left corner, the integer
// formula: PoolP with avg set and float_sum 0): block (g, b) sums channels g*V .. g*V+V-1
// of image b, each thread a strided share of the pixels, V bytes per load (T: i8, unsigned
// or uint4; the launch plan picks V so that c and the input's offset are multiples of it),
// then the block adds the threads' sums in shared memory. Integer sums are exact, so the
// bytes do not depend on how the pixels are shared out; the requantization is `pool`'s
// (x_scale / (y_scale * count), count = every pixel). 32-bit indices: the launch plan
// checks that the image fits an i32.
template <int V, typename T>
__device__ __forceinline__ void global_avg(const PoolP& p) {
    __shared__ int part[V][GAP_BLOCK];
    int hw = p.win.in_h * p.win.in_w;
    int g = blockIdx.x, b = blockIdx.y, t = threadIdx.x;
    const i8* x = (const i8*)p.x + (size_t)b * hw * p.c + (size_t)g * V;
    int acc[V];
#pragma unroll
    for (int k = 0; k < V; k++) acc[k] = 0;
    for (int px = t; px < hw; px += GAP_BLOCK) add_bytes(acc, *(const T*)(x + (size_t)px * p.c));
#pragma unroll
    for (int k = 0; k < V; k++) part[k][t] = acc[k];
    __syncthreads();
    for (int half = GAP_BLOCK / 2; half > 0; half >>= 1) {
        if (t < half) {
#pragma unroll
            for (int k = 0; k < V; k++) part[k][t] += part[k][t + half];
        }
        __syncthreads();
    }
    if (t < V) {
        int sum = part[t][0] - hw * p.x_zp;
        float scale = __fdiv_rn(p.x_scale, __fmul_rn(p.y_scale, (float)hw));
        ((i8*)p.y)[(size_t)b * p.c + (size_t)g * V + t] =
            (i8)requant(__fmul_rn((float)sum, scale), p.y_zp, p.lo, p.hi);
    }
}

extern "C" __global__ void __launch_bounds__(GAP_BLOCK) global_avg_pool(const PoolP p) {
    if (p.vec == 16) {
        global_avg<16, uint4>(p);
    } else if (p.vec == 4) {
        global_avg<4, unsigned>(p);
    } else {
        global_avg<1, i8>(p);
    }
}

// ------------------------------------------------------------------------------------------
// Elementwise binary operators with broadcast strides (physical order, outermost first).

struct BinP {
    u64 a, b, y;
    int n, rank, mul;
    float ra, rb, fixed, off, sa, sb, sy;
    int za, zb, zy, lo, hi;
    // 1 when the operand's strides are the output's own (its element i is element i).
    int dense_a, dense_b;
    int shape[MAX_RANK], as[MAX_RANK], bs[MAX_RANK];
};

extern "C" __global__ void binary(const BinP p) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= p.n) return;
    long long oa = i, ob = i;
    if (!(p.dense_a && p.dense_b)) {
        int rem = i;
        long long sa = 0, sb = 0;
        for (int d = p.rank - 1; d >= 0; d--) {
            int idx = rem % p.shape[d];
            rem /= p.shape[d];
            sa += (long long)idx * p.as[d];
            sb += (long long)idx * p.bs[d];
        }
        if (!p.dense_a) oa = sa;
        if (!p.dense_b) ob = sb;
    }
    int a = ((const i8*)p.a)[oa];
    int b = ((const i8*)p.b)[ob];
    int r;
    if (p.mul == 2) {
        // ONNX Runtime's QLinearMul (x86 MLAS), as the CPU's `qlinear_mul_one`: `ra` is the
        // ratio sa * sb / sy, `fixed` the stored output zero point, `off` 128 for uint8.
        int prod = (a - p.za) * (b - p.zb);
        float w = __fadd_rn(__fmul_rn((float)prod, p.ra), p.fixed);
        // cvtps2dq: half to even, and INT_MIN outside the int range (and for NaN).
        int s = (w >= -2147483648.0f && w < 2147483648.0f) ? __float2int_rn(w) : (-2147483647 - 1);
        int off = (int)p.off;
        s = min(max(s, -32768), 32767);
        s = min(max(s, -128 + off), 127 + off);
        r = min(max(s - off, p.lo), p.hi);
    } else if (p.mul == 1) {
        float va = __fmul_rn((float)(a - p.za), p.sa);
        float vb = __fmul_rn((float)(b - p.zb), p.sb);
        r = requant(__fdiv_rn(__fmul_rn(va, vb), p.sy), p.zy, p.lo, p.hi);
    } else if (p.mul == 3) {
        // Div, as the CPU's `div_one`: 0 / 0 (NaN) gives `lo`, as ONNX Runtime's
        // QuantizeLinear clamps with max(v, lo) first.
        float va = __fmul_rn((float)(a - p.za), p.sa);
        float vb = __fmul_rn((float)(b - p.zb), p.sb);
        float v = __fdiv_rn(__fdiv_rn(va, vb), p.sy);
        r = isnan(v) ? p.lo : requant(v, p.zy, p.lo, p.hi);
    } else if (p.mul == 4) {
        // Sub, as the CPU's `sub_one`.
        float va = __fmul_rn((float)(a - p.za), p.sa);
        float vb = __fmul_rn((float)(b - p.zb), p.sb);
        r = requant(__fdiv_rn(__fsub_rn(va, vb), p.sy), p.zy, p.lo, p.hi);
    } else {
        // The stored integers (`off`: 128 for uint8 tensors) and two fused multiply-adds,
        // as the CPU's `add_one`.
        float fa = __fadd_rn((float)a, p.off), fb = __fadd_rn((float)b, p.off);
        float v = __fmaf_rn(fa, p.ra, __fmaf_rn(fb, p.rb, p.fixed));
        r = requant(v, -(int)p.off, p.lo, p.hi);
    }
    ((i8*)p.y)[i] = (i8)r;
}

// ------------------------------------------------------------------------------------------
// Float steps (a float route between a float-output convolution and the next
// QuantizeLinear): one IEEE operation per element, as kernels::float. NaN payloads may differ
// from the CPU's (the GPU's NaN is canonical); a NaN quantizes to the same byte either way.

// `y[i] = op(a[i], b[j])`, operands swapped when `swap` (op 0 add, 1 sub, 2 mul, 3 div), j
// by `mode`: 0 two tensors of one shape (j = i); 1 a constant repeating every `period`
// elements (j = i % period); 2 a tensor broadcast along `times` (kernels.rs
// FloatBinaryBroadcast: period = times * inner, j = (i / period) * inner + i % inner).
struct FBinP {
    u64 a, b, y;
    int n, op, swap, mode, period, inner;
};

extern "C" __global__ void float_binary(const FBinP p) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= p.n) return;
    float u = ((const float*)p.a)[i];
    int j = p.mode == 0 ? i : (p.mode == 1 ? i % p.period : (i / p.period) * p.inner + i % p.inner);
    float v = ((const float*)p.b)[j];
    if (p.swap) {
        float t = u;
        u = v;
        v = t;
    }
    float r;
    if (p.op == 0) {
        r = __fadd_rn(u, v);
    } else if (p.op == 1) {
        r = __fsub_rn(u, v);
    } else if (p.op == 2) {
        r = __fmul_rn(u, v);
    } else {
        r = __fdiv_rn(u, v);
    }
    ((float*)p.y)[i] = r;
}

// kernels.rs `exp_poly`: e^x from basic operations, step for step (round_magic's 1.5 * 2^23,
// the split ln 2, a degree-6 Horner polynomial, 2^n through the exponent bits). Constants as
// bit patterns: log2 e 0x3fb8aa3b, ln 2 high 0x3f317200 and low 0x35bfbe8e, the CPU's f32s.
__device__ __forceinline__ float exp_poly(float x) {
    bool nan = isnan(x);
    // f32::clamp: comparisons, so NaN stays NaN (and is answered below).
    if (x < -87.0f) x = -87.0f;
    if (x > 88.0f) x = 88.0f;
    const float magic = 12582912.0f;
    float t = __fadd_rn(__fmul_rn(x, __int_as_float(0x3fb8aa3b)), magic);
    float n = __fsub_rn(t, magic);
    int n_int = __float_as_int(t) - __float_as_int(magic);
    float r = __fsub_rn(__fsub_rn(x, __fmul_rn(n, __int_as_float(0x3f317200))), __fmul_rn(n, __int_as_float(0x35bfbe8e)));
    float q = __fdiv_rn(1.0f, 720.0f);
    q = __fadd_rn(__fmul_rn(q, r), __fdiv_rn(1.0f, 120.0f));
    q = __fadd_rn(__fmul_rn(q, r), __fdiv_rn(1.0f, 24.0f));
    q = __fadd_rn(__fmul_rn(q, r), __fdiv_rn(1.0f, 6.0f));
    q = __fadd_rn(__fmul_rn(q, r), 0.5f);
    q = __fadd_rn(__fmul_rn(q, r), 1.0f);
    q = __fadd_rn(__fmul_rn(q, r), 1.0f);
    float scale = __int_as_float((n_int + 127) << 23);
    return nan ? __int_as_float(0x7fc00000) : __fmul_rn(q, scale);
}

// f32::clamp(v, lo, hi): comparisons (NaN stays NaN; -0.0 is not below 0.0).
__device__ __forceinline__ float clamp_cmp(float v, float lo, float hi) {
    if (v < lo) v = lo;
    if (v > hi) v = hi;
    return v;
}

// A float function of one tensor (kernels.rs `float::unary`; op codes: launch.rs
// `unary_code`): 0 clamp(a, b) as max then min (fmaxf/fminf: a NaN operand gives the other),
// 1 sigmoid, 2 hard sigmoid (alpha a, beta b), 3 hard swish, 4 leaky relu (alpha a), 5 neg,
// 6 exp, 7 sqrt, 8 reciprocal, 9 abs, 10 square.
struct FUnP {
    u64 x, y;
    int n, op;
    float a, b;
};

extern "C" __global__ void float_unary(const FUnP p) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= p.n) return;
    float v = ((const float*)p.x)[i];
    float r;
    switch (p.op) {
    case 0: r = fminf(fmaxf(v, p.a), p.b); break;
    case 1: r = __fdiv_rn(1.0f, __fadd_rn(1.0f, exp_poly(-v))); break;
    case 2: r = clamp_cmp(__fadd_rn(__fmul_rn(p.a, v), p.b), 0.0f, 1.0f); break;
    case 3:
        r = __fmul_rn(v, clamp_cmp(__fadd_rn(__fmul_rn(__fdiv_rn(1.0f, 6.0f), v), 0.5f), 0.0f, 1.0f));
        break;
    case 4: r = v >= 0.0f ? v : __fmul_rn(p.a, v); break;
    case 5: r = -v; break;
    case 6: r = exp_poly(v); break;
    case 7: r = __fsqrt_rn(v); break;
    case 8: r = __fdiv_rn(1.0f, v); break;
    case 9: r = fabsf(v); break;
    default: r = __fmul_rn(v, v); break;
    }
    ((float*)p.y)[i] = r;
}

// Per-image, per-channel means of an f32 NHWC tensor (kernels.rs
// `float::global_avg_pool`): one thread per output sums its channel over the pixels in pixel
// order, then divides once by hw, so the sum's rounding is the CPU's.
struct FGapP {
    u64 x, y;
    int n, c, hw;
};

extern "C" __global__ void float_global_avg_pool(const FGapP p) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= p.n) return;
    int img = i / p.c, ch = i % p.c;
    const float* x = (const float*)p.x + (size_t)img * p.hw * p.c + ch;
    float s = 0.0f;
    for (int q = 0; q < p.hw; q++) s = __fadd_rn(s, x[(size_t)q * p.c]);
    ((float*)p.y)[i] = __fdiv_rn(s, (float)p.hw);
}

// Max pooling of an f32 NHWC tensor (kernels.rs `max_pool_f32`): taps inside the image only,
// from -inf; fmaxf, like f32::max, returns the other operand of a NaN.
extern "C" __global__ void float_max_pool(const PoolP p) {
    const Win wn = p.win;
    int n = p.batch * wn.out_h * wn.out_w * p.c;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int ch = i % p.c;
    int pix = i / p.c;
    int ox = pix % wn.out_w;
    int t = pix / wn.out_w;
    int oy = t % wn.out_h;
    int b = t / wn.out_h;
    const float* x = (const float*)p.x + (size_t)b * wn.in_h * wn.in_w * p.c + ch;
    float m = __int_as_float(0xff800000); // -inf
    for (int ky = 0; ky < wn.kh; ky++) {
        int iy = oy * wn.sh + ky * wn.dh - wn.pt;
        if (iy < 0 || iy >= wn.in_h) continue;
        for (int kx = 0; kx < wn.kw; kx++) {
            int ix = ox * wn.sw + kx * wn.dw - wn.pl;
            if (ix < 0 || ix >= wn.in_w) continue;
            m = fmaxf(m, x[((size_t)iy * wn.in_w + ix) * p.c]);
        }
    }
    ((float*)p.y)[i] = m;
}

// ------------------------------------------------------------------------------------------
// Data movement.

struct TransP {
    u64 x, y;
    int n, rank;
    int shape[MAX_RANK], strides[MAX_RANK];
};

// Output bytes per thread of `transpose`.
#define TRANS_RUN 16

// One thread = TRANS_RUN consecutive output bytes: the output index is split into
// coordinates once (32-bit divisions), then stepped like an odometer (no division per byte),
// and a full, 16-byte aligned run is written with one 16-byte store. The launch plan checks
// that n fits an i32 and sizes the grid for n / TRANS_RUN threads.
extern "C" __global__ void transpose(const TransP p) {
    int start = (blockIdx.x * blockDim.x + threadIdx.x) * TRANS_RUN;
    if (start >= p.n) return;
    int idx[MAX_RANK];
    int rem = start;
    int off = 0;
    for (int d = p.rank - 1; d >= 0; d--) {
        idx[d] = rem % p.shape[d];
        rem /= p.shape[d];
        off += idx[d] * p.strides[d];
    }
    const i8* x = (const i8*)p.x;
    i8* y = (i8*)p.y + start;
    int count = min(TRANS_RUN, p.n - start);
    unsigned words[TRANS_RUN / 4] = {0, 0, 0, 0};
#pragma unroll
    for (int k = 0; k < TRANS_RUN; k++) {
        if (k < count) {
            u8 v = (u8)x[off];
            words[k / 4] |= (unsigned)v << (8 * (k % 4));
            for (int d = p.rank - 1; d >= 0; d--) {
                off += p.strides[d];
                if (++idx[d] < p.shape[d]) break;
                off -= p.strides[d] * p.shape[d];
                idx[d] = 0;
            }
        }
    }
    if (count == TRANS_RUN && ((size_t)y % 16) == 0) {
        *(uint4*)y = make_uint4(words[0], words[1], words[2], words[3]);
    } else {
        for (int k = 0; k < count; k++) y[k] = (i8)(words[k / 4] >> (8 * (k % 4)));
    }
}

// One input of a concatenation: `outer` blocks of `inner` bytes, written at column `col` of
// blocks of `block` bytes, through `table` when it is not 0.
struct CatP {
    u64 x, y, table;
    int outer, inner, block, col;
};

extern "C" __global__ void concat_part(const CatP p) {
    long long n = (long long)p.outer * p.inner;
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    long long o = i / p.inner;
    int j = (int)(i % p.inner);
    i8 v = ((const i8*)p.x)[i];
    if (p.table) v = ((const i8*)p.table)[(u8)v];
    ((i8*)p.y)[o * p.block + p.col + j] = v;
}

// Dilation phases (kernels.rs `Phases`, dilation dh x dw): split = image -> phase images
// padded with `fill`; merge = phase images -> image.
struct PhaseP {
    u64 x, y;
    int dh, dw, h, w, c, batch, split, fill;
};

extern "C" __global__ void phases(const PhaseP p) {
    int ph = (p.h + p.dh - 1) / p.dh, pw = (p.w + p.dw - 1) / p.dw;
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    int ch = 0;
    if (p.split) {
        long long n = (long long)p.batch * p.dh * p.dw * ph * pw * p.c;
        if (i >= n) return;
        ch = (int)(i % p.c);
        long long t = i / p.c;
        int px = (int)(t % pw);
        t /= pw;
        int py = (int)(t % ph);
        long long img = t / ph;
        int b = (int)(img / (p.dh * p.dw)), phase = (int)(img % (p.dh * p.dw));
        int a = phase / p.dw, bx = phase % p.dw;
        int y = a + p.dh * py, x = bx + p.dw * px;
        i8 v = (i8)p.fill;
        if (y < p.h && x < p.w) v = ((const i8*)p.x)[(((size_t)b * p.h + y) * p.w + x) * p.c + ch];
        ((i8*)p.y)[i] = v;
    } else {
        long long n = (long long)p.batch * p.h * p.w * p.c;
        if (i >= n) return;
        ch = (int)(i % p.c);
        long long t = i / p.c;
        int x = (int)(t % p.w);
        t /= p.w;
        int y = (int)(t % p.h);
        int b = (int)(t / p.h);
        int a = y % p.dh, py = y / p.dh;
        long long img = ((long long)b * p.dh + a) * p.dw + x % p.dw;
        ((i8*)p.y)[i] = ((const i8*)p.x)[((img * ph + py) * pw + x / p.dw) * p.c + ch];
    }
}

// ONNX Pad of a tensor in its own memory layout (kernels.rs `pad`): output element i
// (row-major over `shape`) is the input element at sum_d map_d[coord_d] * in_strides[d]
// (bytes), or the fill where any dimension's map gives -1 (constant padding; reflect, edge
// and wrap are maps onto input coordinates). `maps`: every dimension's map, concatenated;
// dimension d's starts at maps[map_at[d]]. One thread per element of `elem` (1 to 4) bytes;
// `fill` holds the fill element's bytes, little-endian. 32-bit indices (the plan checks).
struct PadAnyP {
    u64 x, y, maps;
    int n, rank, elem, fill;
    int shape[MAX_RANK], in_strides[MAX_RANK], map_at[MAX_RANK];
};

extern "C" __global__ void pad_any(const PadAnyP p) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= p.n) return;
    const int* maps = (const int*)p.maps;
    int rem = i, off = 0;
    bool inside = true;
    for (int d = p.rank - 1; d >= 0; d--) {
        int c = rem % p.shape[d];
        rem /= p.shape[d];
        int m = maps[p.map_at[d] + c];
        if (m < 0) {
            inside = false;
        } else {
            off += m * p.in_strides[d];
        }
    }
    i8* y = (i8*)p.y + (size_t)i * p.elem;
    for (int k = 0; k < p.elem; k++) {
        y[k] = inside ? ((const i8*)p.x)[off + k] : (i8)(p.fill >> (8 * k));
    }
}

// One phase image of a ConvTranspose put in place (kernels.rs `DeconvMerge`, one launch per
// phase): pixel (qy, qx) of phase (ry, rx) is output pixel (qy*sh + ry - pt, qx*sw + rx - pl)
// when that lies inside the output. Every output pixel comes from exactly one phase.
struct DeconvP {
    u64 x, y;
    int batch, c, sh, sw, ry, rx, pt, pl, ph, pw, out_h, out_w;
};

extern "C" __global__ void deconv_phase(const DeconvP p) {
    int n = p.batch * p.ph * p.pw * p.c;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int ch = i % p.c;
    int t = i / p.c;
    int qx = t % p.pw;
    t /= p.pw;
    int qy = t % p.ph;
    int b = t / p.ph;
    int oy = qy * p.sh + p.ry - p.pt, ox = qx * p.sw + p.rx - p.pl;
    if (oy < 0 || oy >= p.out_h || ox < 0 || ox >= p.out_w) return;
    ((i8*)p.y)[((b * p.out_h + oy) * p.out_w + ox) * p.c + ch] = ((const i8*)p.x)[i];
}

// Resize of NHWC images through per-row / per-column taps {i0, i1, w1}.
// mode 0: nearest; 1: linear as ONNX Runtime runs a QDQ Resize (each corner dequantized,
// its float bilinear formula with 0.5/0.5 where both taps are one pixel, v / y_scale rounded
// half to even, + y_zp, clamped to [lo, hi]); 2: raw, ONNX Runtime's integer bilinear
// (10-bit weights; truncated, `floor_` for uint8 stored as x ^ 0x80).
struct Tap {
    int i0, i1;
    float w1;
};

struct ResizeP {
    u64 x, y, ys, xs;
    int in_h, in_w, c, batch, out_h, out_w, mode, floor_, x_zp, y_zp;
    float x_scale, y_scale;
    int lo, hi;
};

extern "C" __global__ void resize(const ResizeP p) {
    long long n = (long long)p.batch * p.out_h * p.out_w * p.c;
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int ch = (int)(i % p.c);
    long long t = i / p.c;
    int ox = (int)(t % p.out_w);
    t /= p.out_w;
    int oy = (int)(t % p.out_h);
    int b = (int)(t / p.out_h);
    Tap ty = ((const Tap*)p.ys)[oy], tx = ((const Tap*)p.xs)[ox];
    const i8* x = (const i8*)p.x + (size_t)b * p.in_h * p.in_w * p.c + ch;
    size_t p00 = ((size_t)ty.i0 * p.in_w + tx.i0) * p.c;
    size_t p01 = ((size_t)ty.i0 * p.in_w + tx.i1) * p.c;
    size_t p10 = ((size_t)ty.i1 * p.in_w + tx.i0) * p.c;
    size_t p11 = ((size_t)ty.i1 * p.in_w + tx.i1) * p.c;
    float wy1 = ty.w1, wx1 = tx.w1;
    float wy0 = __fadd_rn(1.0f, -wy1), wx0 = __fadd_rn(1.0f, -wx1);
    int r;
    if (p.mode == 0) {
        r = x[p00];
    } else if (p.mode == 2) {
        // ONNX Runtime's integer weights: floor(w1 * 1024) a tap (512 where both taps are
        // one pixel), products of 20 bits summing to 2^20; the sum divided truncating toward
        // zero, or floored for uint8 (as kernels::Tap::weight_s10 and Interp::Raw).
        int dx = tx.i0 == tx.i1 ? 512 : (int)(wx1 * 1024.0f);
        int dy = ty.i0 == ty.i1 ? 512 : (int)(wy1 * 1024.0f);
        int sum = (1024 - dx) * (1024 - dy) * (int)x[p00] + dx * (1024 - dy) * (int)x[p01] +
                  (1024 - dx) * dy * (int)x[p10] + dx * dy * (int)x[p11];
        r = p.floor_ ? (sum >> 20) : (sum / (1 << 20));
    } else {
        if (tx.i0 == tx.i1) { wx0 = 0.5f; wx1 = 0.5f; }
        if (ty.i0 == ty.i1) { wy0 = 0.5f; wy1 = 0.5f; }
        float w00 = __fmul_rn(wx0, wy0), w01 = __fmul_rn(wx1, wy0);
        float w10 = __fmul_rn(wx0, wy1), w11 = __fmul_rn(wx1, wy1);
        float v00 = __fmul_rn((float)(x[p00] - p.x_zp), p.x_scale);
        float v01 = __fmul_rn((float)(x[p01] - p.x_zp), p.x_scale);
        float v10 = __fmul_rn((float)(x[p10] - p.x_zp), p.x_scale);
        float v11 = __fmul_rn((float)(x[p11] - p.x_zp), p.x_scale);
        float v = __fmul_rn(w00, v00);
        v = __fadd_rn(v, __fmul_rn(w01, v01));
        v = __fadd_rn(v, __fmul_rn(w10, v10));
        v = __fadd_rn(v, __fmul_rn(w11, v11));
        r = requant(__fdiv_rn(v, p.y_scale), p.y_zp, p.lo, p.hi);
    }
    ((i8*)p.y)[i] = (i8)r;
}
