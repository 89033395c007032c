# lua/tegraph: the Lua library, installed into Lua's module path.
tegraphluadir = $(luadir)/tegraph
dist_tegraphlua_DATA = \
	%D%/tegraph/init.lua %D%/tegraph/raise.lua %D%/tegraph/options.lua \
	%D%/tegraph/nn.lua %D%/tegraph/optim.lua %D%/tegraph/data.lua %D%/tegraph/text.lua %D%/tegraph/progress.lua \
	%D%/tegraph/cli.lua %D%/tegraph/checkpoint.lua %D%/tegraph/gpt2.lua %D%/tegraph/fp8.lua \
	%D%/tegraph/train.lua
# lua/tegraph/schedule: pipeline schedules (pure Lua; see t/schedule.mk).
tegraphscheduledir = $(luadir)/tegraph/schedule
dist_tegraphschedule_DATA = \
	%D%/tegraph/schedule/init.lua \
	%D%/tegraph/schedule/plan.lua \
	%D%/tegraph/schedule/engine.lua \
	%D%/tegraph/schedule/validate.lua \
	%D%/tegraph/schedule/simulate.lua \
	%D%/tegraph/schedule/svg.lua \
	%D%/tegraph/schedule/text.lua \
	%D%/tegraph/schedule/cli.lua \
	%D%/tegraph/schedule/execute.lua \
	%D%/tegraph/schedule/gpipe.lua \
	%D%/tegraph/schedule/one_f_one_b.lua \
	%D%/tegraph/schedule/interleaved.lua \
	%D%/tegraph/schedule/zb_h1.lua \
	%D%/tegraph/schedule/zb_v.lua
# lua/tegraph/reduce: gradient-reduce policies (hooks + tegraph.comm; see t/dist.mk).
tegraphreducedir = $(luadir)/tegraph/reduce
dist_tegraphreduce_DATA = \
	%D%/tegraph/reduce/init.lua \
	%D%/tegraph/reduce/ddp.lua \
	%D%/tegraph/reduce/zero1.lua
