# src/cli: the `tegraph` host program (installed as $(bindir)/tegraph; it finds the Lua library in
# $(luadir) and in TEGRAPH_LUA_PATH, never in the build tree).
bin_PROGRAMS += src/cli/tegraph
src_cli_tegraph_SOURCES = %D%/main.c %D%/launch.h %D%/launch.c
src_cli_tegraph_LDADD = libtegraph.la $(LUA_LIBS)

# ./tegraph in the build tree: a script that runs src/cli/tegraph with the source tree's Lua library
# added to TEGRAPH_LUA_PATH, so a fresh build runs scripts (and make check its tests) without
# `make install`. Not installed.
noinst_SCRIPTS += tegraph
CLEANFILES += tegraph
tegraph: Makefile src/cli/tegraph$(EXEEXT)
	$(AM_V_GEN)rm -f $@ $@.tmp && { \
	  echo '#!/bin/sh'; \
	  echo '# tegraph of this build tree, not installed: src/cli/tegraph with the Lua library of the source tree.'; \
	  echo 'TEGRAPH_LUA_PATH="$${TEGRAPH_LUA_PATH:+$$TEGRAPH_LUA_PATH;}$(abs_top_srcdir)/lua"'; \
	  echo 'export TEGRAPH_LUA_PATH'; \
	  echo 'exec "$(abs_top_builddir)/src/cli/tegraph" "$$@"'; \
	} > $@.tmp && chmod +x $@.tmp && mv $@.tmp $@
