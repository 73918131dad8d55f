/* rt_amp_rule.h: torch._amp_update_scale_ (GradScaler's update), written
 * once for both devices. The CPU device calls it after each step (rt_amp.c);
 * the CUDA device runs it inside the step graph, in cddprt_step_end, with
 * no host in the loop: rt_cuda_kernels.h pastes this same text into the
 * NVRTC source (RT_AMP_RULE_SRC). Plain C that is also CUDA C: no
 * includes, no library calls (x - x == 0 is isfinite(x)). */
#ifndef RT_AMP_RULE_H
#define RT_AMP_RULE_H

/* On found_inf: back off and reset the tracker, count a skipped step;
 * else grow after `interval` clean steps in a row, if the grown scale is
 * finite. The scale is a float, as torch keeps it. */
#define RT_AMP_RULE(QUAL)                                                                       \
    QUAL void rt_amp_rule(float *scale, long long *tracker, long long *skipped, float growth,   \
                          float backoff, long long interval, int found_inf)                     \
    {                                                                                           \
        float s = *scale;                                                                       \
        if (found_inf) {                                                                        \
            s *= backoff;                                                                       \
            *tracker = 0;                                                                       \
            ++*skipped;                                                                         \
        } else if (++*tracker == interval) {                                                    \
            const float grown = s * growth;                                                     \
            if (grown - grown == 0.0f)                                                          \
                s = grown;                                                                      \
            *tracker = 0;                                                                       \
        }                                                                                       \
        *scale = s;                                                                             \
    }

#define RT_AMP_STR_(x) #x
#define RT_AMP_STR(x) RT_AMP_STR_(x)
/* the rule as CUDA C, for the device's step graph */
#define RT_AMP_RULE_SRC RT_AMP_STR(RT_AMP_RULE(__device__ static)) "\n"

#endif
