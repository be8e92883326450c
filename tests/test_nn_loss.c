/* Cross entropy, NLL and MSE against PyTorch 1.13 (values and gradients for every reduction),
 * finite-difference gradchecks, the all-ignored deviation, and misuse reporting. Expected
 * numbers were produced by /usr/bin/python3 with torch 1.13 in float64 unless stated (the
 * expression is given above each block) and pasted here; torch is not needed at run time. */
#include <math.h>
#include <string.h>

#include "test_util.h"

/* the options of a case: reduction, ignore_index, label_smoothing */
#define LOSS_CFG(red, ignore, smoothing)                                                                               \
    (&(ag_loss_config){.reduction = (red), .ignore_index = (ignore), .label_smoothing = (smoothing), .beta = 1})

/* ==== cross entropy, (N, C) ================================================================= */

/* x=[[1,2,3],[.5,-1,2],[3,0,-2],[1,1,1]]; t=[2,-100,0,1];
 * l=F.cross_entropy(x,t,ignore_index=-100,label_smoothing=eps,reduction=red);
 * l.backward(g) with g=1 for mean/sum and g=[1,2,-1,.5] for none */
#define CE_X 1, 2, 3, 0.5, -1, 2, 3, 0, -2, 1, 1, 1
#define CE_T 2, -100, 0, 1

static ag_tensor *ce_run(double eps, ag_reduction red, ag_tensor **x) {
    *x = tu_leaf(tu_tensor(AG_F64, AG_SHAPE(4, 3), CE_X));
    ag_tensor *y = ag_cross_entropy(*x, tu_tensor(AG_I64, AG_SHAPE(4), CE_T), LOSS_CFG(red, -100, eps));
    ag_backward(y, red == AG_REDUCTION_NONE ? tu_tensor(AG_F64, AG_SHAPE(4), 1, 2, -1, 0.5) : NULL);
    return y;
}

static void test_cross_entropy_ignore_index_each_reduction_matches_torch(void **s) {
    ag_tensor *x, *y;
    y = ce_run(0, AG_REDUCTION_MEAN, &x);
    assert_int_equal(y->ndim, 0);
    tu_assert_values(y, 1e-12, 0.52040116282987914);
    tu_assert_values(x->grad, 1e-12, 0.030010191056793478, 0.081576157018265871, -0.11158634807505941, 0, 0, 0,
                     -0.017833625815702098, 0.01570780550822138, 0.0021258203074807653, 0.1111111111111111,
                     -0.22222222222222221, 0.1111111111111111);
    y = ce_run(0, AG_REDUCTION_SUM, &x);
    tu_assert_values(y, 1e-12, 1.5612034884896373);
    tu_assert_values(x->grad, 1e-12, 0.090030573170380435, 0.24472847105479764, -0.33475904422517822, 0, 0, 0,
                     -0.053500877447106299, 0.047123416524664147, 0.0063774609224422968, 0.33333333333333331,
                     -0.66666666666666674, 0.33333333333333331);
    y = ce_run(0, AG_REDUCTION_NONE, &x);
    tu_assert_shape(y, 4);
    tu_assert_values(y, 1e-12, 0.40760596444438041, 0, 0.05498523537714723, 1.0986122886681098);
    tu_assert_values(x->grad, 1e-12, 0.090030573170380435, 0.24472847105479764, -0.33475904422517822, 0, 0, 0,
                     0.053500877447106299, -0.047123416524664147, -0.0063774609224422968, 0.16666666666666666,
                     -0.33333333333333337, 0.16666666666666666);
}

static void test_cross_entropy_label_smoothing_averages_over_non_ignored_like_torch(void **s) {
    ag_tensor *x, *y;
    y = ce_run(0.2, AG_REDUCTION_MEAN, &x);
    tu_assert_values(y, 1e-12, 0.7648456072743236);
    tu_assert_values(x->grad, 1e-12, 0.0077879688345712534, 0.059353934796043652, -0.067141903630614952, 0, 0, 0,
                     0.026610818628742303, -0.006514416714000844, -0.02009640191474146, 0.088888888888888851,
                     -0.17777777777777778, 0.088888888888888851);
    y = ce_run(0.2, AG_REDUCTION_SUM, &x);
    tu_assert_values(y, 1e-12, 2.2945368218229709);
    tu_assert_values(x->grad, 1e-12, 0.023363906503713769, 0.17806180438813096, -0.20142571089184491, 0, 0, 0,
                     0.079832455886227005, -0.019543250142002519, -0.060289205744224368, 0.26666666666666666,
                     -0.53333333333333344, 0.26666666666666666);
    y = ce_run(0.2, AG_REDUCTION_NONE, &x);
    tu_assert_values(y, 1e-12, 0.60760596444438053, 0, 0.5883185687104806, 1.0986122886681098);
    tu_assert_values(x->grad, 1e-12, 0.023363906503713769, 0.17806180438813096, -0.20142571089184491, 0, 0, 0,
                     -0.079832455886227005, 0.019543250142002519, 0.060289205744224368, 0.13333333333333333,
                     -0.26666666666666672, 0.13333333333333333);
}

/* ==== cross entropy, (N, C, L) ============================================================== */

/* x=tensor([.5,-1,2,0, 1,1.5,-.5,3, -2,.25,1,1, 2,0,-1,.5, 0,1,2,3, 1,-1,.5,-.5]).reshape(2,3,4);
 * t=[[0,2,-1,1],[2,-1,1,0]]; F.cross_entropy(x,t,ignore_index=-1,label_smoothing=.1).backward();
 * and F.cross_entropy(x,t,ignore_index=-1,reduction='none') */
#define NCL_X 0.5, -1, 2, 0, 1, 1.5, -0.5, 3, -2, 0.25, 1, 1, 2, 0, -1, 0.5, 0, 1, 2, 3, 1, -1, 0.5, -0.5
#define NCL_T 0, 2, -1, 1, 2, -1, 1, 0

static void test_cross_entropy_ncl_layout_matches_torch(void **s) {
    ag_tensor *x = tu_leaf(tu_tensor(AG_F64, AG_SHAPE(2, 3, 4), NCL_X));
    ag_tensor *t = tu_tensor(AG_I64, AG_SHAPE(2, 4), NCL_T);
    ag_tensor *y = ag_cross_entropy(x, t, LOSS_CFG(AG_REDUCTION_MEAN, -1, 0.1));
    tu_assert_values(y, 1e-12, 1.2211480806584425);
    ag_backward(y, NULL);
    tu_assert_values(x->grad, 1e-12, -0.094523519508588852, 0.0044407436636301548, 0, 0.0014461221334554531,
                     0.095069260469215419, 0.11622429931155923, 0, -0.014923099808665614, -0.00054574096062655147,
                     -0.1206650429751894, 0, 0.013476977675210193, 0.10531793707358141, 0, 0.00096320665622568651,
                     -0.14325577150358207, 0.0094495399728411825, 0, -0.024622716457342896, 0.14428648937556823,
                     -0.11476747704642262, 0, 0.02365950980111723, -0.0010307178719861352);
    ag_tensor *none = ag_cross_entropy(x, t, LOSS_CFG(AG_REDUCTION_NONE, -1, 0));
    tu_assert_shape(none, 2, 4);
    tu_assert_values(none, 1e-12, 1.0045969023422834, 1.5637808633372581, 0, 0.16984601955628548, 1.4076059644443804,
                     0, 0.24131129665715703, 2.6064141042799558);
}

static void test_cross_entropy_reads_a_permuted_nlc_tensor(void **s) {
    /* the same logits stored as (N, L, C) and permuted to (N, C, L): same loss as above */
    double ncl[24] = {NCL_X}, nlc[24];
    for (int n = 0; n < 2; n++)
        for (int c = 0; c < 3; c++)
            for (int l = 0; l < 4; l++) nlc[n * 12 + l * 3 + c] = ncl[n * 12 + c * 4 + l];
    ag_tensor *base = tu_leaf(ag_from_buffer(AG_F64, AG_SHAPE(2, 4, 3), nlc));
    ag_tensor *y = ag_cross_entropy(ag_permute(base, (int[]){0, 2, 1}), tu_tensor(AG_I32, AG_SHAPE(2, 4), NCL_T),
                                    LOSS_CFG(AG_REDUCTION_MEAN, -1, 0.1));
    tu_assert_values(y, 1e-12, 1.2211480806584425);
    ag_backward(y, NULL);
    /* element (n, l, c) of the grad is torch's x.grad[n, c, l] = -0.0945... for (0,0,0), 0.0950... for (0,0,1) */
    tu_assert_values(ag_select(ag_select(base->grad, 0, 0), 0, 0), 1e-12, -0.094523519508588852,
                     0.095069260469215419, -0.00054574096062655147);
}

static ag_tensor *f_ce(int n, ag_tensor **in, void *ctx) {
    ag_tensor *t = tu_tensor(AG_I64, AG_SHAPE(2, 4), NCL_T);
    return ag_cross_entropy(in[0], t, LOSS_CFG(ctx ? AG_REDUCTION_NONE : AG_REDUCTION_MEAN, -1, 0.15));
}

static void test_cross_entropy_gradcheck_with_smoothing_and_ignore_index(void **s) {
    ag_rng r = ag_rng_new(12);
    ag_tensor *x = tu_leaf(ag_randn(&r, AG_F64, AG_SHAPE(2, 3, 4)));
    tu_assert_gradcheck(f_ce, NULL, 1, &x);
    tu_assert_gradcheck(f_ce, "none", 1, &x);
}

static void test_cross_entropy_all_ignored_gives_zero_loss_and_zero_grad(void **s) {
    ag_tensor *x = tu_leaf(tu_tensor(AG_F64, AG_SHAPE(2, 3), 1, 2, 3, 4, 5, 6));
    ag_tensor *t = tu_tensor(AG_I64, AG_SHAPE(2), -100, -100);
    ag_tensor *y = ag_cross_entropy(x, t, LOSS_CFG(AG_REDUCTION_MEAN, -100, 0.1)); /* PyTorch: nan */
    tu_assert_values(y, 0, 0);
    ag_backward(y, NULL);
    tu_assert_values(x->grad, 0, 0, 0, 0, 0, 0, 0);
    tu_assert_values(ag_cross_entropy(x, t, LOSS_CFG(AG_REDUCTION_SUM, -100, 0.1)), 0, 0);
    ag_tensor *lp = tu_leaf(tu_tensor(AG_F64, AG_SHAPE(2, 3), -1, -2, -3, -4, -5, -6));
    ag_tensor *z = ag_nll_loss(lp, t, LOSS_CFG(AG_REDUCTION_MEAN, -100, 0));
    tu_assert_values(z, 0, 0);
    ag_backward(z, NULL);
    tu_assert_values(lp->grad, 0, 0, 0, 0, 0, 0, 0);
}

/* torch (float32): x=[[1e4,-1e4,0],[-3e4,3e4,2.9e4]]; F.cross_entropy(x,[1,2],label_smoothing=.1).backward() */
static void test_cross_entropy_large_logits_stay_finite(void **s) {
    ag_tensor *x = tu_leaf(tu_tensor(AG_F32, AG_SHAPE(2, 3), 1e4, -1e4, 0, -3e4, 3e4, 2.9e4));
    ag_tensor *y = ag_cross_entropy(x, tu_tensor(AG_I64, AG_SHAPE(2), 1, 2), LOSS_CFG(AG_REDUCTION_MEAN, -100, 0.1));
    tu_assert_values(y, 0, 10966.6669921875);
    ag_backward(y, NULL);
    tu_assert_values(x->grad, 1e-7, 0.48333331942558289, -0.46666666865348816, -0.01666666753590107,
                     -0.01666666753590107, 0.48333331942558289, -0.46666666865348816);
}

/* f32 (exponentials in float) against the same loss in f64, for (N, C) with unit-stride classes
 * and (N, C, d) with strided ones: logits over ±20, label smoothing, some targets ignored */
static void test_cross_entropy_f32_matches_f64(void **s) {
    ag_rng r = ag_rng_new(17);
    const int64_t shapes[2][3] = {{64, 1000, 1}, {4, 50, 7}};
    for (int k = 0; k < 2; k++) {
        int64_t n = shapes[k][0], c = shapes[k][1], d = shapes[k][2];
        ag_tensor *x64 = k ? ag_uniform(&r, AG_F64, AG_SHAPE(n, c, d), -20, 20)
                           : ag_uniform(&r, AG_F64, AG_SHAPE(n, c), -20, 20);
        ag_tensor *t = k ? ag_zeros(AG_I64, AG_SHAPE(n, d)) : ag_zeros(AG_I64, AG_SHAPE(n));
        int64_t *tv = (int64_t *)t->data;
        for (int64_t i = 0; i < n * d; i++) tv[i] = i % 9 == 4 ? -100 : (i * 37) % c;
        ag_tensor *x32 = tu_leaf(ag_detach(ag_to(x64, AG_F32)));
        x64 = tu_leaf(ag_detach(ag_to(x32, AG_F64))); /* the same values in both */
        ag_tensor *l32 = ag_cross_entropy(x32, t, LOSS_CFG(AG_REDUCTION_MEAN, -100, 0.1));
        ag_tensor *l64 = ag_cross_entropy(x64, t, LOSS_CFG(AG_REDUCTION_MEAN, -100, 0.1));
        ag_backward(l32, NULL);
        ag_backward(l64, NULL);
        double want = ((double *)l64->data)[0];
        tu_assert_values(l32, 1e-6 * fabs(want), want);
        int64_t m = ag_numel(x64);
        tu_assert_values_(__FILE__, __LINE__, x32->grad, (const double *)x64->grad->data, m, 1e-8);
    }
}

static void test_cross_entropy_unbatched_input(void **s) {
    /* hand-worked: log(e^0 + e^1 + e^2) - 1 = 1.4076059644443804 (also row 4 of the NCL 'none' case) */
    ag_tensor *y = ag_cross_entropy(tu_tensor(AG_F64, AG_SHAPE(3), 0, 1, 2), ag_scalar(AG_I64, 1),
                                    LOSS_CFG(AG_REDUCTION_NONE, -100, 0));
    assert_int_equal(y->ndim, 0);
    tu_assert_values(y, 1e-12, 1.4076059644443804);
}

static void test_cross_entropy_reports_shape_mismatch_and_bad_target(void **s) {
    ag_tensor *x = ag_ones(AG_F32, AG_SHAPE(2, 3));
    assert_null(ag_cross_entropy(x, ag_zeros(AG_I64, AG_SHAPE(3)), LOSS_CFG(AG_REDUCTION_MEAN, -100, 0)));
    tu_assert_error("ag_cross_entropy", "(2,3)", "(3)");
    assert_null(ag_cross_entropy(x, tu_tensor(AG_I64, AG_SHAPE(2), 0, 3), LOSS_CFG(AG_REDUCTION_MEAN, -100, 0)));
    tu_assert_error("ag_cross_entropy", "target 3", "[0, 3)");
    assert_null(ag_cross_entropy(x, ag_zeros(AG_F32, AG_SHAPE(2)), LOSS_CFG(AG_REDUCTION_MEAN, -100, 0)));
    tu_assert_error("ag_cross_entropy", "(2,3)", "(2)", "f32");
    assert_null(ag_cross_entropy(x, ag_zeros(AG_I64, AG_SHAPE(2)), LOSS_CFG(AG_REDUCTION_MEAN, -100, 1.5)));
    tu_assert_error("ag_cross_entropy", "label_smoothing 1.5");
}

/* ==== NLL =================================================================================== */

/* lp=[[-1,-2,-.5],[-.25,-3,-1.5],[-2,-.1,-4]]; t=[1,0,-100]; F.nll_loss(lp,t,reduction=red)
 * .backward(g), g=1 for mean/sum and [2,-1,3] for none */
static ag_tensor *nll_run(ag_reduction red, ag_tensor **lp) {
    *lp = tu_leaf(tu_tensor(AG_F64, AG_SHAPE(3, 3), -1, -2, -0.5, -0.25, -3, -1.5, -2, -0.1, -4));
    ag_tensor *y = ag_nll_loss(*lp, tu_tensor(AG_I64, AG_SHAPE(3), 1, 0, -100), LOSS_CFG(red, -100, 0));
    ag_backward(y, red == AG_REDUCTION_NONE ? tu_tensor(AG_F64, AG_SHAPE(3), 2, -1, 3) : NULL);
    return y;
}

static void test_nll_loss_each_reduction_matches_torch(void **s) {
    ag_tensor *lp, *y;
    y = nll_run(AG_REDUCTION_MEAN, &lp);
    tu_assert_values(y, 1e-15, 1.125);
    tu_assert_values(lp->grad, 1e-15, 0, -0.5, 0, -0.5, 0, 0, 0, 0, 0);
    y = nll_run(AG_REDUCTION_SUM, &lp);
    tu_assert_values(y, 1e-15, 2.25);
    tu_assert_values(lp->grad, 1e-15, 0, -1, 0, -1, 0, 0, 0, 0, 0);
    y = nll_run(AG_REDUCTION_NONE, &lp);
    tu_assert_values(y, 1e-15, 2, 0.25, 0);
    tu_assert_values(lp->grad, 1e-15, 0, -2, 0, 1, 0, 0, 0, 0, 0);
}

static ag_tensor *f_nll(int n, ag_tensor **in, void *ctx) {
    return ag_nll_loss(in[0], tu_tensor(AG_I64, AG_SHAPE(2, 4), NCL_T), LOSS_CFG(AG_REDUCTION_MEAN, -1, 0));
}

static void test_nll_loss_gradcheck(void **s) {
    ag_rng r = ag_rng_new(13);
    ag_tensor *x = tu_leaf(ag_randn(&r, AG_F64, AG_SHAPE(2, 3, 4)));
    tu_assert_gradcheck(f_nll, NULL, 1, &x);
}

/* ==== MSE =================================================================================== */

/* a=[[1,2,3],[4,-5,6]]; b=[[.5,2.5,-1],[4,5,7]]; F.mse_loss(a,b,reduction=red).backward(g),
 * g=1 for mean/sum and [[1,2,3],[4,5,6]] for none */
static void test_mse_loss_each_reduction_matches_torch(void **s) {
    for (int k = 0; k < 3; k++) {
        ag_reduction red = k == 0 ? AG_REDUCTION_MEAN : k == 1 ? AG_REDUCTION_SUM : AG_REDUCTION_NONE;
        ag_tensor *a = tu_leaf(tu_tensor(AG_F64, AG_SHAPE(2, 3), 1, 2, 3, 4, -5, 6));
        ag_tensor *b = tu_leaf(tu_tensor(AG_F64, AG_SHAPE(2, 3), 0.5, 2.5, -1, 4, 5, 7));
        ag_tensor *y = ag_mse_loss(a, b, LOSS_CFG(red, -100, 0));
        ag_backward(y, red == AG_REDUCTION_NONE ? tu_tensor(AG_F64, AG_SHAPE(2, 3), 1, 2, 3, 4, 5, 6) : NULL);
        if (red == AG_REDUCTION_MEAN) {
            tu_assert_values(y, 1e-12, 19.583333333333332);
            tu_assert_values(a->grad, 1e-12, 0.16666666666666666, -0.16666666666666666, 1.3333333333333333, 0,
                             -3.333333333333333, -0.33333333333333331);
            tu_assert_values(b->grad, 1e-12, -0.16666666666666666, 0.16666666666666666, -1.3333333333333333, 0,
                             3.333333333333333, 0.33333333333333331);
        } else if (red == AG_REDUCTION_SUM) {
            tu_assert_values(y, 1e-12, 117.5);
            tu_assert_values(a->grad, 1e-12, 1, -1, 8, 0, -20, -2);
            tu_assert_values(b->grad, 1e-12, -1, 1, -8, 0, 20, 2);
        } else {
            tu_assert_shape(y, 2, 3);
            tu_assert_values(y, 1e-12, 0.25, 0.25, 16, 0, 100, 1);
            tu_assert_values(a->grad, 1e-12, 1, -2, 24, 0, -100, -12);
            tu_assert_values(b->grad, 1e-12, -1, 2, -24, 0, 100, 12);
        }
    }
}

static void test_mse_loss_f32_transposed_input(void **s) {
    /* a given through a transpose; same numbers as the SUM case above */
    ag_tensor *at = tu_leaf(tu_tensor(AG_F32, AG_SHAPE(3, 2), 1, 4, 2, -5, 3, 6));
    ag_tensor *b = tu_tensor(AG_F32, AG_SHAPE(2, 3), 0.5, 2.5, -1, 4, 5, 7);
    ag_tensor *y = ag_mse_loss(ag_transpose(at, 0, 1), b, LOSS_CFG(AG_REDUCTION_SUM, -100, 0));
    tu_assert_values(y, 1e-5, 117.5);
    ag_backward(y, NULL);
    tu_assert_values(at->grad, 1e-6, 1, 0, -1, -20, 8, -2);
}

static ag_tensor *f_mse(int n, ag_tensor **in, void *ctx) {
    return ag_mse_loss(in[0], in[1], LOSS_CFG(ctx ? AG_REDUCTION_NONE : AG_REDUCTION_MEAN, -100, 0));
}

static void test_mse_loss_gradcheck(void **s) {
    ag_rng r = ag_rng_new(14);
    ag_tensor *in[2] = {tu_leaf(ag_randn(&r, AG_F64, AG_SHAPE(3, 4))), tu_leaf(ag_randn(&r, AG_F64, AG_SHAPE(3, 4)))};
    tu_assert_gradcheck(f_mse, NULL, 2, in);
    tu_assert_gradcheck(f_mse, "none", 2, in);
}

static void test_mse_loss_reports_shape_mismatch(void **s) {
    assert_null(ag_mse_loss(ag_ones(AG_F32, AG_SHAPE(2, 3)), ag_ones(AG_F32, AG_SHAPE(3, 2)),
                            LOSS_CFG(AG_REDUCTION_MEAN, -100, 0)));
    tu_assert_error("ag_mse_loss", "(2,3)", "(3,2)");
}

int main(void) {
    const struct CMUnitTest tests[] = {
#define T(name) cmocka_unit_test_setup_teardown(name, tu_setup, tu_teardown)
        T(test_cross_entropy_ignore_index_each_reduction_matches_torch),
        T(test_cross_entropy_label_smoothing_averages_over_non_ignored_like_torch),
        T(test_cross_entropy_ncl_layout_matches_torch),
        T(test_cross_entropy_reads_a_permuted_nlc_tensor),
        T(test_cross_entropy_gradcheck_with_smoothing_and_ignore_index),
        T(test_cross_entropy_all_ignored_gives_zero_loss_and_zero_grad),
        T(test_cross_entropy_large_logits_stay_finite),
        T(test_cross_entropy_f32_matches_f64),
        T(test_cross_entropy_unbatched_input),
        T(test_cross_entropy_reports_shape_mismatch_and_bad_target),
        T(test_nll_loss_each_reduction_matches_torch),
        T(test_nll_loss_gradcheck),
        T(test_mse_loss_each_reduction_matches_torch),
        T(test_mse_loss_f32_transposed_input),
        T(test_mse_loss_gradcheck),
        T(test_mse_loss_reports_shape_mismatch),
#undef T
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
