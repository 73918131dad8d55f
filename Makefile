# cddpc: `make` builds build/cddpc and build/libcddprt.a.
#   make deps    install what is missing (Debian packages)
#   make data    lay out data/fashion-mnist and data/mnist
#   make demo    deps + build + data, then compile models/mnist.net and train it
#   make check   the fast tier of tests/SUITE (under 2 minutes)
#   make test    check + test tiers, in parallel (no GPU needed); SAN=1 runs it under ASan+UBSan
#   make test-slow  the slow tier (accuracy epochs, mutants); make test-all: every tier
#   make bench   epoch time against PyTorch, measured in the same run; 1 vs 2 ranks;
#                the ConvNet step against PyTorch on 1 and 2 threads
#   make fuzz-frontend  libFuzzer on the front end, FUZZ_SECONDS (default 1800); tests/fuzz/README.md
#   make test-tsan  the DDP and stop entries under ThreadSanitizer (about 15 minutes; docs/testing.md)
CC      ?= cc
# build on every core unless told otherwise (make -jN still wins)
ifeq ($(filter -j%,$(MAKEFLAGS)),)
MAKEFLAGS += -j$(shell nproc 2>/dev/null || echo 2)
endif
CFLAGS  := -std=c11 -O2 -g -Wall -Wextra
ifeq ($(WERROR),1)
CFLAGS  += -Werror
endif
ifeq ($(SAN),1)
SANFLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
CFLAGS  += $(SANFLAGS)
LDFLAGS += $(SANFLAGS)
# programs cddpc emits are sanitized too
export CDDPC_CFLAGS := $(SANFLAGS)
export ASAN_OPTIONS := detect_leaks=0:abort_on_error=1
export UBSAN_OPTIONS := print_stacktrace=1:halt_on_error=1
endif
# ThreadSanitizer (make test-tsan): the runtime and the programs cddpc
# emits; Open MPI's own races are suppressed (tests/tsan.supp), ours are not
ifeq ($(TSAN),1)
SANFLAGS := -fsanitize=thread -fno-omit-frame-pointer
CFLAGS  += $(SANFLAGS)
LDFLAGS += $(SANFLAGS)
export CDDPC_CFLAGS := $(SANFLAGS)
export TSAN_OPTIONS := halt_on_error=1:exitcode=66:second_deadlock_stack=1:suppressions=$(CURDIR)/tests/tsan.supp
endif
AR      ?= ar
PY      := /usr/bin/python3

all: build/cddpc build/libcddprt.a build/include/cddprt.h build/libcddprt.ldflags

# Objects depend on the flags they were built with: switching SAN on or
# off rebuilds everything instead of mixing instrumented objects.
FLAGS_STAMP := build/.flags-$(shell echo '$(CFLAGS) $(LDFLAGS)' | md5sum | cut -c1-8)
$(FLAGS_STAMP):
	@mkdir -p build
	@rm -f build/.flags-*
	@touch $@

include runtime/Makefile.inc
$(RT_OBJS): $(FLAGS_STAMP)

# ---- the compiler -----------------------------------------------------------
CC_SRCS := $(filter-out compiler/lex.c compiler/parse.c,$(wildcard compiler/*.c))
CC_OBJS := $(patsubst compiler/%.c,build/compiler/%.o,$(CC_SRCS)) build/compiler/lex.o build/compiler/parse.o
CC_HDRS := compiler/cddpc.h compiler/ast.h compiler/sema.h compiler/fuse.h compiler/study.h compiler/ops.def compiler/dropout_rng.h runtime/cddprt.h runtime/rt_plot.h
# flex/bison output: no warnings are ours to fix there
GEN_CFLAGS = $(CFLAGS) -Wno-unused-function -Wno-sign-compare -Wno-unused-parameter

build/gen/parse.c build/gen/parse.h: compiler/parse.y
	@mkdir -p build/gen
	bison -Wall -Werror --defines=build/gen/parse.h -o build/gen/parse.c $<

build/gen/lex.c: compiler/lex.l
	@mkdir -p build/gen
	flex -o $@ $<

build/compiler/parse.o: build/gen/parse.c $(CC_HDRS) $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(GEN_CFLAGS) -D_GNU_SOURCE -Icompiler -Iruntime -Ibuild/gen -c $< -o $@

build/compiler/lex.o: build/gen/lex.c build/gen/parse.h $(CC_HDRS) $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(GEN_CFLAGS) -D_GNU_SOURCE -Icompiler -Iruntime -Ibuild/gen -c $< -o $@

build/compiler/%.o: compiler/%.c $(CC_HDRS) build/gen/parse.h $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -D_GNU_SOURCE -Icompiler -Iruntime -Ibuild/gen -c $< -o $@

# rt_plot draws the loss curve for `cddpc plot` as for a program's --plot
build/cddpc: $(CC_OBJS) build/runtime/rt_plot.o
	$(CC) $(LDFLAGS) $^ -lm -o $@

# what a program compiled by cddpc links besides libcddprt.a
RT_LINK ?= -lopenblas -lz -lm -lpthread -ldl $(RT_MPI_LIBS) $(RT_DNNL_LIBS)
build/libcddprt.ldflags: $(FLAGS_STAMP) $(RT_MPI_STAMP) $(RT_DNNL_STAMP) Makefile
	echo '$(RT_LINK)' > $@

build/include/cddprt.h: runtime/cddprt.h
	@mkdir -p $(dir $@)
	cp $< $@

# ---- set-up -----------------------------------------------------------------
.PHONY: all deps data demo test bench clean test-golden test-unit test-torch test-bad install

deps:
	scripts/deps.sh

data:
	scripts/data.sh

demo: deps
	$(MAKE) all data
	build/cddpc models/mnist.net -o build/mnist
	build/mnist --data data/mnist --metrics build/mnist-metrics.csv

# ---- tests ------------------------------------------------------------------
include tests/Makefile.inc
include tests/fuzz/Makefile.inc

# cddpc finds libcddprt.a and include/ next to its own executable, so the
# three live together under lib/cddpc and bin/cddpc is a symlink.
PREFIX ?= /usr/local
install: all
	install -d $(DESTDIR)$(PREFIX)/lib/cddpc/include $(DESTDIR)$(PREFIX)/bin
	install -m 755 build/cddpc $(DESTDIR)$(PREFIX)/lib/cddpc/cddpc
	install -m 644 build/libcddprt.a $(DESTDIR)$(PREFIX)/lib/cddpc/libcddprt.a
	install -m 644 runtime/cddprt.h $(DESTDIR)$(PREFIX)/lib/cddpc/include/cddprt.h
	ln -sf ../lib/cddpc/cddpc $(DESTDIR)$(PREFIX)/bin/cddpc

clean:
	rm -rf build
