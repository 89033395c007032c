# src/cli: the `tegraph` host program.
bin_PROGRAMS += tegraph
tegraph_SOURCES = %D%/main.c %D%/launch.h %D%/launch.c
tegraph_LDADD = libtegraph.la $(LUA_LIBS)
