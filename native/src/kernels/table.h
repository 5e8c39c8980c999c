/* table.h - the per-type entries of a SIMD tier's kernel table, around that tier's generic
 * matmul(type, ...) and quantize_act. Included at the end of avx2.c and avx512.c, so each tier
 * compiles them under its own instruction set. */
#ifndef PI_KERNELS_TABLE_H
#define PI_KERNELS_TABLE_H

static void matmul_f32(const void *W, size_t rb, const int32_t *idx, int r0, int nr, pi_act x, int nt, float *Y, int ys) { matmul(PI_TYPE_F32, W, rb, idx, r0, nr, x, nt, Y, ys); }
static void matmul_f16(const void *W, size_t rb, const int32_t *idx, int r0, int nr, pi_act x, int nt, float *Y, int ys) { matmul(PI_TYPE_F16, W, rb, idx, r0, nr, x, nt, Y, ys); }
static void matmul_bf16(const void *W, size_t rb, const int32_t *idx, int r0, int nr, pi_act x, int nt, float *Y, int ys) { matmul(PI_TYPE_BF16, W, rb, idx, r0, nr, x, nt, Y, ys); }
static void matmul_q4_0(const void *W, size_t rb, const int32_t *idx, int r0, int nr, pi_act x, int nt, float *Y, int ys) { matmul(PI_TYPE_Q4_0, W, rb, idx, r0, nr, x, nt, Y, ys); }
static void matmul_q4_1(const void *W, size_t rb, const int32_t *idx, int r0, int nr, pi_act x, int nt, float *Y, int ys) { matmul(PI_TYPE_Q4_1, W, rb, idx, r0, nr, x, nt, Y, ys); }
static void matmul_q5_0(const void *W, size_t rb, const int32_t *idx, int r0, int nr, pi_act x, int nt, float *Y, int ys) { matmul(PI_TYPE_Q5_0, W, rb, idx, r0, nr, x, nt, Y, ys); }
static void matmul_q5_1(const void *W, size_t rb, const int32_t *idx, int r0, int nr, pi_act x, int nt, float *Y, int ys) { matmul(PI_TYPE_Q5_1, W, rb, idx, r0, nr, x, nt, Y, ys); }
static void matmul_q8_0(const void *W, size_t rb, const int32_t *idx, int r0, int nr, pi_act x, int nt, float *Y, int ys) { matmul(PI_TYPE_Q8_0, W, rb, idx, r0, nr, x, nt, Y, ys); }

static void fill_table(pi_kernels *k, const char *name) {
    k->name = name;
    k->quantize_act = quantize_act;
    k->matmul[PI_TYPE_F32] = matmul_f32;
    k->matmul[PI_TYPE_F16] = matmul_f16;
    k->matmul[PI_TYPE_BF16] = matmul_bf16;
    k->matmul[PI_TYPE_Q4_0] = matmul_q4_0;
    k->matmul[PI_TYPE_Q4_1] = matmul_q4_1;
    k->matmul[PI_TYPE_Q5_0] = matmul_q5_0;
    k->matmul[PI_TYPE_Q5_1] = matmul_q5_1;
    k->matmul[PI_TYPE_Q8_0] = matmul_q8_0;
    set_axpy_and_dequant(k);
}

#endif
