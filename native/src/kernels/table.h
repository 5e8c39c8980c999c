/* table.h - the per-type entries of a kernel table, around the including tier's generic
 * quantize_act, matmul(type, ...), dequant(type, ...) and axpy_rows(type, ...). Included at the
 * end of ref.c, avx2.c and avx512.c, so each tier instantiates them under its own instruction
 * set: one named function per type lets the compiler specialise the generic loops. */
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

static void dequant_f32(const void *row, float *y, int n) { dequant(PI_TYPE_F32, row, y, n); }
static void dequant_f16(const void *row, float *y, int n) { dequant(PI_TYPE_F16, row, y, n); }
static void dequant_bf16(const void *row, float *y, int n) { dequant(PI_TYPE_BF16, row, y, n); }
static void dequant_q4_0(const void *row, float *y, int n) { dequant(PI_TYPE_Q4_0, row, y, n); }
static void dequant_q4_1(const void *row, float *y, int n) { dequant(PI_TYPE_Q4_1, row, y, n); }
static void dequant_q5_0(const void *row, float *y, int n) { dequant(PI_TYPE_Q5_0, row, y, n); }
static void dequant_q5_1(const void *row, float *y, int n) { dequant(PI_TYPE_Q5_1, row, y, n); }
static void dequant_q8_0(const void *row, float *y, int n) { dequant(PI_TYPE_Q8_0, row, y, n); }

static void axpy_rows_f32(const void *W, size_t rb, const int32_t *rows, const float *a, int n, float *y, int d) { axpy_rows(PI_TYPE_F32, W, rb, rows, a, n, y, d); }
static void axpy_rows_f16(const void *W, size_t rb, const int32_t *rows, const float *a, int n, float *y, int d) { axpy_rows(PI_TYPE_F16, W, rb, rows, a, n, y, d); }
static void axpy_rows_bf16(const void *W, size_t rb, const int32_t *rows, const float *a, int n, float *y, int d) { axpy_rows(PI_TYPE_BF16, W, rb, rows, a, n, y, d); }
static void axpy_rows_q4_0(const void *W, size_t rb, const int32_t *rows, const float *a, int n, float *y, int d) { axpy_rows(PI_TYPE_Q4_0, W, rb, rows, a, n, y, d); }
static void axpy_rows_q4_1(const void *W, size_t rb, const int32_t *rows, const float *a, int n, float *y, int d) { axpy_rows(PI_TYPE_Q4_1, W, rb, rows, a, n, y, d); }
static void axpy_rows_q5_0(const void *W, size_t rb, const int32_t *rows, const float *a, int n, float *y, int d) { axpy_rows(PI_TYPE_Q5_0, W, rb, rows, a, n, y, d); }
static void axpy_rows_q5_1(const void *W, size_t rb, const int32_t *rows, const float *a, int n, float *y, int d) { axpy_rows(PI_TYPE_Q5_1, W, rb, rows, a, n, y, d); }
static void axpy_rows_q8_0(const void *W, size_t rb, const int32_t *rows, const float *a, int n, float *y, int d) { axpy_rows(PI_TYPE_Q8_0, W, rb, rows, a, n, y, d); }

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
    k->dequant[PI_TYPE_F32] = dequant_f32;
    k->dequant[PI_TYPE_F16] = dequant_f16;
    k->dequant[PI_TYPE_BF16] = dequant_bf16;
    k->dequant[PI_TYPE_Q4_0] = dequant_q4_0;
    k->dequant[PI_TYPE_Q4_1] = dequant_q4_1;
    k->dequant[PI_TYPE_Q5_0] = dequant_q5_0;
    k->dequant[PI_TYPE_Q5_1] = dequant_q5_1;
    k->dequant[PI_TYPE_Q8_0] = dequant_q8_0;
    k->axpy_rows[PI_TYPE_F32] = axpy_rows_f32;
    k->axpy_rows[PI_TYPE_F16] = axpy_rows_f16;
    k->axpy_rows[PI_TYPE_BF16] = axpy_rows_bf16;
    k->axpy_rows[PI_TYPE_Q4_0] = axpy_rows_q4_0;
    k->axpy_rows[PI_TYPE_Q4_1] = axpy_rows_q4_1;
    k->axpy_rows[PI_TYPE_Q5_0] = axpy_rows_q5_0;
    k->axpy_rows[PI_TYPE_Q5_1] = axpy_rows_q5_1;
    k->axpy_rows[PI_TYPE_Q8_0] = axpy_rows_q8_0;
}

#endif
