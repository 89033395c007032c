# t: TAP tests. C programs are named for what they prove; GPU tests skip without a device.
EXTRA_DIST += t/lib/tap.lua t/lib/adamw_fixture.lua t/lib/grads.lua t/lib/run_example.lua t/lib/caller.lua
include $(srcdir)/t/core.mk
include $(srcdir)/t/lua.mk
include $(srcdir)/t/cuda.mk
include $(srcdir)/t/nn-ops.mk
include $(srcdir)/t/nn.mk
include $(srcdir)/t/gpt.mk
include $(srcdir)/t/graph.mk
include $(srcdir)/t/schedule.mk
include $(srcdir)/t/dist.mk
include $(srcdir)/t/sched.mk
include $(srcdir)/t/trace.mk
include $(srcdir)/t/errors.mk
include $(srcdir)/t/fp8-ops.mk
include $(srcdir)/t/fp8.mk
include $(srcdir)/t/docs.mk
