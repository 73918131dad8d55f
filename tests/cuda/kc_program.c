/* tests/cuda/kc_program.c: the emitted program.c as a library for
 * kernel_check (both backends). Compiled with -I the directory holding
 * program.c, whose kernels and tables are static: this file includes it
 * and hands out the model. The program's own main is renamed here, so
 * that this file compiles in one command line with the checker's. */
#define main cddp_program_main
#include "program.c"
#undef main

const rt_model *cddp_the_model(void);
const rt_model *cddp_the_model(void) { return &cddp_model; }
