#!/bin/sh
# program-finds-lua-only-where-installed.sh — the built program and library carry no path of the source
# tree's Lua library: the program searches TEGRAPH_LUA_PATH and the installed Lua directory only, and
# ./tegraph of the build tree is what adds the source tree's lua/ (to TEGRAPH_LUA_PATH); a user's LUA_PATH comes
# before the installed Lua directory (a shared one: its other modules must not shadow the user's).
B="${TG_TOP_BUILDDIR:-.}"
S="${TG_TOP_SRCDIR:-.}"
LUADIR="$(cd "$S/lua" && pwd)"
RAW="$S/lua" # the build's own spelling (abs_top_srcdir may hold "..")
case "$S" in /*) ;; *) RAW="$LUADIR" ;; esac
echo "1..5"

# 1: no binary of the build (program, shared or static library, Lua C module) holds "<srcdir>/lua" as a path.
found="" n=0
for f in "$B/src/cli/.libs/tegraph" "$B/src/cli/.libs/lt-tegraph" "$B/src/cli/tegraph" \
         "$B/.libs/libtegraph.so" "$B/.libs/libtegraph.a" "$B/lua/.libs/tegraph.so"; do
    [ -f "$f" ] || continue
    head -c 4 "$f" | grep -q "ELF\|!<ar" || continue # binaries only (src/cli/tegraph may be libtool's script)
    n=$((n + 1))
    # the directory as a string of its own or a search pattern under it; a source file's name that only
    # starts with the same characters (a tree at /src holds src/lua/*.c) is not a search path
    if strings -a "$f" | grep -q -x -F -e "$LUADIR" -e "$RAW" -e "$LUADIR/" -e "$RAW/" ||
       grep -a -q -F -e "$LUADIR/?" -e "$RAW/?" -e "$LUADIR;" -e "$RAW;" "$f"; then found="$found $f"; fi
done
if [ "$n" -gt 0 ] && [ -z "$found" ]; then echo "ok 1 - $n binaries, none names $LUADIR"
else echo "not ok 1 - binaries checked: $n; naming $LUADIR:$found"; fi

# 2: the program itself, without TEGRAPH_LUA_PATH, does not put the source tree's lua/ on package.path
# (it loads the library from the installed directory, or fails to find it there; either way no source path).
out=$(env -u TEGRAPH_LUA_PATH -u LUA_PATH -u LUA_CPATH "$B/src/cli/tegraph" -e 'print(package.path)' 2>&1)
case "$out" in
    *"$LUADIR/?"* | *"$RAW/?"*) echo "not ok 2 - src/cli/tegraph searches $LUADIR" ;;
    *) echo "ok 2 - src/cli/tegraph does not search $LUADIR" ;;
esac
echo "$out" | head -5 | sed 's/^/# /'

# 3, 4: ./tegraph of the build tree runs scripts from the source tree's Lua library, and a TEGRAPH_LUA_PATH
# of the caller comes first.
out=$(env -u TEGRAPH_LUA_PATH -u LUA_PATH "$B/tegraph" --device cpu -e 'print(package.searchpath("tegraph.schedule", package.path))' 2>&1)
dir=$(cd "$(dirname "$out")" 2>/dev/null && pwd)
if [ -f "$out" ] && [ "$dir" = "$LUADIR/tegraph/schedule" ]; then echo "ok 3 - ./tegraph finds the library in $LUADIR"
else echo "not ok 3 - ./tegraph found: $out"; fi
tmp="${TMPDIR:-/tmp}/tg-luapath-$$"
mkdir -p "$tmp" && echo 'return "mine"' > "$tmp/probe_mod.lua"
out=$(env -u LUA_PATH TEGRAPH_LUA_PATH="$tmp" "$B/tegraph" --device cpu -e 'print(require "probe_mod", package.path:sub(1, #"'"$tmp"'/?.lua;") == "'"$tmp"'/?.lua;")' 2>&1)
rm -rf "$tmp"
if [ "$out" = "mine	true" ]; then echo "ok 4 - ./tegraph keeps the caller's TEGRAPH_LUA_PATH first"
else echo "not ok 4 - got: $out"; fi
# 5: the installed directory (the path's last entries, which stock Lua's default path may hold too) comes after LUA_PATH
out=$(TEGRAPH_LUA_PATH="$S/lua" LUA_PATH="/nonexistent-user-dir/?.lua" "$B/src/cli/tegraph" -e 'print(package.path)' 2>&1)
case "$out" in
    "$S/lua/?.lua;$S/lua/?/init.lua;/nonexistent-user-dir/?.lua;"*) echo "ok 5 - a script's require searches LUA_PATH before the installed Lua directory" ;;
    *) echo "not ok 5 - package.path: $out" ;;
esac
exit 0
