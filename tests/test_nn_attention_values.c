/* Masked softmax and fused attention (nn/attention/attention.h): values against PyTorch 1.13 for
 * each mask kind, masks merged as F.multi_head_attention_forward merges them, fully masked
 * rows, strided layouts, dropout from a seed and none in eval, gradcheck and misuse reporting.
 * Expected values were computed with PyTorch 1.13 (/usr/bin/python3) in float64 and pasted as
 * literals; each block names the torch expression. Inputs are tu_seq(shape, a, c)[i] = sin(a*i + c) in row-major order, in
 * torch: torch.sin(torch.arange(n, dtype=torch.float64) * a + c).reshape(shape). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../nn/nn_internal.h"
#include "../tensor/internal.h"
#include "nn_attention_util.h"

#define NINF (-INFINITY)
#define tensor_of(dt, dims, ...)                                                                   \
    tu_tensor_((dt), AG_SHAPE dims, (const double[]){__VA_ARGS__},                                 \
               (int64_t)(sizeof((const double[]){__VA_ARGS__}) / sizeof(double)))

static void assert_no_nan(const ag_tensor *t) {
    double *v = values(t);
    for (int64_t i = 0; i < ag_numel(t); i++)
        if (isnan(v[i])) fail_msg("element %lld is NaN", (long long)i);
}

static ag_tensor *bool_of(int ndim, const int64_t *shape, const int *bits) {
    ag_tensor *m = ag_empty(AG_BOOL, ndim, shape);
    for (int64_t i = 0; i < ag_numel(m); i++) ((uint8_t *)m->data)[i] = (uint8_t)bits[i];
    return m;
}

static void assert_gradcheck(ag_fn f, void *ctx, int n, ag_tensor **in) {
    ag_gradcheck_result r = ag_gradcheck(f, ctx, n, in, NULL);
    if (!r.ok) fail_msg("%s", r.message);
}

/* (B,L,H*Dh) -> (B,H,L,Dh) without copying, as multi-head attention splits heads */
static ag_tensor *split_heads(ag_tensor *x, int64_t H) {
    int64_t B = x->shape[0], L = x->shape[1], Dh = x->shape[2] / H;
    return ag_transpose(ag_view(x, AG_SHAPE(B, L, H, Dh)), 1, 2);
}

/* ---- masked softmax ---- */

static void test_masked_softmax_bool_mask_excludes_true_positions(void **s) {
    /* F.softmax(x.masked_fill(m, -inf), -1), x = tu_seq((2,4), 0.9, 0.3) * 3 */
    static const double want[] = {0.140448830898, 0, 0.771171440071, 0.0883797290307, 0, 0.208096570502,
                                  0.791903429498, 0};
    static const int bits[] = {0, 1, 0, 0, 1, 0, 0, 1};
    for (int k = 0; k < 2; k++) {
        ag_dtype dt = k ? AG_F32 : AG_F64;
        ag_tensor *x = ag_mul_scalar(tu_seq(dt, AG_SHAPE(2, 4), 0.9, 0.3), 3);
        ag_tensor *y = ag_masked_softmax(x, bool_of(AG_SHAPE(2, 4), bits), -1);
        tu_assert_shape(y, 2, 4);
        tu_assert_array(y, want, dt == AG_F32 ? 1e-6 : 1e-11);
    }
}

static void test_masked_softmax_float_mask_is_added_and_broadcast(void **s) {
    /* F.softmax(x + fm, -1), x = tu_seq((2,4), 0.9, 0.3) * 3, fm = [0, -1.5, -inf, 0.25] */
    static const double want[] = {0.301737048161, 0.454461215053, 0, 0.243801736786, 0.0372782706742,
                                  0.00329766701166, 0, 0.959424062314};
    ag_tensor *x = ag_mul_scalar(tu_seq(AG_F64, AG_SHAPE(2, 4), 0.9, 0.3), 3);
    tu_assert_array(ag_masked_softmax(x, tensor_of(AG_F64, (4), 0, -1.5, NINF, 0.25), 1), want, 1e-11);
    /* along dim 0 of a transposed (non-contiguous) input: F.softmax(x + fm, 0),
     * x = tu_seq((3,2), 0.7, 0.1) * 2, fm = [[0.5], [-inf], [1.0]] */
    static const double want0[] = {0.314571709085, 0.860536494565, 0, 0, 0.685428290915, 0.139463505435};
    ag_tensor *x0 = ag_mul_scalar(tu_seq(AG_F64, AG_SHAPE(3, 2), 0.7, 0.1), 2);
    ag_tensor *xt = ag_transpose(ag_contiguous(ag_transpose(x0, 0, 1)), 0, 1);
    assert_false(ag_is_contiguous(xt));
    tu_assert_array(ag_masked_softmax(xt, tensor_of(AG_F64, (3, 1), 0.5, NINF, 1.0), 0), want0, 1e-11);
}

static void test_masked_softmax_fully_masked_row_gives_zeros_and_zero_grad(void **s) {
    /* torch: F.softmax(x.masked_fill(m, -inf), -1) gives NaN for row 0; row 1 and its grad
     * (g = tu_seq((2,3), 1.3, 0.4)[1]) from torch autograd on that row alone. */
    static const double want[] = {0, 0, 0, 0.637443409586, 0, 0.362556590414};
    static const double want_dx[] = {0, 0, 0, -0.345417291059, 0, 0.345417291059};
    static const int bits[] = {1, 1, 1, 0, 1, 0};
    ag_tensor *x = tu_leaf(tu_seq(AG_F64, AG_SHAPE(2, 3), 0.5, 0.2));
    ag_tensor *y = ag_masked_softmax(x, bool_of(AG_SHAPE(2, 3), bits), -1);
    tu_assert_array(y, want, 1e-11);
    ag_backward(y, tu_seq(AG_F64, AG_SHAPE(2, 3), 1.3, 0.4));
    tu_assert_array(x->grad, want_dx, 1e-11);
    double *g = values(x->grad);
    assert_true(g[0] == 0 && g[1] == 0 && g[2] == 0);
    /* the same with a float mask of -inf over the whole row, in f32 */
    ag_tensor *x32 = tu_leaf(tu_seq(AG_F32, AG_SHAPE(2, 3), 0.5, 0.2));
    ag_tensor *fm = tensor_of(AG_F32, (2, 3), NINF, NINF, NINF, 0, NINF, 0);
    ag_tensor *y32 = ag_masked_softmax(x32, fm, 1);
    tu_assert_array(y32, want, 1e-6);
    ag_backward(y32, tu_seq(AG_F32, AG_SHAPE(2, 3), 1.3, 0.4));
    tu_assert_array(x32->grad, want_dx, 1e-6);
    assert_no_nan(x32->grad);
}

static ag_tensor *f_msm(int n, ag_tensor **in, void *ctx) {
    ag_tensor *mask = n > 1 ? in[1] : ctx;
    return ag_masked_softmax(in[0], mask, -1);
}
static ag_tensor *f_msm_dim0_transposed(int n, ag_tensor **in, void *ctx) {
    return ag_masked_softmax(ag_transpose(in[0], 0, 1), ctx, 0);
}

static void test_masked_softmax_passes_gradcheck_for_each_mask_kind(void **s) {
    ag_rng r = ag_rng_new(11);
    ag_tensor *x = tu_leaf(ag_uniform(&r, AG_F64, AG_SHAPE(3, 4), -2, 2));
    static const int bits[] = {0, 1, 0, 0, 1, 1, 1, 1, 0, 0, 1, 0}; /* row 1 fully masked */
    assert_gradcheck(f_msm, NULL, 1, &x);
    assert_gradcheck(f_msm, bool_of(AG_SHAPE(3, 4), bits), 1, &x);
    /* float mask with -inf (a fully masked row too), held fixed */
    ag_tensor *fm = tensor_of(AG_F64, (3, 4), 0, NINF, 0.5, -1, NINF, NINF, NINF, NINF, 2, 0, 0, -0.5);
    assert_gradcheck(f_msm, fm, 1, &x);
    /* a broadcast float mask receives the gradient summed over the rows */
    ag_tensor *in[2] = {x, tu_leaf(tensor_of(AG_F64, (4), 0.3, -1, 0.5, 0))};
    assert_gradcheck(f_msm, NULL, 2, in);
    /* softmax along dim 0 of a transposed view, mask (4,1) broadcast along dim 1 */
    ag_tensor *xt = tu_leaf(ag_uniform(&r, AG_F64, AG_SHAPE(3, 4), -2, 2));
    assert_gradcheck(f_msm_dim0_transposed, tensor_of(AG_F64, (4, 1), 0, NINF, 1, 0.5), 1, &xt);
}

/* ---- attention values ---- */

static ag_tensor *attend(qkv x, ag_tensor *mask, bool causal) {
    return ag_attention(x.q, x.k, x.v, mask, causal, 0, NULL, false, NULL);
}

/* torch reference for B1..B6: s = q @ k.transpose(-2,-1) / math.sqrt(2); s = s.masked_fill(boolm,
 * -inf) or s + floatm; (F.softmax(s, -1) @ v) */
static const double B1[] = {
    0.546133546303, 0.433524477687, 0.284710804953, 0.73458183938, 0.654047191524, 0.518891591768,
    0.75709330148, 0.677938557043, 0.542167639041, 0.0950386150903, 0.290241050937, 0.461204803876,
    -0.268731825446, -0.114154101518, 0.0499568881576, -0.64826214339, -0.551518556088, -0.408716413816,
    0.0653549321226, -0.152707405089, -0.358016803467, 0.0393181738445, -0.166743005693, -0.358879101824,
    -0.000481387901073, -0.172282711272, -0.329696317966, -0.204505794315, -0.00222073469995, 0.200249783465,
    -0.326161606996, -0.109183231807, 0.116913280621, -0.266514932148, -0.053373839737, 0.164224622067};
/* boolm = [[0,1,0,0],[0,0,0,1],[1,1,0,0]] (L,S) */
static const int B2_MASK[] = {0, 1, 0, 0, 0, 0, 0, 1, 1, 1, 0, 0};
static const double B2[] = {
    0.379695789593, 0.283502221706, 0.163632745694, 0.808689679902, 0.736188204158, 0.602205995816,
    0.102281455628, -0.167560964995, -0.423409992591, 0.26959131625, 0.458939329307, 0.60996028683,
    -0.604590317508, -0.446437923726, -0.251002494906, 0.420964392539, 0.633093525053, 0.792351593479,
    -0.199369891193, -0.382894148303, -0.534442053969, 0.212591626648, -0.0205392908735, -0.251954926022,
    -0.647796187597, -0.802264598551, -0.889734088606, -0.231213793373, -0.0763964504778, 0.0848009318104,
    -0.381446401851, -0.153528436653, 0.0872110335721, 0.751171245611, 0.874492077111, 0.924782108541};
/* floatm = [[0,-1,-inf,0.5],[-inf,0.25,0,0],[0,0,0,-2]] (L,S) */
static const double B3[] = {
    0.357764349701, 0.29362823852, 0.204970572777, 0.681241117319, 0.498138072172, 0.273434396319,
    0.807681618269, 0.733969159186, 0.598961284941, 0.458117820373, 0.591924962136, 0.676299119087,
    -0.0454527557539, 0.170693948797, 0.372585617798, -0.788789428972, -0.69660593723, -0.546247317021,
    0.0345729290909, -0.100567928584, -0.227310132369, -0.0601881164466, -0.289552479755, -0.494735664284,
    0.265400073252, 0.0599345592999, -0.15053622449, -0.329512827443, -0.173412925222, -0.00283091961401,
    0.056153975159, 0.307445685829, 0.533061915838, -0.329532477455, -0.103525302916, 0.131127502496};
/* boolm = [[0,0,1,1],[0,0,0,1]] viewed (B,1,1,S) */
static const int B4_MASK[] = {0, 0, 1, 1, 0, 0, 0, 1};
static const double B4[] = {
    0.906009800406, 0.879689161956, 0.779903703192, 0.906682121378, 0.874964993915, 0.770177572037,
    0.907148091316, 0.871690783564, 0.763436618066, -0.825700575547, -0.677338165693, -0.472409722305,
    -0.875389582247, -0.770463908074, -0.601195060184, -0.91805482061, -0.850425900882, -0.711776001585,
    0.1922136869, -0.0466609263185, -0.281638780641, 0.212591626648, -0.0205392908735, -0.251954926022,
    0.321149218251, 0.10862510821, -0.112970528913, -0.316836151441, -0.091448712053, 0.141575814944,
    -0.381446401851, -0.153528436653, 0.0872110335721, -0.339967908959, -0.111830167161, 0.125646763401};
/* boolm = torch.ones(3,4, dtype=torch.bool).triu(1); identical to
 * torch._C._nn._scaled_dot_product_attention(q, k, v, None, 0.0, True, is_causal=True) */
static const double B6[] = {
    0.891207360061, 0.983700814811, 0.994043202198, 0.906682121378, 0.874964993915, 0.770177572037,
    0.815959398225, 0.743137461765, 0.608254444576, -0.991249371052, -0.98760507392, -0.901483655966,
    -0.875389582247, -0.770463908074, -0.601195060184, -0.813312825296, -0.721925115172, -0.570247815089,
    0.978853170999, 0.879484497531, 0.706668095736, 0.623801899686, 0.403186009664, 0.148899149219,
    0.321149218251, 0.10862510821, -0.112970528913, -0.855424870813, -0.671603289325, -0.431694606727,
    -0.525763180906, -0.292402362007, -0.0346223642518, -0.339967908959, -0.111830167161, 0.125646763401};

static void test_attention_matches_torch_without_mask_for_cross_attention_with_dv_not_dh(void **s) {
    ag_tensor *o = attend(inputs(AG_F64), NULL, false);
    tu_assert_shape(o, B_, H_, L_, DV);
    tu_assert_array(o, B1, 1e-11);
    tu_assert_array(attend(inputs(AG_F32), NULL, false), B1, 2e-6);
}

static void test_attention_bool_mask_excludes_true_positions(void **s) {
    tu_assert_array(attend(inputs(AG_F64), bool_of(AG_SHAPE(L_, S_), B2_MASK), false), B2, 1e-11);
    tu_assert_array(attend(inputs(AG_F32), bool_of(AG_SHAPE(L_, S_), B2_MASK), false), B2, 2e-6);
}

static void test_attention_float_mask_is_added_to_the_scores(void **s) {
    ag_tensor *fm = tensor_of(AG_F64, (L_, S_), 0, -1, NINF, 0.5, NINF, 0.25, 0, 0, 0, 0, 0, -2);
    tu_assert_array(attend(inputs(AG_F64), fm, false), B3, 1e-11);
    tu_assert_array(attend(inputs(AG_F32), ag_to(fm, AG_F32), false), B3, 2e-6);
}

static void test_attention_key_padding_mask_broadcasts_from_b_1_1_s(void **s) {
    tu_assert_array(attend(inputs(AG_F64), bool_of(AG_SHAPE(B_, 1, 1, S_), B4_MASK), false), B4, 1e-11);
}

static void test_attention_causal_flag_masks_keys_after_the_query_top_left_aligned(void **s) {
    tu_assert_array(attend(inputs(AG_F64), NULL, true), B6, 1e-11);
    /* with L == S the flag equals generate_square_subsequent_mask */
    qkv x = inputs(AG_F64);
    x.k = ag_narrow(x.k, 2, 0, 3);
    x.v = ag_narrow(x.v, 2, 0, 3);
    double *a = values(attend(x, NULL, true)), *b = values(attend(x, ag_square_subsequent_mask(3, AG_F64), false));
    assert_memory_equal(a, b, sizeof(double) * B_ * H_ * 3 * DV);
}

static void test_square_subsequent_mask_and_causal_bool_mask_match_torch(void **s) {
    /* torch.nn.Transformer.generate_square_subsequent_mask(3) */
    tu_assert_values(ag_square_subsequent_mask(3, AG_F32), 0, 0, NINF, NINF, 0, 0, NINF, 0, 0, 0);
    tu_assert_values(ag_causal_bool_mask(3), 0, 0, 1, 1, 0, 0, 1, 0, 0, 0);
    tu_assert_shape(ag_square_subsequent_mask(0, AG_F64), 0, 0);
}

/* ---- masks merged as F.multi_head_attention_forward merges them ---- */

/* torch: F.multi_head_attention_forward(xq.T(0,1), xk.T(0,1), xv.T(0,1), 4, 2, cat([eye(4)]*3),
 * zeros(12), None, None, False, 0.0, eye(4), zeros(4), training=False, key_padding_mask=kpm,
 * need_weights=True, attn_mask=am, average_attn_weights=False), output transposed to (B,L,E);
 * xq = tu_seq((2,3,4), 0.41, 0.2), xk = tu_seq((2,4,4), 0.23, 0.9), xv = tu_seq((2,4,4), 0.61, 0.5),
 * kpm = [[0,0,0,1],[1,0,0,0]] bool. */
static const int KPM[] = {0, 0, 0, 1, 1, 0, 0, 0};
static ag_tensor *mha_like(ag_tensor *am, ag_tensor *kpm, ag_tensor **w) {
    ag_tensor *q = split_heads(tu_seq(AG_F64, AG_SHAPE(2, 3, 4), 0.41, 0.2), 2);
    ag_tensor *k = split_heads(tu_seq(AG_F64, AG_SHAPE(2, 4, 4), 0.23, 0.9), 2);
    ag_tensor *v = split_heads(tu_seq(AG_F64, AG_SHAPE(2, 4, 4), 0.61, 0.5), 2);
    ag_tensor *o = ag_attention(q, k, v, ag_attention_mask(am, kpm, 2, 2), false, 0, NULL, false, w);
    return ag_reshape(ag_transpose(o, 1, 2), AG_SHAPE(2, 3, 4));
}

static void test_float_attn_mask_and_bool_key_padding_mask_combine_as_in_torch_mha(void **s) {
    /* am = [[0,-1,-inf,0.5],[-inf,0.25,0,0],[0.75,0,0,-2]] */
    static const double want[] = {
        0.403280105789, 0.543098575062, 0.630264761798, 0.389451674862, -0.0574452404458, -0.368872793441,
        -0.429052183721, -0.345463156679, -0.00375174648556, 0.228695311013, 0.269700237492, 0.455916207663,
        -0.345436569978, 0.109648461387, 0.181153435507, 0.619756609537, -0.31694627652, -0.212639940203,
        -0.100321247875, 0.0879932037598, 0.19916622738, 0.0453613563623, 0.16696119867, 0.018073684041};
    static const double want_w[] = {
        0.727268461992, 0.272731538008, 0, 0, 0, 0.738542248762, 0.261457751238, 0, 0.45596332433,
        0.207888940718, 0.336147734952, 0, 0.805112388592, 0.194887611408, 0, 0, 0, 0.636897268487,
        0.363102731513, 0, 0.248814424687, 0.18091890947, 0.570266665843, 0, 0, 0.560128588523, 0,
        0.439871411477, 0, 0.178785173808, 0.297054729517, 0.524160096675, 0, 0.24824536343, 0.592138224875,
        0.159616411695, 0, 0.224832760707, 0, 0.775167239293, 0, 0.131720943783, 0.333657359326,
        0.534621696891, 0, 0.46574847894, 0.469041505802, 0.0652100152582};
    ag_tensor *am = tensor_of(AG_F64, (3, 4), 0, -1, NINF, 0.5, NINF, 0.25, 0, 0, 0.75, 0, 0, -2);
    ag_tensor *kpm = bool_of(AG_SHAPE(2, 4), KPM), *w = NULL;
    ag_tensor *m = ag_attention_mask(am, kpm, 2, 2);
    assert_int_equal(m->dtype, AG_F64);
    tu_assert_shape(m, 2, 1, 3, 4);
    tu_assert_array(mha_like(am, kpm, &w), want, 1e-11);
    tu_assert_shape(w, 2, 2, 3, 4);
    tu_assert_array(w, want_w, 1e-11);
}

static void test_bool_masks_and_3d_attn_mask_combine_as_in_torch_mha(void **s) {
    /* am = [[0,1,0,0],[0,0,1,0],[0,0,0,1]] bool */
    static const double want_b[] = {
        -0.0426794623119, 0.406630307389, 0.867678121542, 0.738685257037, 0.331652794081, 0.211420139498,
        0.111299367392, -0.0966757580981, -0.156820859787, 0.0173906444233, 0.161014435616, 0.415193471804,
        0.0646639309743, -0.222952353133, -0.340996141392, -0.244733516438, -0.726570898251, -0.342069677041,
        0.115648650811, 0.594713624243, 0.418374403752, 0.170361325676, 0.182063801865, -0.0177467752181};
    static const int am_bits[] = {0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1};
    ag_tensor *kpm = bool_of(AG_SHAPE(2, 4), KPM);
    ag_tensor *m = ag_attention_mask(bool_of(AG_SHAPE(3, 4), am_bits), kpm, 2, 2);
    assert_int_equal(m->dtype, AG_BOOL);
    tu_assert_array(mha_like(bool_of(AG_SHAPE(3, 4), am_bits), kpm, NULL), want_b, 1e-11);
    /* am3 = zeros(4,3,4) bool; am3[1,0,1] = am3[2,2,0] = am3[3,1,3] = True */
    static const double want_3[] = {
        0.0482746605465, 0.105666441927, 0.867678121542, 0.738685257037, 0.115036179202, 0.114370652802,
        0.163116726504, 0.135285699295, -0.156820859787, 0.0173906444233, 0.161014435616, 0.415193471804,
        0.108823028248, 0.356609751567, 0.163249504326, 0.202506435881, -0.335482600284, -0.249269825625,
        -0.234481516499, -0.511433808435, -0.383557940598, -0.286927814239, 0.103289565022, 0.169090507405};
    int bits3[48] = {0};
    bits3[1 * 12 + 0 * 4 + 1] = bits3[2 * 12 + 2 * 4 + 0] = bits3[3 * 12 + 1 * 4 + 3] = 1;
    tu_assert_array(mha_like(bool_of(AG_SHAPE(4, 3, 4), bits3), kpm, NULL), want_3, 1e-11);
    /* key padding alone */
    static const double want_k[] = {
        0.0482746605465, 0.105666441927, 0.264750490463, 0.129417875781, 0.115036179202, 0.114370652802,
        0.163116726504, 0.135285699295, -0.156820859787, 0.0173906444233, 0.161014435616, 0.415193471804,
        0.108823028248, 0.356609751567, 0.163249504326, 0.202506435881, -0.335482600284, -0.249269825625,
        -0.132638069972, 0.0629089690978, -0.383557940598, -0.286927814239, 0.103289565022, 0.169090507405};
    tu_assert_array(mha_like(NULL, kpm, NULL), want_k, 1e-11);
    assert_null(ag_attention_mask(NULL, NULL, 2, 2));
}

/* ---- fully masked rows ---- */

static void test_attention_fully_masked_row_gives_zero_output_and_zero_grad(void **s) {
    static const int bits[] = {0, 1, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1}; /* query 2 sees nothing */
    qkv x = inputs(AG_F64);
    tu_leaf(x.q);
    tu_leaf(x.k);
    tu_leaf(x.v);
    ag_tensor *mask = bool_of(AG_SHAPE(L_, S_), bits);
    ag_tensor *o = attend(x, mask, false);
    ag_backward(o, tu_seq(AG_F64, AG_SHAPE(B_, H_, L_, DV), 1.7, 0.3));
    double *ov = values(o), *dq = values(x.q->grad);
    for (int bh = 0; bh < B_ * H_; bh++) {
        for (int j = 0; j < DV; j++) assert_true(ov[(bh * L_ + 2) * DV + j] == 0);
        for (int j = 0; j < DH; j++) assert_true(dq[(bh * L_ + 2) * DH + j] == 0);
    }
    assert_no_nan(o);
    assert_no_nan(x.q->grad);
    assert_no_nan(x.k->grad);
    assert_no_nan(x.v->grad);
    /* the masked query contributes nothing: dk, dv equal those of the first two queries alone */
    qkv y = inputs(AG_F64);
    ag_tensor *q2 = tu_leaf(ag_contiguous(ag_narrow(y.q, 2, 0, 2)));
    tu_leaf(y.k);
    tu_leaf(y.v);
    ag_tensor *o2 = ag_attention(q2, y.k, y.v, ag_narrow(mask, 0, 0, 2), false, 0, NULL, false, NULL);
    ag_backward(o2, ag_narrow(tu_seq(AG_F64, AG_SHAPE(B_, H_, L_, DV), 1.7, 0.3), 2, 0, 2));
    int64_t nk = B_ * H_ * S_ * DH, nv = B_ * H_ * S_ * DV;
    tu_assert_values_(__FILE__, __LINE__, x.k->grad, values(y.k->grad), nk, 1e-12);
    tu_assert_values_(__FILE__, __LINE__, x.v->grad, values(y.v->grad), nv, 1e-12);
    /* all keys padded (float -inf) in f32: zeros */
    ag_tensor *all = ag_full(AG_F32, AG_SHAPE(1, 1, 1, S_), NINF);
    ag_tensor *o3 = attend(inputs(AG_F32), all, false);
    double *v3 = values(o3);
    for (int64_t i = 0; i < ag_numel(o3); i++) assert_true(v3[i] == 0);
    /* no keys at all (S = 0): zeros, and a zero gradient for q */
    ag_tensor *q0 = tu_leaf(ag_ones(AG_F64, AG_SHAPE(1, 1, 2, 2)));
    ag_tensor *o0 = ag_attention(q0, ag_zeros(AG_F64, AG_SHAPE(1, 1, 0, 2)), ag_zeros(AG_F64, AG_SHAPE(1, 1, 0, 3)),
                                 NULL, false, 0, NULL, false, NULL);
    tu_assert_values(o0, 0, 0, 0, 0, 0, 0, 0);
    ag_backward(o0, ag_ones(AG_F64, AG_SHAPE(1, 1, 2, 3)));
    tu_assert_values(q0->grad, 0, 0, 0, 0, 0);
}

/* ---- layouts ---- */

static void test_attention_accepts_heads_split_by_view_transpose_and_other_strides(void **s) {
    /* q, k, v as (B,L,H*Dh) projections split into heads (no copy), k also given as the
     * transpose of a (B,H,Dh,S) tensor, v also as a step-2 slice (copied inside) */
    qkv x = inputs(AG_F64);
    ag_tensor *qs = split_heads(ag_contiguous(ag_reshape(ag_transpose(x.q, 1, 2), AG_SHAPE(B_, L_, H_ * DH))), H_);
    ag_tensor *ks = split_heads(ag_contiguous(ag_reshape(ag_transpose(x.k, 1, 2), AG_SHAPE(B_, S_, H_ * DH))), H_);
    ag_tensor *vs = split_heads(ag_contiguous(ag_reshape(ag_transpose(x.v, 1, 2), AG_SHAPE(B_, S_, H_ * DV))), H_);
    assert_false(ag_is_contiguous(qs));
    ag_tensor *mask = bool_of(AG_SHAPE(L_, S_), B2_MASK);
    tu_assert_array(ag_attention(qs, ks, vs, mask, false, 0, NULL, false, NULL), B2, 1e-11);
    ag_tensor *kt = ag_transpose(ag_contiguous(ag_transpose(x.k, 2, 3)), 2, 3);
    ag_tensor *big = ag_zeros(AG_F64, AG_SHAPE(B_, H_, S_, 2 * DV));
    ag_tensor *vstep = ag_slice(big, 3, 0, 2 * DV, 2);
    ag_copy_(vstep, x.v);
    tu_assert_array(ag_attention(x.q, kt, vstep, mask, false, 0, NULL, false, NULL), B2, 1e-11);
}

/* ---- dropout ---- */

static void test_attention_dropout_is_reproducible_with_a_seed_and_identity_in_eval(void **s) {
    qkv x = inputs(AG_F64);
    ag_rng r1 = ag_rng_new(7), r2 = ag_rng_new(7), r3 = ag_rng_new(7);
    ag_tensor *w1, *w2, *we;
    ag_tensor *o1 = ag_attention(x.q, x.k, x.v, NULL, false, 0.5, &r1, true, &w1);
    ag_tensor *o2 = ag_attention(x.q, x.k, x.v, NULL, false, 0.5, &r2, true, &w2);
    ag_tensor *oe = ag_attention(x.q, x.k, x.v, NULL, false, 0.5, &r3, false, &we);
    int64_t no = ag_numel(o1), nw = ag_numel(w1);
    assert_memory_equal(values(o1), values(o2), sizeof(double) * (size_t)no);
    assert_memory_equal(values(w1), values(w2), sizeof(double) * (size_t)nw);
    assert_int_equal(r1.counter, (nw + 1) / 2); /* two mask elements a draw */
    assert_int_equal(r3.counter, 0); /* eval draws nothing */
    tu_assert_array(oe, B1, 1e-11);
    /* torch returns the weights after dropout: each is 0 or p/(1-p) = 2p, and out = w @ v */
    double *pw = values(w1), *pe = values(we), *pv = values(x.v), *po = values(o1);
    int dropped = 0, kept = 0;
    for (int64_t i = 0; i < nw; i++) {
        if (pw[i] == 0)
            dropped++;
        else {
            assert_true(fabs(pw[i] - 2 * pe[i]) < 1e-15);
            kept++;
        }
    }
    assert_true(dropped > 0 && kept > 0);
    for (int bh = 0; bh < B_ * H_; bh++)
        for (int i = 0; i < L_; i++)
            for (int j = 0; j < DV; j++) {
                double acc = 0;
                for (int t = 0; t < S_; t++) acc += pw[(bh * L_ + i) * S_ + t] * pv[(bh * S_ + t) * DV + j];
                assert_true(fabs(po[(bh * L_ + i) * DV + j] - acc) < 1e-14);
            }
    /* the drop rate is p */
    ag_tensor *q = tu_seq(AG_F32, AG_SHAPE(1, 1, 64, 8), 0.1, 0), *k = tu_seq(AG_F32, AG_SHAPE(1, 1, 64, 8), 0.2, 0);
    ag_tensor *wb;
    ag_attention(q, k, k, NULL, false, 0.25, &r1, true, &wb);
    double *vb = values(wb);
    int zeros = 0;
    for (int i = 0; i < 64 * 64; i++) zeros += vb[i] == 0;
    assert_in_range(zeros, 4096 * 20 / 100, 4096 * 30 / 100);
}
/* ---- gradcheck ---- */

typedef struct {
    ag_tensor *mask;
    bool causal, split, odd_layouts;
    double p;
} actx;

static ag_tensor *f_attn(int n, ag_tensor **in, void *c) {
    actx *a = c;
    ag_tensor *q = in[0], *k = in[1], *v = in[2], *mask = n > 3 ? in[3] : a->mask;
    if (a->split) q = split_heads(q, 2), k = split_heads(k, 2), v = split_heads(v, 2);
    if (a->odd_layouts) k = ag_transpose(k, 2, 3), v = ag_slice(v, 3, 0, v->shape[3], 2);
    ag_rng r = ag_rng_new(5);
    return ag_attention(q, k, v, mask, a->causal, a->p, &r, a->p > 0, NULL);
}

static void test_attention_passes_gradcheck_for_each_mask_kind_and_layout(void **s) {
    ag_rng r = ag_rng_new(21);
    ag_tensor *in[4] = {tu_leaf(ag_uniform(&r, AG_F64, AG_SHAPE(1, 2, 3, 2), -1, 1)),
                        tu_leaf(ag_uniform(&r, AG_F64, AG_SHAPE(1, 2, 4, 2), -1, 1)),
                        tu_leaf(ag_uniform(&r, AG_F64, AG_SHAPE(1, 2, 4, 3), -1, 1)), NULL};
    actx none = {0};
    assert_gradcheck(f_attn, &none, 3, in);
    actx bmask = {.mask = bool_of(AG_SHAPE(L_, S_), (const int[]){0, 1, 0, 0, 1, 1, 1, 1, 0, 0, 1, 0})};
    assert_gradcheck(f_attn, &bmask, 3, in);
    actx kpad = {.mask = bool_of(AG_SHAPE(1, 1, 1, S_), (const int[]){0, 0, 1, 0})};
    assert_gradcheck(f_attn, &kpad, 3, in);
    actx causal = {.causal = true};
    assert_gradcheck(f_attn, &causal, 3, in);
    actx drop = {.p = 0.3, .causal = true};
    assert_gradcheck(f_attn, &drop, 3, in);
    /* a float mask (with -inf) is an input too: its gradient is dscores summed over heads */
    in[3] = tu_leaf(tensor_of(AG_F64, (1, 1, 3, 4), 0, -0.5, NINF, 1, 0.25, 0, 0, -1, NINF, NINF, NINF, NINF));
    assert_gradcheck(f_attn, &none, 4, in);
    /* heads split from (B,L,H*Dh) by view + transpose; k transposed and v strided */
    ag_tensor *sp[3] = {tu_leaf(ag_uniform(&r, AG_F64, AG_SHAPE(2, 3, 4), -1, 1)),
                        tu_leaf(ag_uniform(&r, AG_F64, AG_SHAPE(2, 4, 4), -1, 1)),
                        tu_leaf(ag_uniform(&r, AG_F64, AG_SHAPE(2, 4, 6), -1, 1))};
    actx split = {.split = true, .mask = bool_of(AG_SHAPE(2, 1, 1, 4), (const int[]){0, 0, 0, 1, 1, 0, 0, 0})};
    assert_gradcheck(f_attn, &split, 3, sp);
    ag_tensor *odd[3] = {in[0], tu_leaf(ag_uniform(&r, AG_F64, AG_SHAPE(1, 2, 2, 4), -1, 1)),
                         tu_leaf(ag_uniform(&r, AG_F64, AG_SHAPE(1, 2, 4, 6), -1, 1))};
    actx oddl = {.odd_layouts = true, .causal = true};
    assert_gradcheck(f_attn, &oddl, 3, odd);
}

/* ---- errors ---- */

static void test_shape_and_argument_errors_name_the_op_and_shapes(void **s) {
    ag_tensor *q = ag_zeros(AG_F32, AG_SHAPE(1, 2, 3, 2)), *k = ag_zeros(AG_F32, AG_SHAPE(1, 2, 4, 5));
    ag_tensor *v = ag_zeros(AG_F32, AG_SHAPE(1, 2, 4, 3)), *k2 = ag_zeros(AG_F32, AG_SHAPE(1, 2, 4, 2));
    assert_null(ag_attention(q, k, v, NULL, false, 0, NULL, false, NULL));
    tu_assert_error("ag_attention", "(1,2,3,2)", "(1,2,4,5)", "head dim");
    assert_null(ag_attention(q, k2, ag_zeros(AG_F32, AG_SHAPE(1, 2, 5, 3)), NULL, false, 0, NULL, false, NULL));
    tu_assert_error("ag_attention", "(1,2,5,3)", "source length");
    assert_null(ag_attention(ag_zeros(AG_F32, AG_SHAPE(2, 3, 2)), k2, v, NULL, false, 0, NULL, false, NULL));
    tu_assert_error("ag_attention", "(2,3,2)", "4-d");
    assert_null(ag_attention(q, k2, ag_zeros(AG_F64, AG_SHAPE(1, 2, 4, 3)), NULL, false, 0, NULL, false, NULL));
    tu_assert_error("ag_attention", "f64", "dtypes differ");
    assert_null(ag_attention(q, k2, v, ag_zeros(AG_BOOL, AG_SHAPE(2, 4)), false, 0, NULL, false, NULL));
    tu_assert_error("ag_attention", "mask (2,4)", "(1,2,3,4)");
    assert_null(ag_attention(q, k2, v, ag_zeros(AG_I64, AG_SHAPE(3, 4)), false, 0, NULL, false, NULL));
    tu_assert_error("ag_attention", "(3,4)", "i64");
    assert_null(ag_attention(q, k2, v, NULL, false, 1.5, NULL, true, NULL));
    tu_assert_error("ag_attention", "dropout_p 1.5");
    assert_null(ag_attention(NULL, k2, v, NULL, false, 0, NULL, false, NULL));
    tu_assert_error("ag_attention", "NULL");
    assert_null(ag_masked_softmax(ag_zeros(AG_F64, AG_SHAPE(2, 4)), ag_zeros(AG_BOOL, AG_SHAPE(3)), -1));
    tu_assert_error("ag_masked_softmax", "(3)", "(2,4)");
    assert_null(ag_masked_softmax(ag_zeros(AG_F64, AG_SHAPE(2, 4)), NULL, 2));
    tu_assert_error("ag_masked_softmax", "dim 2");
    assert_null(ag_attention_mask(ag_zeros(AG_BOOL, AG_SHAPE(3, 4)), ag_zeros(AG_BOOL, AG_SHAPE(2, 5)), 2, 2));
    tu_assert_error("ag_attention_mask", "(3,4)", "(2,5)");
    assert_null(ag_attention_mask(ag_zeros(AG_BOOL, AG_SHAPE(3, 3, 4)), NULL, 2, 2));
    tu_assert_error("ag_attention_mask", "(3,3,4)", "(B*H,L,S)");
    assert_null(ag_square_subsequent_mask(3, AG_I32));
    tu_assert_error("ag_square_subsequent_mask", "i32");
}

#define T(name) cmocka_unit_test_setup_teardown(name, tu_setup, tu_teardown)

int main(void) {
    const struct CMUnitTest tests[] = {
        T(test_masked_softmax_bool_mask_excludes_true_positions),
        T(test_masked_softmax_float_mask_is_added_and_broadcast),
        T(test_masked_softmax_fully_masked_row_gives_zeros_and_zero_grad),
        T(test_masked_softmax_passes_gradcheck_for_each_mask_kind),
        T(test_attention_matches_torch_without_mask_for_cross_attention_with_dv_not_dh),
        T(test_attention_bool_mask_excludes_true_positions),
        T(test_attention_float_mask_is_added_to_the_scores),
        T(test_attention_key_padding_mask_broadcasts_from_b_1_1_s),
        T(test_attention_causal_flag_masks_keys_after_the_query_top_left_aligned),
        T(test_square_subsequent_mask_and_causal_bool_mask_match_torch),
        T(test_float_attn_mask_and_bool_key_padding_mask_combine_as_in_torch_mha),
        T(test_bool_masks_and_3d_attn_mask_combine_as_in_torch_mha),
        T(test_attention_fully_masked_row_gives_zero_output_and_zero_grad),
        T(test_attention_accepts_heads_split_by_view_transpose_and_other_strides),
        T(test_attention_dropout_is_reproducible_with_a_seed_and_identity_in_eval),
        T(test_attention_passes_gradcheck_for_each_mask_kind_and_layout),
        T(test_shape_and_argument_errors_name_the_op_and_shapes)
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
