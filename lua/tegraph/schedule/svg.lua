-- svg.lua — the classic pipeline picture: stages as rows, time to the right, one colored box per
-- F/B/W with its microbatch number, bubbles left blank.
local raise = require "tegraph.raise"
local simulate = require "tegraph.schedule.simulate"
local plan_ = require "tegraph.schedule.plan"

local fmt = string.format

-- Fill colors per op; later chunks of a stage get the lighter shade (index 2).
local FILL = {
  F = { "#3f6fb5", "#8fb3e6" },
  B = { "#2e9e5b", "#8fd6a9" },
  BW = { "#1f6b3e", "#6dbb8a" },
  W = { "#d98c1f", "#f2c27a" },
}
local INK = { "#ffffff", "#1a1a1a" }

local function esc(s)
  return (tostring(s):gsub("[&<>\"]", { ["&"] = "&amp;", ["<"] = "&lt;", [">"] = "&gt;", ['"'] = "&quot;" }))
end

local function num(x)
  return (fmt("%.2f", x):gsub("%.?0+$", ""))
end

-- svg(plan [, file [, costs]]) -> svg string; writes it to file when given (raises on failure).
-- Boxes are <rect class="F|B|BW|W"> with a <title> naming the action and its times.
return function(plan, file, costs)
  local r = simulate(plan, costs)
  local P = plan.stages
  local many = (plan.chunks or 1) > 1
  local unit = math.max(6, math.min(40, 1100 / math.max(r.makespan, 1e-9)))
  local left, top, rowh, gap = 64, 34, 26, 6
  local width = left + r.makespan * unit + 16
  local height = top + P * (rowh + gap) + 50
  local out = {}
  local function add(...) out[#out + 1] = fmt(...) end
  add('<?xml version="1.0" encoding="UTF-8"?>\n')
  add('<svg xmlns="http://www.w3.org/2000/svg" width="%s" height="%s" viewBox="0 0 %s %s" font-family="sans-serif">\n',
    num(width), num(height), num(width), num(height))
  add('<rect class="bg" x="0" y="0" width="%s" height="%s" fill="#ffffff"/>\n', num(width), num(height))
  add('<text x="%d" y="20" font-size="14">%s: %d stages, %d microbatches%s, bubble %.1f%%</text>\n', left,
    esc(plan.kind or "plan"), P, plan.microbatches, many and fmt(", %d chunks per stage", plan.chunks) or "",
    100 * r.bubble)
  for s = 1, P do
    local y = top + (s - 1) * (rowh + gap)
    add('<text x="8" y="%s" font-size="12">stage %d</text>\n', num(y + rowh * 0.68), s)
    add('<rect class="row" x="%d" y="%s" width="%s" height="%d" fill="none" stroke="#cccccc"/>\n', left, num(y),
      num(r.makespan * unit), rowh)
    for _, e in ipairs(r.events[s]) do
      local a = e.a
      local kind = (a.op == "B" and a.w) and "BW" or a.op
      local shade = 1
      if many then shade = ((a.chunk - 1) // P) % 2 + 1 end
      local x, w = left + e.start * unit, (e.finish - e.start) * unit
      add('<rect class="%s" x="%s" y="%s" width="%s" height="%d" fill="%s" stroke="#ffffff" stroke-width="1">'
        .. '<title>%s [%s, %s]</title></rect>\n', kind, num(x), num(y), num(w), rowh, FILL[kind][shade],
        esc(plan_.describe(a)), num(e.start), num(e.finish))
      if w >= 9 then
        add('<text x="%s" y="%s" font-size="%d" text-anchor="middle" fill="%s">%d</text>\n', num(x + w / 2),
          num(y + rowh * 0.68), w >= 16 and 12 or 9, INK[shade], a.mb)
      end
    end
  end
  -- Time axis and legend.
  local ay = top + P * (rowh + gap) + 4
  local step = 1
  while step * unit < 30 do step = step * 2 end
  for t = 0, r.makespan, step do
    add('<text x="%s" y="%s" font-size="9" text-anchor="middle" fill="#555555">%s</text>\n', num(left + t * unit),
      num(ay + 10), num(t))
  end
  local lx = left
  for _, k in ipairs({ "F", "B", "BW", "W" }) do
    add('<rect class="legend" x="%d" y="%s" width="14" height="14" fill="%s"/>', lx, num(ay + 20), FILL[k][1])
    add('<text x="%d" y="%s" font-size="12">%s</text>\n', lx + 18, num(ay + 32), k == "BW" and "B+W" or k)
    lx = lx + 60
  end
  if many then
    add('<text x="%d" y="%s" font-size="12" fill="#555555">light: chunks P+1..2P (alternating per pass)</text>\n',
      lx + 10, num(ay + 32))
  end
  add('</svg>\n')
  local svg = table.concat(out)
  if file then
    require("tegraph.options").path("schedule.svg", "the file", file)
    local f, err = io.open(file, "w")
    if not f then raise("schedule.svg: " .. err) end
    f:write(svg)
    f:close()
  end
  return svg
end
