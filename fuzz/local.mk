# fuzz/: libFuzzer targets, built and run by `make fuzz` (not by make check). They need clang with its
# libFuzzer (Debian: clang libclang-rt-14-dev), found by configure as FUZZ_CC, and a CPU-only build
# (configure --without-cuda). The library is compiled again by clang under ASan + UBSan into fuzz/obj/.
#   make fuzz [FUZZ_SECONDS=60]   builds every target, runs each for FUZZ_SECONDS, prints executions
#                                 and crashes per target; crashing inputs are kept as fuzz/NAME-crash-*.
# Inputs are at most 4096 bytes (schedule: 256, lua_api: 512: longer plans and programs only run slower).
# Lua-driven targets: fuzz/NAME.lua returns function(bytes), run in one tegraph runtime by harness.c.
#   tokens    the token-file loader (tegraph.data, src/core/data.c) on file bytes
#   schedule  the schedule validator (and the simulator on plans it accepts)
#   lua_api   random programs of Lua API calls: create / view / close / capture / replay / hooks / step
#   safetensors  the safetensors reader (tg.safetensors.open, info, read, metadata)
# Another target (the tokenizer's files, ...): a driver fuzz/NAME.lua and its name in FUZZ_TARGETS,
# seeds in fuzz/seeds/NAME/.
FUZZ_TARGETS = tokens schedule lua_api safetensors
FUZZ_SECONDS = 60
FUZZ_SAN = -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
FUZZ_CFLAGS = -g -O1 -std=gnu11 $(FUZZ_SAN)
FUZZ_CPPFLAGS = $(DEFS) -I$(top_srcdir)/src -I$(top_srcdir)/kernels -I$(top_builddir) -DTG_LUADIR='"$(luadir)"' \
	$(LUA_CFLAGS) $(BLAS_CFLAGS) $(MPI_CFLAGS)
FUZZ_LIBS = $(LUA_LIBS) $(BLAS_LIBS) $(MPI_LIBS) -lm -lpthread -ldl
FUZZ_LIB_OBJS = $(patsubst %.c,fuzz/obj/%.o,$(filter %.c,$(libtegraph_la_SOURCES)))
EXTRA_DIST += fuzz/harness.c $(FUZZ_TARGETS:%=fuzz/%.lua) fuzz/seeds
CLEANFILES += $(FUZZ_TARGETS:%=fuzz/fuzz-%)

# the library's objects carry libFuzzer's coverage instrumentation (its edges guide the fuzzing)
fuzz/obj/%.o: $(top_srcdir)/%.c config.h
	@$(MKDIR_P) $(@D)
	$(AM_V_CC)$(FUZZ_CC) $(FUZZ_CPPFLAGS) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c -o $@ $<

fuzz/fuzz-%: $(top_srcdir)/fuzz/harness.c $(top_srcdir)/fuzz/%.lua $(FUZZ_LIB_OBJS)
	$(AM_V_CCLD)$(FUZZ_CC) $(FUZZ_CPPFLAGS) $(FUZZ_CFLAGS) -fsanitize=fuzzer \
	  -DFUZZ_DRIVER='"$(abs_top_srcdir)/fuzz/$*.lua"' -DFUZZ_LUADIR='"$(abs_top_srcdir)/lua"' \
	  -o $@ $(top_srcdir)/fuzz/harness.c $(FUZZ_LIB_OBJS) $(FUZZ_LIBS)

.SECONDARY: $(FUZZ_LIB_OBJS)
.PHONY: fuzz fuzz-build fuzz-clean
fuzz-build:
if HAVE_CUDA
	@echo "make fuzz: fuzzing builds the CPU library only: configure --without-cuda (a separate build directory)"; exit 1
endif
	@if test -z "$(FUZZ_CC)"; then \
	  echo "make fuzz: no clang found by configure (Debian: apt-get install clang libclang-rt-14-dev; or FUZZ_CC=...)"; \
	  exit 1; fi
	@$(MAKE) $(AM_MAKEFLAGS) $(FUZZ_TARGETS:%=fuzz/fuzz-%)

fuzz: fuzz-build
	@for t in $(FUZZ_TARGETS); do \
	  $(MKDIR_P) fuzz/corpus/$$t; \
	  seeds=; test -d $(top_srcdir)/fuzz/seeds/$$t && seeds=$(top_srcdir)/fuzz/seeds/$$t; \
	  case $$t in schedule) len=256;; lua_api) len=512;; *) len=4096;; esac; \
	  ASAN_OPTIONS=allocator_may_return_null=1:detect_leaks=1 ./fuzz/fuzz-$$t -max_total_time=$(FUZZ_SECONDS) \
	    -max_len=$$len -print_final_stats=1 -artifact_prefix=fuzz/$$t- fuzz/corpus/$$t $$seeds >fuzz/$$t.log 2>&1; \
	  execs=`sed -n 's/^stat::number_of_executed_units: *//p' fuzz/$$t.log`; \
	  crashes=`ls fuzz/$$t-crash-* fuzz/$$t-leak-* fuzz/$$t-oom-* fuzz/$$t-timeout-* 2>/dev/null | wc -l`; \
	  echo "fuzz $$t: $${execs:-0} executions, $$crashes crash(es) in $(FUZZ_SECONDS) s (log: fuzz/$$t.log)"; \
	done

fuzz-clean:
	rm -rf fuzz/obj fuzz/corpus $(FUZZ_TARGETS:%=fuzz/fuzz-%) $(FUZZ_TARGETS:%=fuzz/%.log)
clean-local: fuzz-clean
