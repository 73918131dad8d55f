/* tests/cuda/kc_program.c: the C backend's program.c as a library for
 * kernel_check. Compiled with -Dmain=cddp_program_main and -I the
 * directory holding the emitted program.c, whose kernels and tables are
 * static: this file includes it and hands out the model. */
#include "program.c"

const rt_model *cddp_the_model(void);
const rt_model *cddp_the_model(void) { return &cddp_model; }
