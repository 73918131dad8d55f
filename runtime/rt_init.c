/* rt_init.c: PyTorch's default parameter initialization.
 *
 * nn.Linear / nn.Conv2d reset_parameters() use
 *   weight: kaiming_uniform_(a=sqrt(5)), i.e. bound = gain*sqrt(3/fan_in)
 *           with gain = sqrt(2/(1+a^2)) = sqrt(1/3), so bound = 1/sqrt(fan_in)
 *   bias:   uniform(-1/sqrt(fan_in), 1/sqrt(fan_in))
 * so both kinds draw from U(-1/sqrt(fan_in), 1/sqrt(fan_in)); BatchNorm's
 * weight is ONE and its bias ZERO; nn.Embedding's weight is N(0, 1) with
 * padding_idx's row zero. The distribution matches PyTorch; the
 * exact values cannot (different generator), which is why --init exists. */
#include "rt_internal.h"
#include <math.h>
#include <string.h>

void rt_init_params(const rt_model *m, float *param, uint64_t seed)
{
    for (int i = 0; i < m->nparam; i++) {
        const rt_param *p = &m->params[i];
        float *x = param + p->off;
        const double *ab = m->param_init ? m->param_init + 2 * i : NULL;
        if (rt_param_flags(m, i) & RT_PARAM_ALIAS)     /* a tied weight: its target's init */
            continue;
        switch (p->init) {
        case RT_INIT_KAIMING_UNIFORM:
        case RT_INIT_BIAS_UNIFORM: {
            /* One stream per parameter name: adding or reordering layers
             * leaves the other layers' initial values unchanged. */
            rt_rng r;
            rt_rng_init(&r, seed, rt_hash_str(p->name));
            double b = p->fan_in > 0 ? 1.0 / sqrt((double)p->fan_in) : 0.0;
            for (int64_t k = 0; k < p->numel; k++)
                x[k] = (float)(b * (2.0 * rt_rng_uniform(&r) - 1.0));
            break;
        }
        case RT_INIT_NORMAL: {     /* nn.Embedding: normal_(0, 1), padding_idx's row zeroed */
            rt_rng r;
            rt_rng_init(&r, seed, rt_hash_str(p->name));
            const double mean = ab ? ab[0] : 0.0, sd = ab ? ab[1] : 1.0;
            for (int64_t k = 0; k < p->numel; k++) {
                /* Box-Muller, one normal per pair of uniforms */
                const double u1 = 1.0 - rt_rng_uniform(&r), u2 = rt_rng_uniform(&r);
                x[k] = (float)(mean + sd * sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
            }
            const int64_t zr = m->param_zero_row ? m->param_zero_row[i] : 0;
            if (zr > 0) {
                const int64_t row = p->numel / p->shape[0];
                for (int64_t k = 0; k < row; k++)
                    x[(zr - 1) * row + k] = 0.0f;
            }
            break;
        }
        case RT_INIT_UNIFORM: {    /* uniform_(a, b) and the bounds xavier's and kaiming's give */
            rt_rng r;
            rt_rng_init(&r, seed, rt_hash_str(p->name));
            for (int64_t k = 0; k < p->numel; k++)
                x[k] = (float)(ab[0] + (ab[1] - ab[0]) * rt_rng_uniform(&r));
            break;
        }
        case RT_INIT_COPY:         /* rt_main checked: an earlier parameter of the same size */
            memcpy(x, param + m->params[(int)ab[0]].off, sizeof(float) * (size_t)p->numel);
            break;
        case RT_INIT_CONST:
            for (int64_t k = 0; k < p->numel; k++)
                x[k] = (float)ab[0];
            break;
        case RT_INIT_ONE:
            for (int64_t k = 0; k < p->numel; k++)
                x[k] = 1.0f;
            break;
        case RT_INIT_ZERO:
        default:        /* rt_main rejects unknown kinds before we get here */
            for (int64_t k = 0; k < p->numel; k++)
                x[k] = 0.0f;
            break;
        }
    }
}
