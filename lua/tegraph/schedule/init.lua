-- tegraph.schedule — pipeline schedules as data: generators (gpipe, 1F1B, interleaved 1F1B,
-- ZB-H1, ZB-V), validation, simulation, SVG pictures, replay orders and the CLI. Plain Lua 5.4:
-- it needs nothing from the C core to load (execute.lua loads it when a plan runs on modules).
local plan_ = require "tegraph.schedule.plan"
local text = require "tegraph.schedule.text"

local M = {
  gpipe = require "tegraph.schedule.gpipe",
  one_f_one_b = require "tegraph.schedule.one_f_one_b",
  interleaved = require "tegraph.schedule.interleaved",
  zb_h1 = require "tegraph.schedule.zb_h1",
  zb_v = require "tegraph.schedule.zb_v",
  validate = require "tegraph.schedule.validate",
  simulate = require "tegraph.schedule.simulate",
  svg = require "tegraph.schedule.svg",
  to_order = text.to_order,
  table = text.table,
  describe = plan_.describe,
  add_comm = plan_.add_comm,
}

-- Running plans on modules (needs the C core, loaded on first call): execute, make_graphed,
-- exec_order (the executed compute order), measure (per-action costs from tg.trace.events()).
local exec = require "tegraph.schedule.execute"
M.execute, M.make_graphed, M.exec_order = exec.execute, exec.make_graphed, exec.order
M.measure = exec.measure

-- Generators by the names the CLI accepts, in the order it lists them.
M.generators = {
  { name = "gpipe", fn = M.gpipe },
  { name = "1f1b", fn = M.one_f_one_b, aliases = { "one_f_one_b" } },
  { name = "interleaved", fn = M.interleaved, chunks = true },
  { name = "zb_h1", fn = M.zb_h1, aliases = { "zb-h1", "zbh1" } },
  { name = "zb_v", fn = M.zb_v, aliases = { "zb-v", "zbv" }, fixed_chunks = 2 },
}

M.cli = require("tegraph.schedule.cli")(M)

return M
