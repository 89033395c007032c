# fuzz/: libFuzzer targets, built and run by `make fuzz` (not by make check). They need clang with its
# libFuzzer (Debian: clang libclang-rt-14-dev), found by configure as FUZZ_CC, and a CPU-only build
# (configure --without-cuda). The library is compiled again by clang under ASan + UBSan into fuzz/obj/.
#   make fuzz [FUZZ_SECONDS=60]   builds every target, runs each for FUZZ_SECONDS, prints executions
#                                 and crashes per target; crashing inputs are kept as fuzz/NAME-crash-*.
#   make fuzz FUZZ_RUNS=N         runs each target for N executions instead (FUZZ_TARGETS="..." picks some).
# Inputs are at most 4096 bytes (schedule: 256, lua_api: 512: longer plans and programs only run slower;
# tokenizer: 8192, a whole byte-level vocabulary is about 3 KB; tokenizer_encode: 1024).
# C targets: fuzz/NAME.c calls the library's C readers on the input's bytes in memory (no Lua per input;
# fast enough for millions of inputs):
#   safetensors       the safetensors reader (open, info, read, metadata)
#   tokens            the token-file check (llm.c .bin and headerless) and the window decoding
#   tokenizer         the GPT-2 tokenizer's files (vocabulary JSON, NUL, merges); what loads round-trips
#   tokenizer_encode  encode / decode of any bytes with a small fixed vocabulary: decode(encode(s)) == s
# Lua-driven targets: fuzz/NAME.lua returns function(bytes), run in one tegraph runtime by harness.c.
#   schedule  the schedule validator (and the simulator on plans it accepts)
#   lua_api   random programs of Lua API calls: create / view / close / capture / replay / hooks / step
#   lua_safetensors, lua_tokens  the same files through the Lua library (tg.safetensors, tegraph.data)
# Another target: fuzz/NAME.c or fuzz/NAME.lua and its name in FUZZ_C_TARGETS or FUZZ_LUA_TARGETS, seeds
# in fuzz/seeds/NAME/ (lua_NAME uses NAME's).
FUZZ_C_TARGETS = safetensors tokens tokenizer tokenizer_encode
FUZZ_LUA_TARGETS = schedule lua_api lua_safetensors lua_tokens
FUZZ_TARGETS = $(FUZZ_C_TARGETS) $(FUZZ_LUA_TARGETS)
FUZZ_SECONDS = 60
FUZZ_RUNS =
FUZZ_SAN = -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
FUZZ_CFLAGS = -g -O1 -std=gnu11 $(FUZZ_SAN)
FUZZ_CPPFLAGS = $(DEFS) -I$(top_srcdir)/src -I$(top_srcdir)/kernels -I$(top_builddir) -DTG_LUADIR='"$(luadir)"' \
	$(LUA_CFLAGS) $(BLAS_CFLAGS) $(MPI_CFLAGS)
FUZZ_LIBS = $(LUA_LIBS) $(BLAS_LIBS) $(MPI_LIBS) -lm -lpthread -ldl
FUZZ_LIB_OBJS = $(patsubst %.c,fuzz/obj/%.o,$(filter %.c,$(libtegraph_la_SOURCES)))
EXTRA_DIST += fuzz/harness.c fuzz/fuzz.h fuzz/tokenizer_common.h $(FUZZ_C_TARGETS:%=fuzz/%.c) \
	$(FUZZ_LUA_TARGETS:%=fuzz/%.lua) fuzz/seeds
CLEANFILES += $(FUZZ_TARGETS:%=fuzz/fuzz-%)

# the library's objects carry libFuzzer's coverage instrumentation (its edges guide the fuzzing)
fuzz/obj/%.o: $(top_srcdir)/%.c config.h
	@$(MKDIR_P) $(@D)
	$(AM_V_CC)$(FUZZ_CC) $(FUZZ_CPPFLAGS) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c -o $@ $<

$(FUZZ_C_TARGETS:%=fuzz/fuzz-%): fuzz/fuzz-%: $(top_srcdir)/fuzz/%.c $(top_srcdir)/fuzz/fuzz.h \
	  $(top_srcdir)/fuzz/tokenizer_common.h $(FUZZ_LIB_OBJS)
	$(AM_V_CCLD)$(FUZZ_CC) $(FUZZ_CPPFLAGS) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $< $(FUZZ_LIB_OBJS) $(FUZZ_LIBS)

$(FUZZ_LUA_TARGETS:%=fuzz/fuzz-%): fuzz/fuzz-%: $(top_srcdir)/fuzz/harness.c $(top_srcdir)/fuzz/%.lua $(FUZZ_LIB_OBJS)
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
	  seeds=; s=$${t#lua_}; test -d $(top_srcdir)/fuzz/seeds/$$s && seeds=$(top_srcdir)/fuzz/seeds/$$s; \
	  case $$t in schedule) len=256;; lua_api) len=512;; tokenizer) len=8192;; tokenizer_encode) len=1024;; *) len=4096;; esac; \
	  limit="-max_total_time=$(FUZZ_SECONDS)"; what="in $(FUZZ_SECONDS) s"; \
	  if test -n "$(FUZZ_RUNS)"; then limit="-runs=$(FUZZ_RUNS)"; what="of $(FUZZ_RUNS) runs"; fi; \
	  ASAN_OPTIONS=allocator_may_return_null=1:detect_leaks=1 ./fuzz/fuzz-$$t $$limit \
	    -max_len=$$len -print_final_stats=1 -artifact_prefix=fuzz/$$t- fuzz/corpus/$$t $$seeds >fuzz/$$t.log 2>&1; \
	  execs=`sed -n 's/^stat::number_of_executed_units: *//p' fuzz/$$t.log`; \
	  crashes=`ls fuzz/$$t-crash-* fuzz/$$t-leak-* fuzz/$$t-oom-* fuzz/$$t-timeout-* 2>/dev/null | wc -l`; \
	  echo "fuzz $$t: $${execs:-0} executions, $$crashes crash(es) $$what (log: fuzz/$$t.log)"; \
	done

fuzz-clean:
	rm -rf fuzz/obj fuzz/corpus $(FUZZ_TARGETS:%=fuzz/fuzz-%) $(FUZZ_TARGETS:%=fuzz/%.log)
clean-local: fuzz-clean
