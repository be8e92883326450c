/* What the attention tests (tests/test_nn_attention_*.c) share: a tensor's values as doubles,
 * and the (B,H,L,Dh) queries, keys and values the torch references were computed from. */
#ifndef AG_TESTS_NN_ATTENTION_UTIL_H
#define AG_TESTS_NN_ATTENTION_UTIL_H
#include "test_util.h"

/* t's elements as doubles, in row-major order (arena memory) */
static inline double *values(const ag_tensor *t) {
    double *v = ag_arena_alloc(ag_arena_current(), sizeof(double) * (size_t)(ag_numel(t) + 1));
    ag_to_buffer(t, AG_F64, v);
    return v;
}

enum { B_ = 2, H_ = 2, L_ = 3, S_ = 4, DH = 2, DV = 3 };

typedef struct {
    ag_tensor *q, *k, *v;
} qkv;

/* q = tu_seq((2,2,3,2), 0.37, 0.1), k = tu_seq((2,2,4,2), 0.53, 0.7), v = tu_seq((2,2,4,3), 0.29, 1.1) */
static inline qkv inputs(ag_dtype dt) {
    return (qkv){tu_seq(dt, AG_SHAPE(B_, H_, L_, DH), 0.37, 0.1), tu_seq(dt, AG_SHAPE(B_, H_, S_, DH), 0.53, 0.7),
                 tu_seq(dt, AG_SHAPE(B_, H_, S_, DV), 0.29, 1.1)};
}

#endif
